"""Node validators: node groups, hostlists and node classes."""
from __future__ import annotations

import re

from estate.check._common import (duplicates, group_sets, hostlist_error, overlapping,
                                  parse_hosts, problem, short)
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.slurm_refusals import sentence as refusal
from estate.spec.bounds import (MAX_HOSTLIST_HOSTS, MAX_HOSTLIST_RANGES, MAX_HOSTNAME,
                                MAX_HOSTS_PER_SPEC)
from estate.spec.hostlist import Hostlist, measure
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING
_PORTABLE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


@validator("nodes.duplicate_class", E, "nodes", "two node classes share a name")
def duplicate_class(estate: Estate) -> Problems:
    for i, cls, first in duplicates(estate.spec.node_classes, lambda c: c.name):
        yield problem(("node_classes", i, "name"), f"node class '{cls.name}' is defined "
                      f"twice (first at node_classes[{first}])", "rename or remove one")


@validator("nodes.unknown_class", E, "nodes", "a node group names a class that is not defined")
def unknown_class(estate: Estate) -> Problems:
    for gi, group in enumerate(estate.spec.nodes):
        if estate.node_class(group) is None:
            yield problem(("nodes", gi, "class"), f"unknown node class '{group.node_class}'",
                          f"use one of: {', '.join(sorted(estate.classes))}")


def _hostlist_fields(spec):
    """(loc, expression) for every hostlist expression in the spec."""
    for gi, group in enumerate(spec.nodes):
        yield ("nodes", gi, "hosts"), group.hosts
    for i, part in enumerate(spec.slurm.partitions):
        if part.nodes is not None:
            yield ("slurm", "partitions", i, "nodes"), part.nodes
    for i, ns in enumerate(spec.slurm.nodesets):
        if ns.nodes is not None:
            yield ("slurm", "nodesets", i, "nodes"), ns.nodes
    for i, sw in enumerate(spec.topology.switches):
        if sw.nodes is not None:
            yield ("topology", "switches", i, "nodes"), sw.nodes
    for i, block in enumerate(spec.topology.blocks):
        yield ("topology", "blocks", i, "nodes"), block.nodes
    for i, mount in enumerate(spec.storage.mounts):
        yield ("storage", "mounts", i, "clients"), mount.clients


@validator("nodes.bad_hostlist", E, "nodes", "a hostlist expression Slurm cannot parse")
def bad_hostlist(estate: Estate) -> Problems:
    for loc, expr in _hostlist_fields(estate.spec):
        if parse_hosts(expr) is None:
            yield problem(loc, f"'{expr[:80]}' is not a valid hostlist: {hostlist_error(expr)}",
                          "use Slurm's syntax, e.g. gpu[001-032,040] (ascending ranges, "
                          "no nested brackets)")


@validator("nodes.too_many_hosts", E, "nodes",
           f"the node groups hold more than {MAX_HOSTS_PER_SPEC} hosts together", stage="gate")
def too_many_hosts(estate: Estate) -> Problems:
    total = sum(measure(g.hosts)[0] for g in estate.spec.nodes)   # from the brackets alone
    if total > MAX_HOSTS_PER_SPEC:
        yield problem(("nodes",), f"the node groups hold {total} hosts, more than the limit of "
                      f"{MAX_HOSTS_PER_SPEC} (MAX_HOSTS_PER_SPEC); nothing else was checked",
                      "split the estate into several specs")


@validator("nodes.hostlists_too_large", E, "nodes",
           "the spec's hostlist expressions together are too large to check in bounded time",
           stage="gate")
def hostlists_too_large(estate: Estate) -> Problems:
    sizes = [(measure(expr), loc) for loc, expr in _hostlist_fields(estate.spec)]
    hosts = sum(h for (h, _), _ in sizes)
    ranges = sum(r for (_, r), _ in sizes)
    if hosts > MAX_HOSTLIST_HOSTS or ranges > MAX_HOSTLIST_RANGES:
        (big_hosts, big_ranges), loc = max(sizes, key=lambda s: s[0])
        yield problem(loc, f"the spec's hostlists name {hosts} hosts in {ranges} ranges, more "
                      f"than the limit of {MAX_HOSTLIST_HOSTS} hosts (MAX_HOSTLIST_HOSTS) or "
                      f"{MAX_HOSTLIST_RANGES} ranges (MAX_HOSTLIST_RANGES); the largest is "
                      f"this one ({big_hosts} hosts, {big_ranges} ranges); nothing else was "
                      "checked", "write consecutive hosts as one range, e.g. gpu[001-512]")


