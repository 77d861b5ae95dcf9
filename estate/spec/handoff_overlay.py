"""The handoff overlay: which plane a node is lent to, beside the spec that defines it.

`estate handoff` moves a worker between the Slurm and Kubernetes planes without rewriting
the operator's spec (its comments, anchors and layout stay theirs). It writes the move into
the spec's sibling ``<name>.handoff.yaml``:

    nodes:
      gpu2: {plane: kubernetes, reason: "estate handoff to kubernetes"}

and the loader merges that file into every load of the spec (estate.spec.load.load), so
check, render, plan, apply, the Pulumi program and the labs all see the same estate: the
spec plus its overlay is the one place the knowledge lives. `estate check` names every lent
node in an info finding. Handing a node back to the plane its spec gives it removes its
entry, and an overlay with no entries is deleted: the spec file alone holds again.

Merging works on the spec's data before the schema: the node's group is split into runs
of hosts that stay and hosts that move (in place, every address made explicit from the
spec's own allocation, so no node of the estate changes address); a moved worker swaps
slurm_worker for k8s_worker (or back); a node leaving Slurm leaves every Slurm hostlist
that names it (partitions, node sets, switches, blocks). A node lent to Slurm joins the
partitions its entry names, besides those whose node sets select it.
"""
from __future__ import annotations

import copy
import contextvars
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from estate.findings import Finding, Severity
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.model import FreeText, Name, Strict

SUFFIX = ".handoff.yaml"
WORKER_ROLE = {"slurm": "slurm_worker", "kubernetes": "k8s_worker"}
# Slurm's hostlists that name workers: a node leaving Slurm leaves each of them.
SLURM_HOSTLISTS = (("slurm", "partitions", "nodes"), ("slurm", "nodesets", "nodes"),
                   ("topology", "switches", "nodes"), ("topology", "blocks", "nodes"))


class Lent(Strict):
    plane: Literal["slurm", "kubernetes"]
    partitions: list[Name] = Field([], description="Lent to Slurm: the partitions it joins "
                                   "(besides those whose node sets select it).")
    tenant: Name | None = Field(None, description="The Kubernetes tenant whose GPU quota "
                                "the node's GPUs join (lent to Kubernetes) or leave (lent to "
                                "Slurm), so that the quotas still add up to the plane's GPUs.")
    reason: FreeText = ""


class Overlay(Strict):
    nodes: dict[Name, Lent] = {}


def path_for(spec: str | Path) -> Path:
    spec = Path(spec)
    return spec.with_name(spec.stem + SUFFIX)


# A proposed overlay for one spec path, seen by load() instead of the file: what `estate
# handoff` checks before it writes anything (the resulting spec must pass estate check).
_PROPOSED: contextvars.ContextVar[tuple[Path, Overlay] | None] = \
    contextvars.ContextVar("proposed_overlay", default=None)


@contextmanager
def proposed(spec: str | Path, overlay: Overlay):
    token = _PROPOSED.set((Path(spec).resolve(), overlay))
    try:
        yield
    finally:
        _PROPOSED.reset(token)


def read(spec: str | Path, reader) -> tuple[Overlay | None, list[Finding]]:
    """The overlay beside the spec (None where there is none), or findings that say why it
    does not load: it is read with the spec's own YAML limits and a strict schema. reader:
    estate.spec.load (its decode, parse_yaml and schema_findings), handed in by the loader,
    which imports this module."""
    given = _PROPOSED.get()
    if given is not None and given[0] == Path(spec).resolve():
        return given[1], []
    path = path_for(spec)
    if not path.exists():
        return None, []
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [_error("spec.handoff_overlay", f"cannot read {path}: {exc.strerror}",
                             "fix its permissions, or remove it (estate handoff writes it)",
                             str(path))]
    text, found = reader.decode(data, str(path))
    if text is None:
        return None, found
    raw, source, found = reader.parse_yaml(text, str(path))
    if found:
        return None, found
    try:
        return Overlay.model_validate(raw or {}), []
    except ValidationError as exc:
        return None, reader.schema_findings(exc, source)


