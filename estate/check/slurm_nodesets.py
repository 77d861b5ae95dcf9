"""Slurm node sets (slurm.nodesets) and the partitions that name them.

A NodeSet name shares slurm.conf's namespace with node names (a partition's Nodes= mixes
both) and is written next to partition names in every Slurm view, so a clash with either
is refused; members come from estate.model (the set slurmctld builds, the renderer writes).
Every release Estate renders for has NodeSet (slurm_conf/keys; tests/unit/test_nodesets.py
holds the key files to it), so no release check is needed here.
"""
from __future__ import annotations

from estate.check._common import all_hosts, problem, short
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import model
from estate.model.slurm_refusals import sentence as refusal
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING

_SELECTORS = ("classes", "nodes", "feature")


@validator("slurm.nodeset_selector", E, "slurm",
           "a node set that names none, or more than one, of classes, nodes and feature")
def nodeset_selector(estate: Estate) -> Problems:
    for i, ns in enumerate(estate.spec.slurm.nodesets):
        given = [k for k in _SELECTORS if getattr(ns, k)]
        if len(given) != 1:
            yield problem(("slurm", "nodesets", i), f"node set '{ns.name}' names "
                          f"{' and '.join(given) or 'no nodes'}; a NodeSet line has one "
                          "selector", "give exactly one of classes, nodes or feature")


@validator("slurm.nodeset_unknown_class", E, "slurm",
           "a node set names a node class that is not defined")
def nodeset_unknown_class(estate: Estate) -> Problems:
    for i, ns in enumerate(estate.spec.slurm.nodesets):
        for j, name in enumerate(ns.classes):
            if name not in estate.classes:
                yield problem(("slurm", "nodesets", i, "classes", j), f"node set '{ns.name}' "
                              f"names unknown node class '{name}'",
                              f"use one of: {', '.join(sorted(estate.classes))}")


@validator("slurm.nodeset_non_compute", E, "slurm",
           "a node set names hosts that are not Slurm workers")
def nodeset_non_compute(estate: Estate) -> Problems:
    workers = model(estate).slurm_compute_hosts()
    for ns in model(estate).nodesets.values():
        if ns.spec.nodes and (bad := ns.members - workers):
            where = "are not defined" if bad - all_hosts(estate) else "run no slurmd"
            yield problem(("slurm", "nodesets", ns.index, "nodes"), f"node set '{ns.name}' "
                          f"names {short(bad)}, which {where}: "
                          f"{refusal('nodeset_unknown_node')}",
                          "list only slurm_worker hosts from 'nodes'")


@validator("slurm.nodeset_empty", W, "slurm", "a node set that selects no Slurm worker")
def nodeset_empty(estate: Estate) -> Problems:
    for ns in model(estate).nodesets.values():
        if (ns.spec.classes or ns.spec.feature) and not ns.members:
            what = (f"feature '{ns.spec.feature}'" if ns.spec.feature
                    else "its classes' Slurm workers")
            yield problem(("slurm", "nodesets", ns.index), f"node set '{ns.name}' selects no "
                          f"node: no slurm_worker group has {what}; its partitions get none "
                          "of its nodes", "add the feature to a group's slurm.features, or "
                          "name classes that Slurm workers use")


@validator("slurm.nodeset_name_clash", E, "slurm",
           "a node set named like a node, a partition, another node set or a keyword")
def nodeset_name_clash(estate: Estate) -> Problems:
    parts = {p.name for p in estate.spec.slurm.partitions}
    seen: set[str] = set()
    for i, ns in enumerate(estate.spec.slurm.nodesets):
        clash = ("a slurm.conf keyword" if ns.name.lower() in ("all", "default")
                 else "a node's name" if ns.name in estate.nodes
                 else "a partition's name" if ns.name in parts
                 else "another node set's name" if ns.name in seen else None)
        seen.add(ns.name)
        if clash:
            yield problem(("slurm", "nodesets", i, "name"), f"node set '{ns.name}' is "
                          f"{clash}; Nodes= lists could not tell them apart",
                          "rename the node set")


@validator("slurm.partition_unknown_nodeset", E, "slurm",
           "a partition names a node set that is not defined")
def partition_unknown_nodeset(estate: Estate) -> Problems:
    known = model(estate).nodesets
    for i, part in enumerate(estate.spec.slurm.partitions):
        for j, name in enumerate(part.nodesets):
            if name not in known:
                yield problem(("slurm", "partitions", i, "nodesets", j), f"partition "
                              f"'{part.name}' names unknown node set '{name}'",
                              f"define it under slurm.nodesets, or use one of: "
                              f"{', '.join(sorted(known)) or '(none defined)'}")


@validator("slurm.partition_no_nodes", E, "slurm", "a partition with neither nodes nor nodesets")
def partition_no_nodes(estate: Estate) -> Problems:
    for i, part in enumerate(estate.spec.slurm.partitions):
        if not part.nodes and not part.nodesets:
            yield problem(("slurm", "partitions", i), f"partition '{part.name}' has no nodes",
                          "give it nodes (a hostlist) or nodesets")
