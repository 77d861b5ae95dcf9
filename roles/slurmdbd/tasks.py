"""slurmdbd with MariaDB on the same node, reached over its unix socket (no password)."""
from __future__ import annotations

import re

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, deploy, operation
from pyinfra.operations import systemd

from roles._lib.facts import MysqlGrants
from roles._lib import consumed, digest_of, install, install_packages, runtime, service_current


# MariaDB names go into SQL as identifiers and account names: plain ones only.
SQL_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


@operation(is_idempotent=True)
def database(db: str, user: str):
    """The accounting database, and its owner authenticated by unix socket."""
    for value in (db, user):
        if not SQL_NAME.fullmatch(value):
            raise OperationError(f"{host.name}: {value!r} (StorageLoc/StorageUser in the "
                                 "rendered slurmdbd.conf) is not a plain MariaDB name")
    grants = host.get_fact(MysqlGrants, user=user)
    if f"`{db}`" in grants and "unix_socket" in grants:
        host.noop(f"database {db} and user {user} exist")
        return
    sql = (f"CREATE DATABASE IF NOT EXISTS `{db}`; "
           f"CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED VIA unix_socket; "
           f"GRANT ALL PRIVILEGES ON `{db}`.* TO '{user}'@'localhost';")
    yield StringCommand("mysql", "-e", QuoteString(sql))


@deploy("slurmdbd")
def slurmdbd() -> None:
    if "slurm/slurmdbd.conf" not in consumed("slurm/slurmdbd.conf"):
        return
    db, user = runtime("slurmdbd_database"), runtime("slurmdbd_db_user")
    if not db or not user:
        raise OperationError(f"{host.name}: the rendered slurmdbd.conf names no StorageLoc/"
                             "StorageUser; re-render the spec")
    install_packages("slurmdbd")
    systemd.service(name="Run MariaDB", service="mariadb", running=True, enabled=True)
    database(name=f"Database {db} for {user}", db=db, user=user)
    install("slurm/slurmdbd.conf")
    service_current(name="slurmdbd on the current config", service="slurmdbd",
                    digest=digest_of(["slurm/slurmdbd.conf"]))
    systemd.service(name="Enable slurmdbd", service="slurmdbd", running=True, enabled=True)
