"""Users and groups with fixed UIDs/GIDs, as data the common role applies on every node."""
from __future__ import annotations

import json

from estate.model import directory
from estate.model.services import IDENTITY
from estate.model.storage import home_of
from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate


def render_identity(estate: Estate, source: str = "") -> list[Artifact]:
    ident = estate.spec.identity
    gids = {g.name: g.gid for g in ident.groups}
    doc = {
        "groups": [{"name": g.name, "gid": g.gid} for g in ident.groups],
        "users": [{"name": u.name, "uid": u.uid, "group": u.group, "gid": gids.get(u.group),
                   "home": home_of(u), "shell": u.shell, "system": u.system, **_source(u)}
                  for u in ident.users],
    }
    for entry, group in zip(doc["groups"], ident.groups):
        entry.update(_source(group))
    return [Artifact(IDENTITY, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(),
                     _everyone(estate)), *render_directory(estate, source)]


def _source(account) -> dict:
    """A directory account says so (the common role leaves it to SSSD); a local one says
    nothing, so that a spec without a directory renders what it always did."""
    return {"source": "directory"} if account.source == "directory" else {}


def _everyone(estate: Estate) -> Hostlist:
    return Hostlist([r for hl in estate.group_hosts for r in hl.ranges])


# --- a directory: SSSD on every node ----------------------------------------------------

def render_directory(estate: Estate, source: str) -> list[Artifact]:
    """sssd.conf and nsswitch.conf for every node, PAM profiles for the login nodes; nothing
    without identity.directory (local files mode)."""
    ident = estate.spec.identity
    d = ident.directory
    if d is None:
        return []
    everyone = _everyone(estate)
    ctx = _sssd_context(estate, source, d)
    out = [Artifact(directory.SSSD_CONF, render_template("slurm_conf/sssd.conf.j2", ctx),
                    everyone, mode=0o600),
           Artifact(directory.NSSWITCH, render_template("slurm_conf/nsswitch.conf.j2", ctx),
                    everyone)]
    if d.bind_dn and hasattr(d.bind_secret, "file"):
        doc = directory.bind_doc(d.bind_secret.file)
        out.append(Artifact(directory.BIND, (json.dumps(doc, indent=2, sort_keys=True)
                                             + "\n").encode(), everyone))
    login = estate.role_hosts("slurm_login")
    if len(login):
        out.append(Artifact(directory.PAM_PROFILES, b"sss\n", login))
    return out


def _sssd_context(estate: Estate, source: str, d) -> dict:
    ident = estate.spec.identity
    local_users = ["root"] + [u.name for u in ident.users if u.source == "local"]
    local_groups = ["root"] + [g.name for g in ident.groups if g.source == "local"]
    secret = d.bind_secret
    return {"spec": estate.spec, "source": source, "domain": directory.DOMAIN,
            "local_users": local_users, "local_groups": local_groups,
            "allow_groups": list(d.groups), "offline_hours": d.cache.offline_hours,
            **directory.cache_sizing(d.cache.offline_hours),
            "uris": list(d.uris), "ldap_schema": d.ldap_schema, "users_base": d.users_base,
            "groups_base": d.groups_base, "bind_dn": d.bind_dn,
            "bind_file": getattr(secret, "file", ""),
            "bind_dropin": directory.BIND_DROPIN,
            "start_tls": d.start_tls,
            "ca": directory.ca_path(d)}
