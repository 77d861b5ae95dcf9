"""One capacity model for both planes: the GPU budget of an estate.

GPUs are counted where a scheduler can hand them out: Slurm workers (their
Gres count, which the spec may override) and Kubernetes workers (the node
class's count). The budget is reported per plane, per pool (node class), per
Slurm partition and per Kubernetes tenant. Everything is computed on hostlist
ranges (``len`` and range overlaps), never by expanding 10,000 node names.
The Pulumi program exports it and ``estate plan`` shows the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from estate.render.slurm import gres_count, is_compute
from estate.spec.hostlist import Hostlist, Range
from estate.spec.hostset import HostSet
from estate.spec.model import NodeGroup
from estate.spec.resolved import Estate


@dataclass
class Pool:
    """Schedulable GPUs of one node class, per plane."""
    model: str
    nodes: int = 0
    gpus: int = 0
    by_plane: dict[str, int] = field(default_factory=dict)
    ranges: list[Range] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"model": self.model, "nodes": self.nodes, "gpus": self.gpus,
                "by_plane": dict(sorted(self.by_plane.items())),
                "hosts": str(Hostlist(self.ranges))}


@dataclass
class Budget:
    planes: dict[str, int]
    pools: dict[str, Pool]
    partitions: dict[str, dict[str, int]]   # partition -> GPU model -> GPUs
    tenants: dict[str, dict[str, int]]      # tenant -> GPU model -> nominal quota
    kubernetes_models: dict[str, int]       # GPU model -> Kubernetes-plane GPUs

    @property
    def total(self) -> int:
        return sum(self.planes.values())

    def unassigned(self) -> dict[str, int]:
        """Kubernetes GPUs per model left after the tenants' quotas; negative is overcommitted."""
        left = dict(self.kubernetes_models)
        for quota in self.tenants.values():
            for model, n in quota.items():
                left[model] = left.get(model, 0) - n
        return dict(sorted(left.items()))

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "planes": dict(sorted(self.planes.items())),
            "pools": {k: p.as_dict() for k, p in sorted(self.pools.items())},
            "partitions": {k: {"gpus": sum(v.values()), "by_model": dict(sorted(v.items()))}
                           for k, v in sorted(self.partitions.items())},
            "tenants": {k: {"gpus": sum(v.values()), "by_model": dict(sorted(v.items()))}
                        for k, v in sorted(self.tenants.items())},
            "kubernetes_unassigned": self.unassigned(),
        }


def schedulable(estate: Estate, group: NodeGroup, hosts: Hostlist) -> tuple[int, int]:
    """(nodes, GPUs per node) of a group that a scheduler hands out; (0, 0) where none.

    The same nodes the renderers give GPUs to: Slurm compute nodes with their Gres
    count, and Kubernetes nodes that are not control planes (kubernetes.flavors).
    """
    cls = estate.node_class(group)
    if cls is None or cls.gpus is None:
        return 0, 0
    if group.plane == "slurm" and is_compute(group):
        return len(hosts), gres_count(estate, group)
    k8s = estate.spec.kubernetes
    if group.plane == "kubernetes" and k8s:
        control = sum(name in hosts for name in set(k8s.control_plane))
        return len(hosts) - control, cls.gpu_count
    return 0, 0


def gpu_budget(estate: Estate) -> Budget:
    planes = {"slurm": 0, "kubernetes": 0}
    pools: dict[str, Pool] = {}
    k8s_models: dict[str, int] = {}
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        nodes, per_node = schedulable(estate, group, hosts)
        if not nodes or not per_node:
            continue
        model = estate.node_class(group).gpus.model
        gpus = nodes * per_node
        planes[group.plane] += gpus
        pool = pools.setdefault(group.node_class, Pool(model))
        pool.nodes += nodes
        pool.gpus += gpus
        pool.by_plane[group.plane] = pool.by_plane.get(group.plane, 0) + gpus
        pool.ranges.extend(hosts.ranges)
        if group.plane == "kubernetes":
            k8s_models[model] = k8s_models.get(model, 0) + gpus
    k8s = estate.spec.kubernetes
    tenants = {t.name: dict(t.gpus) for t in k8s.tenants} if k8s else {}
    return Budget(planes, pools, partition_gpus(estate), tenants, k8s_models)


def partition_gpus(estate: Estate) -> dict[str, dict[str, int]]:
    """Partition -> GPU model -> GPUs of the compute nodes it contains."""
    out: dict[str, dict[str, int]] = {}
    for part in estate.spec.slurm.partitions:
        members = _parse(part.nodes)
        by_model = out.setdefault(part.name, {})
        for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
            per_node = schedulable(estate, group, hosts)[1] if group.plane == "slurm" else 0
            if per_node:
                n = overlap(members, hosts) * per_node
                model = estate.node_class(group).gpus.model
                by_model[model] = by_model.get(model, 0) + n
    return out


def _parse(expr: str) -> Hostlist:
    try:
        return Hostlist.parse(expr)
    except ValueError:
        return Hostlist()  # a bad expression is the validators' finding, not ours


def overlap(a: Hostlist, b: Hostlist) -> int:
    """How many names of a are also in b, by interval arithmetic."""
    return len(HostSet.of(a) & HostSet.of(b))
