"""Slurm node sets and partitions with their members, parsed once with one error policy.

A partition or node set whose node list does not parse has no members from it here; the
validator nodes.bad_hostlist reports the expression at its spec path, so nobody else has
to. A partition's members are its own hosts plus those of the node sets it names.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.hostset import HostSet
from estate.spec.model import NodeSet as NodeSetSpec
from estate.spec.model import Partition as PartitionSpec


@dataclass(frozen=True)
class NodeSet:
    index: int                 # into spec.slurm.nodesets
    spec: NodeSetSpec
    members: HostSet           # the Slurm workers it selects (empty where nothing parses)

    @property
    def name(self) -> str:
        return self.spec.name

    def conf(self) -> tuple[str, str]:
        """Its NodeSet line's selector: Feature=<f>, else Nodes=<hostlist>. Classes are
        Estate's word, so they are written as their nodes' hostlist."""
        if self.spec.feature:
            return "Feature", self.spec.feature
        if self.spec.nodes:
            return "Nodes", self.spec.nodes
        return "Nodes", str(self.members.hostlist())


@dataclass(frozen=True)
class Partition:
    index: int                 # into spec.slurm.partitions
    spec: PartitionSpec
    members: HostSet           # empty when the expression does not parse
    parsed: bool

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes_text(self) -> str:
        """PartitionName's Nodes=: its hosts, then its node sets by name."""
        return ",".join(filter(None, [self.spec.nodes, *self.spec.nodesets]))


def parse(expr: str | None) -> tuple[HostSet, bool]:
    if not expr:
        return HostSet.of([]), True
    try:
        return HostSet.of(Hostlist.parse(expr)), True
    except HostlistError:
        return HostSet.of([]), False


def nodeset(index: int, spec: NodeSetSpec, groups) -> NodeSet:
    """groups: the model's node groups; a set selects Slurm workers only (NodeName lines)."""
    workers = [g for g in groups if g.slurm_compute and g.cls is not None]
    if spec.feature:
        members = HostSet.of([r for g in workers if spec.feature in g.spec.slurm.features
                              for r in g.hosts.ranges])
    elif spec.classes:
        members = HostSet.of([r for g in workers if g.spec.node_class in spec.classes
                              for r in g.hosts.ranges])
    else:
        members = parse(spec.nodes)[0]
    return NodeSet(index, spec, members)


def partition(index: int, spec: PartitionSpec, nodesets: dict[str, NodeSet] | None = None
              ) -> Partition:
    members, parsed = parse(spec.nodes)
    for name in spec.nodesets:
        if name in (nodesets or {}):
            members = members | nodesets[name].members
    return Partition(index, spec, members, parsed)