@validator("nodes.empty_hostlist", E, "nodes", "a hostlist expression that names no host")
def empty_hostlist(estate: Estate) -> Problems:
    for loc, expr in _hostlist_fields(estate.spec):
        hosts = parse_hosts(expr)
        if hosts is not None and not hosts:
            yield problem(loc, f"'{expr}' names no host", "list at least one host, "
                          "e.g. gpu[001-004]")


@validator("nodes.hostname_length", E, "nodes",
           f"a host name longer than {MAX_HOSTNAME} characters (an RFC 1123 label)")
def hostname_length(estate: Estate) -> Problems:
    for loc, expr in _hostlist_fields(estate.spec):
        long = next((r for r in (parse_hosts(expr) or Hostlist()).ranges
                     if _longest(r) > MAX_HOSTNAME), None)
        if long is not None:
            yield problem(loc, f"host names starting '{long.prefix[:20]}' are {_longest(long)} "
                          f"characters long, more than {MAX_HOSTNAME}: hostname and DNS "
                          f"refuse them ({refusal('hostname_too_long')})", "shorten the names")


def _longest(r) -> int:
    return len(r.prefix) if r.single else len(r.prefix) + max(r.width, len(str(r.hi)))


# Slurm's reserved node names and what slurmctld does with each (read_config.c,
# _parse_nodename, 22.05 and 24.11; slurm_conf/refusals.json, run on both releases by
# tests/live_slurm/test_slurm_refusals.py)
_RESERVED = {"default": refusal("node_named_default"), "all": refusal("node_named_all")}


@validator("nodes.reserved_name", E, "nodes",
           "a host named DEFAULT or ALL, or a partition named DEFAULT (Slurm keywords)")
def reserved_name(estate: Estate) -> Problems:
    for loc, expr in _hostlist_fields(estate.spec):
        for r in (parse_hosts(expr) or Hostlist()).ranges:
            if r.single and r.prefix.lower() in _RESERVED:
                yield problem(loc, f"'{r.prefix}' is a Slurm keyword, not a host name: "
                              f"{_RESERVED[r.prefix.lower()]}", "rename the host")
                break
    for i, part in enumerate(estate.spec.slurm.partitions):
        if part.name.lower() == "default":
            yield problem(("slurm", "partitions", i, "name"), f"'{part.name}' is a Slurm keyword "
                          f"({refusal('partition_named_default')}), not a partition name",
                          "rename the partition")


@validator("nodes.duplicate_host", E, "nodes",
           "a host is listed twice (within a group or in two groups of the same plane)")
def duplicate_host(estate: Estate) -> Problems:
    sets = group_sets(estate)
    earlier = overlapping(sets)
    for gi, (hl, hosts) in enumerate(zip(estate.group_hosts, sets)):
        if len(hosts) < len(hl):
            yield problem(("nodes", gi, "hosts"), f"'{estate.spec.nodes[gi].hosts}' lists "
                          "some hosts more than once", "list each host once")
        for gj in earlier.get(gi, ()):
            both = sets[gj] & hosts
            if both and _same_plane(estate, gi, gj):
                yield problem(("nodes", gi, "hosts"), f"{short(both)} already defined "
                              f"in nodes[{gj}]", "define each host in exactly one group")


def _same_plane(estate, gi: int, gj: int) -> bool:
    """Groups whose planes differ (both set) are boundaries.node_in_both_planes' business."""
    a, b = estate.spec.nodes[gi].plane, estate.spec.nodes[gj].plane
    return a == b or a is None or b is None


@validator("nodes.no_roles", W, "nodes", "a node group has no roles, so nothing is installed")
def no_roles(estate: Estate) -> Problems:
    for gi, group in enumerate(estate.spec.nodes):
        if not group.roles:
            yield problem(("nodes", gi, "roles"), f"nodes {group.hosts} have no roles",
                          "add the roles these nodes serve, or remove the group")


@validator("nodes.hostname_style", W, "nodes",
           "a hostname that is not a lowercase RFC 1123 label")
def hostname_style(estate: Estate) -> Problems:
    for gi, hl in enumerate(estate.group_hosts):
        bad = sorted({r.prefix for r in hl.ranges if r.prefix and not _portable(r.prefix)})
        if bad:
            yield problem(("nodes", gi, "hosts"), f"host names starting '{bad[0]}' are not "
                          "lowercase letters, digits and '-': 'hostname -s', DNS and kubelet "
                          "node names will not agree", "use lowercase letters, digits and '-'")


def _portable(prefix: str) -> bool:
    return bool(_PORTABLE.match(prefix + "0"))  # a prefix may end in '-' before the digits