def dump(spec: str | Path, overlay: Overlay) -> bytes:
    """The overlay file's text (estate.operate.handoff.logic writes it atomically)."""
    import yaml
    doc = {"nodes": {h: e.model_dump(exclude_defaults=True) | {"plane": e.plane}
                     for h, e in sorted(overlay.nodes.items())}}
    head = (f"# Written by `estate handoff`: the plane each node here is lent to. The spec\n"
            f"# ({Path(spec).name}) and this file are the estate; every command that loads\n"
            f"# the spec merges it. Hand a node back with `estate handoff`, not by hand.\n")
    return (head + yaml.safe_dump(doc, sort_keys=True)).encode()


def _error(id: str, message: str, hint: str, where: str, path: str = "<root>") -> Finding:
    return Finding(id, Severity.ERROR, path, message, hint, where)


# --- merging -------------------------------------------------------------------------------

def merge(loaded, spec: str | Path, reader):
    """The loaded spec with its overlay applied (estate.spec.load.Loaded), unchanged where
    there is none; a broken overlay or a merge the schema refuses is an error finding."""
    overlay, found = read(spec, reader)
    if overlay is None and not found:
        return loaded
    Loaded, schema_findings = reader.Loaded, reader.schema_findings
    if found:
        return Loaded(None, loaded.source, loaded.findings + found, loaded.raw, loaded.files)
    where = str(path_for(spec))
    data, remap, problems = apply(loaded.raw, loaded.spec, overlay)
    if problems:
        return Loaded(None, loaded.source, loaded.findings + [
            _error("spec.handoff_overlay", p, "hand the node back with `estate handoff`, or "
                   f"remove its entry from {where}", where, f"nodes.{h}") for h, p in problems],
            loaded.raw, loaded.files)
    loaded.source.marks = _remap_marks(loaded.source.marks, remap)
    from estate.spec.model import Spec
    try:
        spec_model = Spec.model_validate(data)
    except ValidationError as exc:
        return Loaded(None, loaded.source, loaded.findings + schema_findings(exc, loaded.source),
                      data, loaded.files)
    notes = [Finding("spec.handoff_overlay", Severity.INFO, f"nodes.{h}",
                     f"{h} is on the {e.plane} plane by {where}"
                     + (f" ({e.reason})" if e.reason else ""),
                     f"`estate handoff {spec} {h} --to <plane>` moves it", where)
             for h, e in sorted(overlay.nodes.items())]
    return Loaded(spec_model, loaded.source, loaded.findings + notes, data, loaded.files)


def apply(raw: dict, spec, overlay: Overlay) -> tuple[dict, dict[int, list[int]], list]:
    """(merged data, old group index -> new indices, [(host, problem)]). Pure."""
    from estate.spec.resolved import Estate
    estate = Estate(spec)
    problems = []
    moving: dict[str, Lent] = {}
    for host, entry in overlay.nodes.items():
        group = estate.group_of(host)
        if group is None:
            problems.append((host, f"{host} is in no node group of the spec"))
            continue
        if group.plane == entry.plane:
            continue    # where the spec puts it anyway
        problem = movable(group, host, entry.plane)
        if problem:
            problems.append((host, problem))
            continue
        moving[host] = entry
    data = copy.deepcopy(raw)
    if problems or not moving:
        return data, {i: [i] for i in range(len(spec.nodes))}, problems
    data["nodes"], remap = _split_groups(data["nodes"], estate, moving)
    leaving = {h for h, e in moving.items() if e.plane != "slurm"}
    for loc in SLURM_HOSTLISTS:
        _drop_from(data, loc, leaving)
    for host, entry in moving.items():
        for part in data.get("slurm", {}).get("partitions", []):
            if entry.plane == "slurm" and part.get("name") in entry.partitions:
                part["nodes"] = _with(part.get("nodes"), host)
        if entry.tenant:
            problem = _requota(data, estate, host, entry)
            if problem:
                problems.append((host, problem))
    return data, remap, problems


def _requota(data: dict, estate, host: str, entry: Lent) -> str | None:
    """The node's GPUs into (to kubernetes) or out of (to slurm) its tenant's quota."""
    tenants = (data.get("kubernetes") or {}).get("tenants") or []
    tenant = next((t for t in tenants if t.get("name") == entry.tenant), None)
    if tenant is None:
        return (f"{host}'s entry names tenant {entry.tenant!r}, which is not in "
                "kubernetes.tenants")
    cls = estate.node_class(estate.group_of(host))
    sign = 1 if entry.plane == "kubernetes" else -1
    for gpu in cls.gpu_kinds if cls else ():
        quota = dict(tenant.get("gpus") or {})
        left = quota.get(gpu.model, 0) + sign * gpu.count
        if left < 0:
            return (f"tenant {entry.tenant} has {quota.get(gpu.model, 0)} {gpu.model} GPUs "
                    f"of quota, fewer than {host}'s {gpu.count} it would give up")
        quota[gpu.model] = left
        tenant["gpus"] = {m: n for m, n in quota.items() if n}
    return None


