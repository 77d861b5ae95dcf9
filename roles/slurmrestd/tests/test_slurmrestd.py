"""slurmrestd: running unprivileged, listening on the rendered address only."""
from __future__ import annotations

ROLE = "slurmrestd"


def test_running_unprivileged(host, node):
    svc = host.service("slurmrestd")
    assert svc.is_running and svc.is_enabled
    users = host.run("ps -o user= -C slurmrestd").stdout.split()
    assert users and "root" not in users and "slurm" not in users, users


def test_listens_only_on_its_segment(host, node, ctx):
    addr = ctx.rest_listen(node)
    port = addr.rsplit(":", 1)[1]
    sockets = [s for s in host.socket.get_listening_sockets() if s.endswith(f":{port}")]
    assert sockets == [f"tcp://{addr}"], f"slurmrestd listens on {sockets}, want only {addr}"
