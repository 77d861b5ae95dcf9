"""`estate import --directory URI`: the people and groups of an LDAP directory as the spec's
identity (source: directory), with the identity.directory block that points the nodes at it.

Read with ldap3 (pure Python). Only the POSIX attributes the spec holds are read: a user's
uid, uidNumber, gidNumber, homeDirectory and loginShell; a group's cn and gidNumber, and its
members (memberUid under rfc2307, member DNs under rfc2307bis) where --directory-group
narrows the import to the members of some groups. Nothing is written to the directory.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

BIND_SECRET_FILE = "ldap-bind.secret"
BIND_SECRET_ENV = "ESTATE_LDAP_BIND_B64"
_USER_ATTRS = ["uid", "uidNumber", "gidNumber", "homeDirectory", "loginShell"]
_GROUP_ATTRS = ["cn", "gidNumber", "memberUid", "member"]


class DirectoryFailed(RuntimeError):
    """The directory could not be read (its message says why, without the password)."""


@dataclass(frozen=True)
class DirectorySource:
    uri: str
    users_base: str
    groups_base: str
    ldap_schema: str = "rfc2307bis"
    ca_file: Path | None = None          # None: the system's trust store
    start_tls: bool = False
    bind_dn: str | None = None
    password: str | None = field(default=None, repr=False)
    groups: tuple[str, ...] = ()         # only these groups' members; empty: everyone


def _connection(src: DirectorySource):
    import ldap3
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, version=ssl.PROTOCOL_TLS_CLIENT,
                    ca_certs_file=str(src.ca_file) if src.ca_file else None)
    server = ldap3.Server(src.uri, use_ssl=src.uri.startswith("ldaps://"), tls=tls,
                          connect_timeout=10, get_info=ldap3.NONE)
    conn = ldap3.Connection(server, user=src.bind_dn, password=src.password,
                            receive_timeout=30, raise_exceptions=True, read_only=True)
    try:
        conn.open()
        if src.start_tls:
            conn.start_tls()
        conn.bind()
    except ldap3.core.exceptions.LDAPException as exc:
        raise DirectoryFailed(f"{src.uri}: {type(exc).__name__}: {exc}") from None
    return conn


def _search(conn, base: str, flt: str, attrs: list[str]) -> list[dict]:
    import ldap3
    try:
        entries = conn.extend.standard.paged_search(base, flt, attributes=attrs,
                                                    paged_size=500, generator=False)
    except ldap3.core.exceptions.LDAPException as exc:
        raise DirectoryFailed(f"search of {base}: {type(exc).__name__}: {exc}") from None
    return [{"dn": e["dn"], **e["attributes"]} for e in entries if e.get("type") == "searchResEntry"]


def _one(value):
    return value[0] if isinstance(value, list) else value


def read_directory(src: DirectorySource) -> dict:
    """{"groups": [...], "users": [...]}: the spec's accounts, source directory, by name."""
    conn = _connection(src)
    try:
        users = _search(conn, src.users_base, "(objectClass=posixAccount)", _USER_ATTRS)
        groups = _search(conn, src.groups_base, "(objectClass=posixGroup)", _GROUP_ATTRS) \
            if src.ldap_schema == "rfc2307" else \
            _search(conn, src.groups_base, "(&(gidNumber=*)(|(objectClass=posixGroup)"
                    "(objectClass=groupOfNames)))", _GROUP_ATTRS)
    finally:
        conn.unbind()
    return identity_of(users, groups, src.ldap_schema, src.groups)


def identity_of(users: list[dict], groups: list[dict], schema: str,
                only: tuple[str, ...] = ()) -> dict:
    """The spec's identity from directory entries (ldap3's attribute dicts)."""
    by_gid = {int(_one(g["gidNumber"])): str(_one(g["cn"])) for g in groups}
    members = {str(_one(g["cn"])): _members(g, schema) for g in groups}
    wanted_groups = set(only) if only else set(members)
    out_users = []
    for u in sorted(users, key=lambda u: int(_one(u["uidNumber"]))):
        name, gid = str(_one(u["uid"])), int(_one(u["gidNumber"]))
        group = by_gid.get(gid)
        if group is None:
            continue   # a primary group the directory does not have: not expressible
        if only and group not in wanted_groups and \
                not any(name in members[g] or u["dn"] in members[g] for g in only if g in members):
            continue
        user = {"name": name, "uid": int(_one(u["uidNumber"])), "group": group}
        if _one(u.get("homeDirectory")):
            user["home"] = str(_one(u["homeDirectory"]))
        if _one(u.get("loginShell")):
            user["shell"] = str(_one(u["loginShell"]))
        out_users.append({**user, "source": "directory"})
    needed = wanted_groups | {u["group"] for u in out_users}
    out_groups = [{"name": name, "gid": gid, "source": "directory"}
                  for gid, name in sorted(by_gid.items()) if name in needed]
    return {"groups": out_groups, "users": out_users}


def _members(group: dict, schema: str) -> set[str]:
    key = "memberUid" if schema == "rfc2307" else "member"
    value = group.get(key) or []
    return {str(v) for v in (value if isinstance(value, list) else [value])}


def directory_block(src: DirectorySource, imported: dict) -> dict:
    """identity.directory for the spec: where the nodes find the directory. The password
    stays where it was read from; the spec names the secrets directory's file for it."""
    block: dict[str, object] = {"uris": [src.uri], "users_base": src.users_base, "groups_base": src.groups_base,
             "ca": str(src.ca_file) if src.ca_file else "estate", "ldap_schema": src.ldap_schema,
             "groups": list(src.groups) or [g["name"] for g in imported["groups"]]}
    if src.start_tls:
        block["start_tls"] = True
    if src.bind_dn:
        block.update(bind_dn=src.bind_dn,
                     bind_secret={"file": BIND_SECRET_FILE, "env": BIND_SECRET_ENV})
    return block


def merge(identity: dict, imported: dict, block: dict) -> dict:
    """The service accounts the Slurm import found (local), then the directory's accounts;
    a directory account named like a service account is left out (those stay local)."""
    local_users = {u["name"] for u in identity["users"]}
    local_groups = {g["name"] for g in identity["groups"]}
    return {"groups": identity["groups"] + [g for g in imported["groups"]
                                            if g["name"] not in local_groups],
            "users": identity["users"] + [u for u in imported["users"]
                                          if u["name"] not in local_users],
            "directory": block}
