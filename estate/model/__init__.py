"""The derived model: every fact Estate derives from a spec, computed once and typed.

``check/``, ``render/``, ``verify/``, ``provision/`` and the Pulumi driver read these facts
instead of computing them again (or parsing rendered text back to learn them):

- per node group: plane, roles, the GPUs a scheduler hands out, Slurm's node shape
  (``nodes.GroupFacts``);
- node sets and partitions with their members (``partitions.NodeSet``, ``Partition``);
- which Kubernetes nodes are control planes, and so hold no tenant GPUs;
- which compute nodes sit under which leaf switch (topology.conf's table);
- service accounts, ports, paths and key files (``services``).

``model(estate)`` is cached per resolved spec.
"""
from __future__ import annotations

from functools import cached_property, lru_cache

from estate.model.nodes import GroupFacts
from estate.model.partitions import NodeSet, Partition, nodeset, partition
from estate.spec.hostlist import Hostlist, Range
from estate.spec.hostset import HostSet
from estate.spec.resolved import Estate


class Model:
    def __init__(self, estate: Estate):
        self.estate = estate
        self.spec = estate.spec

    @cached_property
    def groups(self) -> tuple[GroupFacts, ...]:
        return tuple(GroupFacts(i, g, hosts, self.estate.node_class(g))
                     for i, (g, hosts) in enumerate(zip(self.spec.nodes,
                                                        self.estate.group_hosts)))

    @cached_property
    def nodesets(self) -> dict[str, NodeSet]:
        """slurm.nodesets by name (the first of a duplicated name: a validator says so)."""
        out: dict[str, NodeSet] = {}
        for i, ns in enumerate(self.spec.slurm.nodesets):
            out.setdefault(ns.name, nodeset(i, ns, self.groups))
        return out

    @cached_property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(partition(i, p, self.nodesets)
                     for i, p in enumerate(self.spec.slurm.partitions))

    @cached_property
    def control_planes(self) -> frozenset[str]:
        k8s = self.spec.kubernetes
        return frozenset(k8s.control_plane) if k8s else frozenset()

    def group(self, name: str) -> GroupFacts | None:
        node = self.estate.nodes.get(name)
        return self.groups[node.group] if node else None

    def schedulable(self, group: GroupFacts) -> tuple[int, int]:
        """(nodes, GPUs per node) of a group that a scheduler hands out; (0, 0) where none.
        Kubernetes control planes keep their taint: their GPUs go to no tenant."""
        per_node = group.gpus_per_node
        if not per_node:
            return 0, 0
        nodes = len(group.hosts)
        if group.kubernetes_worker:
            nodes -= sum(name in group.hosts for name in self.control_planes)
        return nodes, per_node

    @cached_property
    def switch_nodes(self) -> dict[str, Hostlist]:
        """Leaf switch -> compute nodes under it (node.switch plus a switch's own nodes)."""
        members: dict[str, list[Range]] = {}
        for g in self.groups:
            if g.slurm_compute and g.spec.switch:
                members.setdefault(g.spec.switch, []).extend(g.hosts.ranges)
        for sw in self.spec.topology.switches:
            if sw.nodes:
                members.setdefault(sw.name, []).extend(Hostlist.parse(sw.nodes).ranges)
        return {name: Hostlist(r) for name, r in members.items()}

    def slurm_compute_hosts(self) -> HostSet:
        return HostSet.of([r for g in self.groups if g.slurm_compute for r in g.hosts.ranges])


@lru_cache(maxsize=8)
def model(estate: Estate) -> Model:
    return Model(estate)
