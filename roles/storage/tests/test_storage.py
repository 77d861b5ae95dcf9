"""storage: NFS exports and mounts where the kernel has NFS; 'unsupported here' where not."""
from __future__ import annotations

import pytest

from estate.provision.destinations import destination
from roles.storage.tasks import nfs_problem

ROLE = "storage"


def unsupported_here(host, ctx, node) -> str | None:
    """The reason this node cannot have the role, for every storage check (files too)."""
    server = any(p.startswith("storage/exports/") for p in ctx.nodes[node].consumes)
    return nfs_problem(lambda cmd: host.run(cmd).stdout, server)


def test_nfs(host, node, ctx):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"unsupported here: {problem}")
    consumes = ctx.nodes[node].consumes
    if any(p.startswith("storage/exports/") for p in consumes):
        assert host.service("nfs-server").is_running
        assert host.run("exportfs -v").rc == 0
    for p in consumes:
        if p.startswith("storage/mounts/"):
            unit = destination(p).rsplit("/", 1)[1]
            assert host.service(unit).is_running, f"{unit} is not mounted"
