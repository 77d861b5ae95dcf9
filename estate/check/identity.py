"""Identity validators: users and groups rendered identically onto every node, and the IDs
Kubernetes tenants' pods are granted from them (kubernetes.tenants[].run_as)."""
from __future__ import annotations

from estate.check._common import duplicates, problem
from estate.findings import Severity
from estate.check.registry import validator

E, W = Severity.ERROR, Severity.WARNING

# Debian's policy: 0-99 and 65534 belong to base-passwd, 100-999 are dynamic system ids,
# 60000-64999 are static system ids (slurm is 64030 there), 1000-59999 are people.
_PEOPLE = range(1000, 60000)


def _id_lists(identity):
    yield "users", "user", identity.users, "uid"
    yield "groups", "group", identity.groups, "gid"


@validator("identity.duplicate_name", E, "identity", "two users or two groups share a name")
def duplicate_name(estate):
    for key, label, items, _ in _id_lists(estate.spec.identity):
        for i, item, first in duplicates(items, lambda x: x.name):
            yield problem(("identity", key, i, "name"), f"{label} '{item.name}' is defined "
                          f"twice (first at identity.{key}[{first}])", "remove one")


@validator("identity.id_collision", E, "identity", "two users share a UID or two groups a GID")
def id_collision(estate):
    for key, label, items, field in _id_lists(estate.spec.identity):
        for i, item, first in duplicates(items, lambda x: getattr(x, field)):
            yield problem(("identity", key, i, field), f"{field} {getattr(item, field)} of "
                          f"{label} '{item.name}' is also {items[first].name}'s; files "
                          "written by one belong to the other on every node",
                          f"give '{item.name}' an unused {field}")


@validator("identity.unknown_group", E, "identity", "a user's primary group is not defined")
def unknown_group(estate):
    groups = {g.name for g in estate.spec.identity.groups}
    for i, user in enumerate(estate.spec.identity.users):
        if user.group not in groups:
            yield problem(("identity", "users", i, "group"), f"user '{user.name}' has unknown "
                          f"group '{user.group}'; useradd fails", "add the group under "
                          "identity.groups, or use an existing one")


@validator("identity.reserved_id", E, "identity", "a user or group takes id 0 or 65534")
def reserved_id(estate):
    reserved = {0: ("root",), 65534: ("nobody", "nogroup")}
    for key, label, items, field in _id_lists(estate.spec.identity):
        for i, item in enumerate(items):
            value = getattr(item, field)
            if value in reserved and item.name not in reserved[value]:
                yield problem(("identity", key, i, field), f"{field} {value} belongs to "
                              f"{reserved[value][0]} on every Linux node", f"pick another {field}")


@validator("identity.uid_range", W, "identity",
           "a system user in the people range, or a person in the system range")
def uid_range(estate):
    for i, user in enumerate(estate.spec.identity.users):
        if user.uid in (0, 65534):
            continue
        if user.system == (user.uid in _PEOPLE):
            want = "below 1000 or in 60000-64999" if user.system else "in 1000-59999"
            kind = "system user" if user.system else "user"
            yield problem(("identity", "users", i, "uid"), f"{kind} '{user.name}' has uid "
                          f"{user.uid}; it may clash with ids the OS or directory hands out",
                          f"use a uid {want}")


@validator("identity.missing_service_account", E, "identity",
           "a daemon's service account (slurm, munge) is not defined")
def missing_service_account(estate):
    from estate.model.services import MUNGE_USER, SLURM_USER
    if not estate.role_hosts("slurm_controller") and not estate.role_hosts("slurm_worker"):
        return
    users = {u.name for u in estate.spec.identity.users}
    for account in (SLURM_USER, MUNGE_USER):
        if account not in users:
            yield problem(("identity", "users"), f"user '{account}' is not defined; the Slurm "
                          "daemons run as it and its UID must be the same on every node",
                          f"add {{name: {account}, uid: <fixed>, group: {account}, "
                          "system: true}} and its group")


def _grants(estate):
    """(tenant index, tenant) for each Kubernetes tenant with a run_as grant."""
    plane = estate.spec.kubernetes
    for ti, tenant in enumerate(plane.tenants if plane else ()):
        if tenant.run_as:
            yield ti, tenant


@validator("identity.run_as_unknown", E, "identity",
           "a tenant's run_as names a user or group that identity does not define")
def run_as_unknown(estate):
    ident = estate.spec.identity
    known = {"users": {u.name for u in ident.users}, "groups": {g.name for g in ident.groups}}
    for ti, tenant in _grants(estate):
        for key in ("users", "groups"):
            for i, name in enumerate(getattr(tenant.run_as, key)):
                if name not in known[key]:
                    yield problem(("kubernetes", "tenants", ti, "run_as", key, i), f"tenant "
                                  f"'{tenant.name}' runs as {key[:-1]} '{name}', which "
                                  f"identity.{key} does not define: it has no ID to admit "
                                  "pods by", f"add it to identity.{key}, or fix the name")


def _system_account(user) -> bool:
    from estate.model.services import MUNGE_USER, SLURM_USER
    return user.system or user.uid == 0 or user.name in (SLURM_USER, MUNGE_USER)


@validator("identity.run_as_system", E, "identity",
           "a tenant's pods granted root's or a system account's ID (slurm, munge)")
def run_as_system(estate):
    ident = estate.spec.identity
    users = {u.name: u for u in ident.users}
    system = {u.group for u in ident.users if _system_account(u)} | \
        {g.name for g in ident.groups if g.gid == 0}
    for ti, tenant in _grants(estate):
        loc = ("kubernetes", "tenants", ti, "run_as")
        for i, name in enumerate(tenant.run_as.users):
            user = users.get(name)
            if user and _system_account(user):
                yield problem((*loc, "users", i), f"tenant '{tenant.name}' runs as '{name}' "
                              f"(uid {user.uid}), root or a system account: its pods would own "
                              "the daemons' files wherever they reach them",
                              "grant a person's or the tenant's own user")
            elif user and user.group in system:
                yield problem((*loc, "users", i), f"tenant '{tenant.name}' runs as "
                              f"'{name}', whose primary group '{user.group}' (granted with "
                              "the user) is root's or a system account's",
                              f"give '{name}' a primary group of its own")
        for i, name in enumerate(tenant.run_as.groups):
            if name in system:
                yield problem((*loc, "groups", i), f"tenant '{tenant.name}' is granted group "
                              f"'{name}', root's or a system account's: its pods could read "
                              "and write what the daemons' group owns", "grant a people's group")
