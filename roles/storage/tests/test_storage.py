"""storage: NFS exports and mounts where the kernel has NFS; 'unsupported here' where not.

Expected exports and mounts are read from the rendered files the node consumes."""
from __future__ import annotations

import re
import shlex

import pytest

from estate.model.destinations import destination
from estate.verify.plugin import on_nodes
from roles.storage.tasks import exported_paths, nfs_problem

ROLE = "storage"


def unsupported_here(host, ctx, node) -> str | None:
    """The reason this node cannot have the role, for every storage check (files too)."""
    server = any(p.startswith("storage/exports/") for p in ctx.nodes[node].consumes)
    return nfs_problem(lambda command: host.run(command).stdout, server)


@pytest.fixture
def nfs(host, node, ctx):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"unsupported here: {problem}")
    return ctx.nodes[node].consumes


def _consuming(prefix: str):
    """The checked nodes that consume a rendered file under prefix (servers, clients)."""
    return lambda ctx: [n for n, t in ctx.nodes.items()
                        if any(p.startswith(prefix) for p in t.consumes)]


def _exports(ctx, consumes) -> list[tuple[str, str, set[str]]]:
    """(path, client, options) of each client of each rendered export line (an export
    lists every address or CIDR of its clients, each with its options)."""
    out = []
    for p in consumes:
        if p.startswith("storage/exports/"):
            text = ctx.rendered(p).decode()
            for path, line in zip(exported_paths(text), _lines(text)):
                for spec in line.split()[1:]:
                    clients, opts = re.fullmatch(r"(\S+)\((.*)\)", spec).groups()
                    out.append((path, clients, set(opts.split(","))))
    return out


def _lines(text: str) -> list[str]:
    return [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]


def _mounts(ctx, consumes) -> list[tuple[str, dict[str, str]]]:
    """(unit name, [Mount] keys) of each rendered mount unit."""
    out = []
    for p in consumes:
        if p.startswith("storage/mounts/"):
            keys = dict(l.split("=", 1) for l in ctx.rendered(p).decode().splitlines()
                        if "=" in l and not l.startswith("#"))
            out.append((destination(p).rsplit("/", 1)[1], keys))
    return out


@on_nodes(_consuming("storage/exports/"))
def test_nfs_server_running(host, node, ctx, nfs):
    assert host.service("nfs-server").is_running
    assert host.service("nfs-server").is_enabled


@on_nodes(_consuming("storage/exports/"))
def test_exported(host, node, ctx, nfs):
    """Each rendered export is live with its clients and options, and its directory exists."""
    want = _exports(ctx, nfs)
    live = {}
    for line in host.check_output("exportfs -s").splitlines():
        path, *specs = line.split()
        for spec in specs:
            clients, opts = re.fullmatch(r"(\S+)\((.*)\)", spec).groups()
            live[(path, clients)] = set(opts.split(","))
    for path, clients, opts in want:
        assert host.file(path).is_directory, f"{path} (exported) is not a directory"
        assert (path, clients) in live, f"{path} is not exported to {clients}: {sorted(live)}"
        assert opts <= live[(path, clients)], \
            f"{path} exported with {sorted(live[(path, clients)])}, missing {sorted(opts)}"


@on_nodes(_consuming("storage/mounts/"))
def test_mounted(host, node, ctx, nfs):
    """Each rendered mount unit is enabled, active, and mounts What on Where over NFS."""
    for unit, keys in _mounts(ctx, nfs):
        assert host.service(unit).is_enabled, f"{unit} is not enabled"
        assert host.service(unit).is_running, f"{unit} is not active"
        out = host.check_output(f"findmnt -n -o SOURCE,FSTYPE --target "
                                f"{shlex.quote(keys['Where'])}")
        source, fstype = out.split()
        assert source == keys["What"], f"{keys['Where']} is mounted from {source}"
        assert fstype.startswith("nfs"), f"{keys['Where']} is {fstype}, not NFS"
