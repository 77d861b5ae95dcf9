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


# --- a directory (identity.directory) ------------------------------------------------------

def _directory(estate):
    return estate.spec.identity.directory


@validator("identity.directory_without_tls", E, "identity",
           "a directory reached over ldap:// without StartTLS")
def directory_without_tls(estate):
    d = _directory(estate)
    for i, uri in enumerate(d.uris if d and not d.start_tls else ()):
        if uri.startswith("ldap://"):
            yield problem(("identity", "directory", "uris", i), f"{uri} is plain LDAP and "
                          "start_tls is off: the bind password and every user's password "
                          "at login would cross the network in clear",
                          "use ldaps://, or set identity.directory.start_tls: true")


@validator("identity.bind_secret_inline", E, "identity",
           "the directory's bind password is written in the spec")
def bind_secret_inline(estate):
    d = _directory(estate)
    if d and d.bind_secret is not None and not hasattr(d.bind_secret, "file"):
        # never echo it: the finding names where it is, not what it is
        yield problem(("identity", "directory", "bind_secret"), "the bind password is "
                      "written in the spec, which is versioned and rendered from; it must "
                      "live with the munge key, outside the spec",
                      "write {file: ldap-bind.secret, env: ESTATE_LDAP_BIND_B64} and put "
                      "the password in that file of the secrets directory (or the variable)")


@validator("identity.bind_dn_without_secret", E, "identity",
           "a bind DN with nowhere to find its password, or a password without a DN")
def bind_dn_without_secret(estate):
    d = _directory(estate)
    if d and (d.bind_dn is None) != (d.bind_secret is None):
        have, lack = ("bind_dn", "bind_secret") if d.bind_secret is None else \
            ("bind_secret", "bind_dn")
        yield problem(("identity", "directory", lack), f"{have} is set but {lack} is not: "
                      "SSSD cannot bind", "set both, or neither for anonymous binds")


@validator("identity.directory_source_without_directory", E, "identity",
           "a user or group with source directory, and no identity.directory")
def source_without_directory(estate):
    if _directory(estate):
        return
    for key, label, items, _ in _id_lists(estate.spec.identity):
        for i, item in enumerate(items):
            if item.source == "directory":
                yield problem(("identity", key, i, "source"), f"{label} '{item.name}' is "
                              "a directory account, but the spec names no directory: no "
                              "node could resolve it", "add identity.directory, or make "
                              "it source: local")


def _shadowing(identity):
    """(key, index, name, why) for each local account a node's `files` would answer for
    instead of the directory (nsswitch reads files first)."""
    wanted = set(identity.directory.groups)
    for i, user in enumerate(identity.users):
        if user.source == "local" and not _system_account(user):
            yield "users", i, user.name, "a person, who belongs in the directory"
    for i, group in enumerate(identity.groups):
        if group.source == "local" and group.name in wanted:
            yield "groups", i, group.name, "listed in identity.directory.groups"


@validator("identity.local_shadows_directory", E, "identity",
           "with a directory, a local account that shadows a directory one")
def local_shadows_directory(estate):
    ident = estate.spec.identity
    if not ident.directory:
        return
    for key, i, name, why in _shadowing(ident):
        yield problem(("identity", key, i, "source"), f"{key[:-1]} '{name}' is local and "
                      f"{why}: nsswitch reads files before sss, so every node would answer "
                      "with the local entry and the directory's would never be seen",
                      "set source: directory (or system: true for a daemon's account)")


@validator("identity.directory_group_unknown", E, "identity",
           "identity.directory.groups names a group identity.groups does not define")
def directory_group_unknown(estate):
    ident = estate.spec.identity
    known = {g.name for g in ident.groups}
    for i, name in enumerate(ident.directory.groups if ident.directory else ()):
        if name not in known:
            yield problem(("identity", "directory", "groups", i), f"directory group "
                          f"'{name}' is not in identity.groups: the spec has no GID for it "
                          "to check the directory's against",
                          f"add {{name: {name}, gid: <the directory's>, source: directory}}")


@validator("identity.system_from_directory", E, "identity",
           "a daemon's account (system, slurm, munge) is a directory account")
def system_from_directory(estate):
    for i, user in enumerate(estate.spec.identity.users):
        if user.source == "directory" and _system_account(user):
            yield problem(("identity", "users", i, "source"), f"user '{user.name}' is a "
                          "daemon's account: a node that boots without the directory could "
                          "not start the daemon", "make it source: local")
