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

from estate.model import model
from estate.spec.hostlist import Hostlist, Range
from estate.spec.hostset import HostSet
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
            for gpu, n in quota.items():
                left[gpu] = left.get(gpu, 0) - n
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


def gpu_budget(estate: Estate) -> Budget:
    """Counted where a scheduler hands GPUs out (estate.model: Slurm Gres on compute nodes,
    the class's GPUs on Kubernetes workers that are not control planes)."""
    m = model(estate)
    planes = {"slurm": 0, "kubernetes": 0}
    pools: dict[str, Pool] = {}
    k8s_models: dict[str, int] = {}
    for g in m.groups:
        nodes, per_node = m.schedulable(g)
        if not nodes:
            continue
        gpus = nodes * per_node
        planes[g.plane] += gpus
        pool = pools.setdefault(g.spec.node_class, Pool("+".join(g.gpus_by_model)))
        pool.nodes += nodes
        pool.gpus += gpus
        pool.by_plane[g.plane] = pool.by_plane.get(g.plane, 0) + gpus
        pool.ranges.extend(g.hosts.ranges)
        if g.plane == "kubernetes":
            k8s_models[g.gpu_model] = k8s_models.get(g.gpu_model, 0) + gpus
    k8s = estate.spec.kubernetes
    tenants = {t.name: dict(t.gpus) for t in k8s.tenants} if k8s else {}
    return Budget(planes, pools, partition_gpus(estate), tenants, k8s_models)


def partition_gpus(estate: Estate) -> dict[str, dict[str, int]]:
    """Partition -> GPU model -> GPUs of the compute nodes it contains."""
    m = model(estate)
    compute = [(g, HostSet.of(g.hosts)) for g in m.groups if g.slurm_compute and g.gpus_per_node]
    out: dict[str, dict[str, int]] = {}
    for part in m.partitions:
        by_model = out.setdefault(part.name, {})
        for g, hosts in compute:
            nodes = len(part.members & hosts)
            for gpu_model, per_node in g.gpus_by_model.items():
                by_model[gpu_model] = by_model.get(gpu_model, 0) + nodes * per_node
    return out
