"""Every node: /etc/hosts, users and groups with the spec's ids, time sync."""
from __future__ import annotations

import io
import json

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, deploy, operation
from pyinfra.operations import files, server, systemd

from estate.model import directory
from roles._lib.facts import Getent
from roles._lib import (consumed, in_container, install, install_packages, install_secret,
                        render_dir, secrets_dir)


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
        if g.get("source") == "directory":
            continue
        have = groups.get(g["name"])
        if have is None:
            yield StringCommand("groupadd", *(["-r"] if g["gid"] < 1000 else []),
                                "--gid", QuoteString(str(g["gid"])), QuoteString(g["name"]))
        elif int(have[2]) != g["gid"]:
            raise OperationError(_mismatch("group", g["name"], int(have[2]), g["gid"]))
    for u in doc["users"]:
        if u.get("source") == "directory":   # SSSD resolves it (directory_client)
            continue
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
    if consumed(directory.SSSD_CONF):
        directory_client()
    # A container shares the host's clock and may not set it: chrony.service's
    # ConditionCapability=CAP_SYS_TIME skips it there. Enabled everywhere, run where it can.
    systemd.service(name="Enable chrony", service="chrony", enabled=True,
                    running=None if in_container() else True)


def directory_client() -> None:
    """SSSD where the spec has a directory (estate.model.directory): its packages, the CA,
    sssd.conf as rendered, the bind password's snippet from the secrets directory,
    nsswitch, and PAM on the login nodes only (libpam-sss's own pam-auth-update profile)."""
    login = bool(consumed(directory.PAM_PROFILES))
    install_packages("common", extras=("directory",) + (("login",) if login else ()))
    if directory.ESTATE_CA in (render_dir() / directory.SSSD_CONF).read_text():
        install_secret(directory.ESTATE_CA_SECRET, directory.ESTATE_CA, "root", mode="0644")
    changed = [install(directory.SSSD_CONF)]
    for path in consumed(directory.BIND):
        install(path)
        changed.append(_bind_dropin(json.loads((render_dir() / path).read_bytes())))
    install(directory.NSSWITCH)
    if login:
        install(directory.PAM_PROFILES)
        server.shell(name="PAM through SSSD on a login node",
                     commands=["grep -q pam_sss.so /etc/pam.d/common-auth || "
                               "pam-auth-update --package --enable sss"])
    systemd.service(name="SSSD", service="sssd", enabled=True, running=True,
                    restarted=any(op.did_change for op in changed))


def _bind_dropin(doc: dict):
    """The snippet SSSD merges into the domain: the bind password, the secret file's first
    line. The op's name shows paths only."""
    src = secrets_dir() / doc["secret_file"]
    if not src.is_file():
        raise OperationError(f"secret {doc['secret_file']!r} (identity.directory.bind_secret) "
                             f"is missing from {secrets_dir()}")
    lines = src.read_text().splitlines()
    text = f"[{doc['section']}]\n{doc['key']} = {lines[0] if lines else ''}\n"
    return files.put(name=f"Install the directory's bind password -> {doc['dropin']}",
                     src=io.BytesIO(text.encode()), dest=doc["dropin"], user="root",
                     group="root", mode="0600", create_remote_dir=True)