def movable(group, host: str, to: str) -> str | None:
    """Why a node cannot be lent to `to` (None: it can): only a worker moves, with no other
    spec role (a controller, a login node, a control plane or a storage server stays)."""
    src = group.plane
    if to not in WORKER_ROLE:
        return f"no plane named {to!r}: use slurm or kubernetes"
    if src not in WORKER_ROLE:
        return f"{host} belongs to no scheduler's plane (plane: {src}): only workers move"
    if list(group.roles) != [WORKER_ROLE[src]]:
        return (f"{host} has the roles {', '.join(group.roles)}: only a node whose one role "
                f"is {WORKER_ROLE[src]} moves between planes")
    return None


def _split_groups(groups: list[dict], estate, moving: dict[str, Lent]
                  ) -> tuple[list[dict], dict[int, list[int]]]:
    """Each touched group as runs of consecutive hosts of one plane, in place. Every
    group's addresses become explicit, from the spec's own allocation: a split run would
    otherwise take other 'auto' addresses, and shift every later group's."""
    firsts = {(b.group, b.segment): b.first for b in estate.address_blocks}
    out: list[dict] = []
    remap: dict[int, list[int]] = {}
    for gi, g in enumerate(groups):
        hosts = estate.group_hosts[gi]
        touched = any(h in hosts for h in moving)
        runs = _runs(hosts.names(), moving) if touched else [(0, None, list(hosts.names()))]
        remap[gi] = []
        for start, lent, names in runs:
            part = copy.deepcopy(g)
            if touched:
                part["hosts"] = str(Hostlist.from_names(names))
            if lent is not None:
                part["plane"] = lent.plane
                part["roles"] = [WORKER_ROLE[lent.plane]]
            part["addresses"] = {seg: _addr(firsts[(gi, seg)] + start) if (gi, seg) in firsts
                                 else value for seg, value in g.get("addresses", {}).items()}
            remap[gi].append(len(out))
            out.append(part)
    return out, remap


def _runs(names, moving) -> list[tuple[int, Lent | None, list[str]]]:
    """(index of the first host, its entry or None, hosts) for each run of one plane."""
    runs: list[tuple[int, Lent | None, list[str]]] = []
    for i, name in enumerate(names):
        lent = moving.get(name)
        plane = lent.plane if lent else None
        if runs and (runs[-1][1].plane if runs[-1][1] else None) == plane:
            runs[-1][2].append(name)
        else:
            runs.append((i, lent, [name]))
    return runs


def _addr(n: int) -> str:
    from ipaddress import IPv4Address
    return str(IPv4Address(n))


def _drop_from(data: dict, loc: tuple[str, str, str], hosts: set[str]) -> None:
    top, items, key = loc
    for item in (data.get(top) or {}).get(items) or []:
        expr = item.get(key)
        if not expr or not hosts:
            continue
        try:
            hl = Hostlist.parse(expr)
        except HostlistError:
            continue    # nodes.bad_hostlist reports it at its path
        if any(h in hl for h in hosts):
            kept = [n for n in hl.names() if n not in hosts]
            if kept:
                item[key] = str(Hostlist.from_names(kept))
            else:   # what is left without it is the schema's and the validators' to judge
                del item[key]


def _with(expr: str | None, host: str) -> str:
    if not expr:
        return host
    hl = Hostlist.parse(expr)
    return expr if host in hl else str(Hostlist.from_names([*hl.names(), host]))


def _remap_marks(marks: dict, remap: dict[int, list[int]]) -> dict:
    """Spec paths under nodes[i] follow their group to its new index (each run of a split
    group points at the group's lines)."""
    if all(v == [k] for k, v in remap.items()):
        return marks
    out = {}
    for loc, mark in marks.items():
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int) and loc[1] in remap:
            for j in remap[loc[1]]:
                out[("nodes", j) + loc[2:]] = mark
        else:
            out[loc] = mark
    return out
