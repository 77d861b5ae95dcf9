"""Every node: /etc/hosts, users and groups with the spec's ids, time sync."""
from __future__ import annotations

import json

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, deploy, operation
from pyinfra.operations import systemd

from roles._lib.facts import Getent
from roles._lib import consumed, in_container, install, install_packages, render_dir


def _table(db: str) -> dict[str, list[str]]:
    return host.get_fact(Getent, db=db)


@operation(is_idempotent=True)
def identity(doc: dict):
    """Groups and users with the spec's ids, from two look-ups rather than one per account.

    An account that exists with another id is an error, never changed in place:
    files on disk and on shared storage keep the old id.
    """
    groups, users = _table("group"), _table("passwd")
    for g in doc["groups"]:
        have = groups.get(g["name"])
        if have is None:
            yield StringCommand("groupadd", *(["-r"] if g["gid"] < 1000 else []),
                                "--gid", QuoteString(str(g["gid"])), QuoteString(g["name"]))
        elif int(have[2]) != g["gid"]:
            raise OperationError(_mismatch("group", g["name"], int(have[2]), g["gid"]))
    for u in doc["users"]:
        have = users.get(u["name"])
        if have is None:
            yield StringCommand(
                "useradd", *(["-r", "-M"] if u["system"] else ["-m"]), "--uid",
                QuoteString(str(u["uid"])),
                "-g", QuoteString(u["group"]), "-d", QuoteString(u["home"]),
                "-s", QuoteString(u["shell"]), QuoteString(u["name"]))
            continue
        if int(have[2]) != u["uid"]:
            raise OperationError(_mismatch("user", u["name"], int(have[2]), u["uid"]))
        fix = []
        if u["gid"] is not None and int(have[3]) != u["gid"]:
            fix += ["-g", QuoteString(u["group"])]
        if have[5] != u["home"]:
            fix += ["-d", QuoteString(u["home"])]
        if have[6] != u["shell"]:
            fix += ["-s", QuoteString(u["shell"])]
        if fix:
            yield StringCommand("usermod", *fix, QuoteString(u["name"]))


def _mismatch(kind: str, name: str, have: int, want: int) -> str:
    return (f"{host.name}: {kind} {name} has id {have} but the spec's identity says {want}; "
            f"move its files to {want} by hand (usermod/groupmod + chown) or fix the spec")


@deploy("common")
def common() -> None:
    # Users first: packages installed later (munge, slurm) then find their accounts
    # with the spec's ids instead of creating them with whatever id is free.
    for path in consumed("common/identity.json"):
        identity(name="Users and groups with the spec's ids",
                 doc=json.loads((render_dir() / path).read_bytes()))
        install(path)
    for path in consumed("common/hosts"):
        install(path)
    install_packages("common")
    # A container shares the host's clock and may not set it: chrony.service's
    # ConditionCapability=CAP_SYS_TIME skips it there. Enabled everywhere, run where it can.
    systemd.service(name="Enable chrony", service="chrony", enabled=True,
                    running=None if in_container() else True)
