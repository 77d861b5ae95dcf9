"""Users and groups with fixed UIDs/GIDs, as data the common role applies on every node."""
from __future__ import annotations

import json

from estate.model.services import IDENTITY
from estate.model.storage import home_of
from estate.render.artifacts import Artifact
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate


def render_identity(estate: Estate, source: str = "") -> list[Artifact]:
    ident = estate.spec.identity
    gids = {g.name: g.gid for g in ident.groups}
    doc = {
        "groups": [{"name": g.name, "gid": g.gid} for g in ident.groups],
        "users": [{"name": u.name, "uid": u.uid, "group": u.group, "gid": gids.get(u.group),
                   "home": home_of(u), "shell": u.shell, "system": u.system}
                  for u in ident.users],
    }
    everyone = Hostlist([r for hl in estate.group_hosts for r in hl.ranges])
    return [Artifact(IDENTITY,
                     (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), everyone)]
