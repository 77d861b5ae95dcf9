"""slurmdbd: running with MariaDB, the database reachable only locally."""
from __future__ import annotations

import shlex

ROLE = "slurmdbd"


def test_services(host, node):
    for name in ("mariadb", "slurmdbd"):
        svc = host.service(name)
        assert svc.is_running and svc.is_enabled, f"{name} is not running and enabled"


def test_mariadb_listens_only_locally(host, node):
    sockets = [s for s in host.socket.get_listening_sockets() if s.endswith(":3306")]
    assert sockets and all("127.0.0.1" in s or "::1" in s for s in sockets), sockets


def test_accounting_database_answers(host, node, ctx):
    db = ctx.runtime["slurmdbd_database"]
    user = shlex.quote(ctx.runtime["slurmdbd_db_user"])
    out = host.run(f"runuser -u {user} -- mysql -NBe 'SELECT 1' {shlex.quote(db)}")
    assert out.rc == 0, f"{db} is not reachable as its user over the socket: {out.stderr}"
