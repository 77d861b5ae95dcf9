"""Topology validators: the switch tree and the blocks Slurm schedules by.

Which nodes sit under which switch is estate.model's switch_nodes, the
same table topology.conf is written from. Severities follow Slurm's own
topology plugins: what they refuse (fatal) is an error, what they only log is
a warning. Each sentence that says what slurmctld does is an entry of
slurm_conf/refusals.json, run on both releases by tests/live_slurm/test_slurm_refusals.py.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from estate.check._common import (
    HostSet, all_hosts, duplicates, group_sets, hosts_where, hostset, parse_hosts, problem,
    overlapping, short, union,
)
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import model
from estate.model.nodes import slurm_compute
from estate.model.slurm import BLOCK_TOPOLOGY
from estate.model.slurm_keys import at_least, versions
from estate.model.slurm_refusals import sentence as refusal
from estate.spec.model import Block, Switch
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


@lru_cache(maxsize=8)   # four validators read it
def _members(estate) -> dict[str, HostSet] | None:
    """Leaf switch -> the nodes topology.conf lists under it; None if a hostlist is broken
    (nodes.bad_hostlist reports that)."""
    if any(sw.nodes is not None and parse_hosts(sw.nodes) is None
           for sw in estate.spec.topology.switches):
        return None
    known = {sw.name for sw in estate.spec.topology.switches}  # only these are written
    return {name: HostSet.of(hl) for name, hl in model(estate).switch_nodes.items()
            if name in known}


@lru_cache(maxsize=8)
def _compute(estate) -> HostSet:
    return hosts_where(estate, slurm_compute)


@validator("topology.duplicate_name", E, "topology", "two switches or two blocks share a name")
def duplicate_name(estate: Estate) -> Problems:
    topo = estate.spec.topology
    named: list[tuple[str, Sequence[Switch | Block], str]] = [
        ("switches", topo.switches, "switch_duplicate_name"),
        ("blocks", topo.blocks, "block_duplicate_name")]
    for key, items, said in named:
        for i, item, first in duplicates(items, lambda x: x.name):
            yield problem(("topology", key, i, "name"), f"'{item.name}' is defined twice "
                          f"(first at topology.{key}[{first}]): {refusal(said)}",
                          "rename or remove one")


@validator("topology.unknown_switch", E, "topology", "a reference to a switch that is not defined")
def unknown_switch(estate: Estate) -> Problems:
    known = {sw.name for sw in estate.spec.topology.switches}
    hint = f"use one of: {', '.join(sorted(known)) or '(none defined)'}"
    for gi, group in enumerate(estate.spec.nodes):
        if group.switch and group.switch not in known:
            yield problem(("nodes", gi, "switch"), f"unknown switch '{group.switch}'",
                          f"{hint}, or add it under topology.switches")
    for i, sw in enumerate(estate.spec.topology.switches):
        for j, child in enumerate(sw.switches):
            if child not in known or child == sw.name:
                what = "itself" if child == sw.name else f"unknown switch '{child}'"
                yield problem(("topology", "switches", i, "switches", j),
                              f"switch '{sw.name}' lists {what} as a child", hint)


def _host_fields(topo):
    for i, sw in enumerate(topo.switches):
        if sw.nodes is not None:
            yield ("topology", "switches", i, "nodes"), sw.nodes
    for i, block in enumerate(topo.blocks):
        yield ("topology", "blocks", i, "nodes"), block.nodes


@validator("topology.unknown_node", E, "topology", "a switch or block names hosts that do not exist")
def unknown_node(estate: Estate) -> Problems:
    for loc, expr in _host_fields(estate.spec.topology):
        if missing := hostset(expr) - all_hosts(estate):
            yield problem(loc, f"unknown hosts {short(missing)}", "list only hosts defined "
                          "under 'nodes'")


@validator("topology.non_compute_node", W, "topology",
           "a switch or block names hosts that are not Slurm compute nodes")
def non_compute_node(estate: Estate) -> Problems:
    known, compute = all_hosts(estate), _compute(estate)
    for loc, expr in _host_fields(estate.spec.topology):
        if other := (hostset(expr) & known) - compute:
            said = "switch_unknown_node" if loc[1] == "switches" else "block_unknown_node"
            yield problem(loc, f"{short(other)} have no NodeName line: {refusal(said)}",
                          "list only slurm_worker nodes")


@validator("topology.switch_mixed_children", E, "topology",
           "a switch with both child switches and nodes")
def switch_mixed_children(estate: Estate) -> Problems:
    members = _members(estate) or {}
    for i, sw in enumerate(estate.spec.topology.switches):
        if sw.switches and members.get(sw.name):
            yield problem(("topology", "switches", i), f"switch '{sw.name}' has child switches "
                          f"and nodes ({short(members[sw.name])}): "
                          f"{refusal('switch_mixed_children')}",
                          "put nodes only under leaf switches")


@validator("topology.empty_switch", E, "topology", "a switch with neither child switches nor nodes")
def empty_switch(estate: Estate) -> Problems:
    members = _members(estate)
    if members is None:
        return
    for i, sw in enumerate(estate.spec.topology.switches):
        if not sw.switches and not members.get(sw.name):
            yield problem(("topology", "switches", i), f"switch '{sw.name}' has no child "
                          f"switches and no Slurm compute nodes: {refusal('switch_empty')}",
                          "set 'switch' on compute node groups, list nodes, or remove it")


@validator("topology.switch_two_parents", W, "topology", "a switch listed under two parents")
def switch_two_parents(estate: Estate) -> Problems:
    parent: dict[str, str] = {}
    for i, sw in enumerate(estate.spec.topology.switches):
        for j, child in enumerate(sw.switches):
            if child in parent and parent[child] != sw.name:
                yield problem(("topology", "switches", i, "switches", j), f"switch '{child}' "
                              f"is already under '{parent[child]}'; Slurm's tree has one path up",
                              "list each switch under one parent (model redundant spines as one)")
            parent.setdefault(child, sw.name)


@validator("topology.cycle", E, "topology", "switches that are their own ancestors")
def cycle(estate: Estate) -> Problems:
    switches = estate.spec.topology.switches
    children = {sw.name: sw.switches for sw in switches}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(root: str) -> str | None:
        """Depth first without recursion (a chain of 10,000 switches is a finding, not a
        RecursionError): the child that closes a loop, or None."""
        state[root] = 1
        stack = [(root, iter(children.get(root, ())))]
        while stack:
            name, todo = stack[-1]
            child = next(todo, None)
            if child is None:
                state[name] = 2
                stack.pop()
            elif state.get(child) == 1:
                return child
            elif child not in state and child in children:
                state[child] = 1
                stack.append((child, iter(children[child])))
        return None

    for i, sw in enumerate(switches):
        if sw.name not in state and (child := visit(sw.name)):
            yield problem(("topology", "switches", i), f"switches under '{sw.name}' loop back "
                          f"(through '{child}'): {refusal('switch_cycle')}",
                          "remove the switch that points back up the tree")


@validator("topology.node_two_leaves", W, "topology", "a node under two leaf switches")
def node_two_leaves(estate: Estate) -> Problems:
    members = _members(estate) or {}
    names, sets = list(members), list(members.values())
    for i, earlier in sorted(overlapping(sets).items()):
        for j in earlier:
            both = sets[i] & sets[j]
            yield problem(_switch_loc(estate, names[i]), f"{short(both)} are under leaf "
                          f"switches '{names[j]}' and '{names[i]}'", "keep each node under one "
                          "leaf: drop it from one switch's 'nodes' or fix its 'switch'")


def _switch_loc(estate, name: str) -> tuple:
    for i, sw in enumerate(estate.spec.topology.switches):
        if sw.name == name:
            return ("topology", "switches", i, "nodes") if sw.nodes else ("topology", "switches", i)
    gi = next(gi for gi, g in enumerate(estate.spec.nodes) if g.switch == name)
    return ("nodes", gi, "switch")


@validator("topology.slurm_node_missing", W, "topology",
           "Slurm compute nodes under no switch while a switch tree is defined")
def slurm_node_missing(estate: Estate) -> Problems:
    members = _members(estate)
    if not estate.spec.topology.switches or members is None:
        return
    missing = _compute(estate) - union(members.values())
    for gi, group in enumerate(estate.spec.nodes):
        part = group_sets(estate)[gi] & missing if slurm_compute(group) else None
        if part:
            yield problem(("nodes", gi, "switch"), f"{short(part)} are under no switch; jobs "
                          "cannot span them with other nodes", "set 'switch' to their leaf switch")


@validator("topology.no_root", W, "topology", "no single switch reaches every node")
def no_root(estate: Estate) -> Problems:
    switches = estate.spec.topology.switches
    children = {c for sw in switches for c in sw.switches}
    roots = [sw.name for sw in switches if sw.name not in children]
    if len(roots) > 1:
        yield problem(("topology", "switches"), f"{len(roots)} top-level switches "
                      f"({', '.join(roots[:4])}); jobs cannot span them",
                      "add a spine switch above them all")


# --- blocks (topology/block) -----------------------------------------------------

@validator("topology.block_version", E, "topology",
           "blocks on a Slurm release without topology/block (before 23.11)")
def block_version(estate: Estate) -> Problems:
    version = estate.spec.slurm.version
    if estate.spec.topology.blocks and not at_least(version, BLOCK_TOPOLOGY):
        need = "%d.%02d" % BLOCK_TOPOLOGY
        newer = [v for v in versions() if at_least(v, BLOCK_TOPOLOGY)]
        yield problem(("topology", "blocks"), f"blocks need TopologyPlugin=topology/block, "
                      f"which Slurm has since {need}; slurm.version is {version}, and "
                      "Estate renders no blocks for it (given topology/block, "
                      f"{refusal('blocks_before_23_11')})",
                      f"set slurm.version to {' or '.join(newer)} (and run that Slurm), "
                      "or remove topology.blocks")


@validator("topology.block_sizes", E, "topology",
           "block sizes that are not the base size times increasing powers of two")
def block_sizes(estate: Estate) -> Problems:
    sizes = estate.spec.topology.block_sizes
    if not sizes or sizes[0] < 1:   # the schema refuses sizes below 1
        return
    for i, size in enumerate(sizes[1:], start=1):
        ratio, rest = divmod(size, sizes[0])
        if rest or ratio < 2 or ratio & (ratio - 1) or size <= sizes[i - 1] or ratio > 2 ** 15:
            yield problem(("topology", "block_sizes", i), f"{size} is not {sizes[0]} times "
                          f"a power of two larger than the previous size: "
                          f"{refusal('block_sizes')}", f"use e.g. {sizes[0]},{sizes[0] * 2},{sizes[0] * 4}")


@validator("topology.block_too_small", E, "topology", "a block with fewer nodes than the base size")
def block_too_small(estate: Estate) -> Problems:
    blocks = estate.spec.topology.blocks
    counts = [len(hostset(b.nodes)) for b in blocks]
    base = (estate.spec.topology.block_sizes or counts[:1] or [0])[0]
    for i, (block, n) in enumerate(zip(blocks, counts)):
        if n < max(base, 1):
            yield problem(("topology", "blocks", i, "nodes"), f"block '{block.name}' has {n} "
                          f"nodes, fewer than the base block size {base}: "
                          f"{refusal('block_too_small')}",
                          "give every block at least the base block size of nodes")


@validator("topology.node_in_two_blocks", W, "topology", "a node listed in two blocks")
def node_in_two_blocks(estate: Estate) -> Problems:
    sets = [hostset(b.nodes) for b in estate.spec.topology.blocks]
    for i, earlier in sorted(overlapping(sets).items()):
        both = union(sets[i] & sets[j] for j in earlier)
        yield problem(("topology", "blocks", i, "nodes"), f"{short(both)} are already in "
                      "an earlier block", "a node sits in exactly one NVLink domain")


@validator("topology.node_outside_blocks", W, "topology",
           "Slurm compute nodes in no block while blocks are defined")
def node_outside_blocks(estate: Estate) -> Problems:
    blocks = estate.spec.topology.blocks
    if not blocks:
        return
    missing = _compute(estate) - union(hostset(b.nodes) for b in blocks)
    if missing:
        yield problem(("topology", "blocks"), f"{short(missing)} are in no block; "
                      "topology/block cannot place jobs on them", "add them to a block")

