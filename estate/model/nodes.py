"""Per node group facts: plane, roles, GPUs a scheduler hands out, Slurm node shape.

Facts are kept per group, on hostlist ranges: a 10,000-node spec has a few dozen groups,
and nothing here expands names.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.hostlist import Hostlist
from estate.spec.model import GPU, NodeClass, NodeGroup


def slurm_compute(group: NodeGroup) -> bool:
    """A Slurm worker: a NodeName line, Gres and device files."""
    return group.plane == "slurm" and "slurm_worker" in group.roles


@dataclass(frozen=True)
class GroupFacts:
    """What the model derives of one spec node group (spec.model.NodeGroup): its hosts and
    its class; not a Unix group (spec.model.Group)."""
    index: int               # into spec.nodes (and the spec path nodes[index])
    spec: NodeGroup
    hosts: Hostlist
    cls: NodeClass | None    # None: the class is unknown (a validator says so)

    @property
    def plane(self) -> str | None:
        return self.spec.plane

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.spec.roles)

    @property
    def slurm_compute(self) -> bool:
        return slurm_compute(self.spec)

    @property
    def power_managed(self) -> bool:
        """A Slurm worker group Slurm powers up on demand (state: cloud): what
        slurm.power_saving exists for, and what SuspendExcNodes leaves out."""
        return self.slurm_compute and self.spec.slurm.state == "cloud"

    @property
    def kubernetes_worker(self) -> bool:
        return self.plane == "kubernetes" and "k8s_worker" in self.spec.roles

    @property
    def gpu_kinds(self) -> tuple[GPU, ...]:
        return self.cls.gpu_kinds if self.cls else ()

    @property
    def gpu_model(self) -> str | None:
        """The first kind's model (a class of one kind: its model)."""
        kinds = self.gpu_kinds
        return kinds[0].model if kinds else None

    @property
    def gpus_by_model(self) -> dict[str, int]:
        """GPU model -> GPUs per node a scheduler hands out (gpus_per_node, by kind). A
        Gres count override applies to a class of one kind (slurm.gres_mismatch refuses
        one that differs from the class's GPUs)."""
        per_node, kinds = self.gpus_per_node, self.gpu_kinds
        if not per_node:
            return {}
        if len(kinds) == 1:
            return {kinds[0].model: per_node}
        out: dict[str, int] = {}
        for k in kinds:
            out[k.model] = out.get(k.model, 0) + k.count
        return out

    @property
    def class_gpus(self) -> int:
        """Physical GPUs per node, from the node class."""
        return self.cls.gpu_count if self.cls else 0

    @property
    def gres_count(self) -> int:
        """GPUs per node that slurm.conf's Gres= declares: the class's, unless overridden."""
        override = self.spec.slurm.gres_count
        return self.class_gpus if override is None else override

    @property
    def real_memory(self) -> int:
        default = self.cls.memory_mb if self.cls else 0
        return self.spec.slurm.real_memory_mb or default

    @property
    def gpus_per_node(self) -> int:
        """GPUs a scheduler hands out on each node: Gres on Slurm compute nodes, the class's
        on Kubernetes workers (control planes among them keep their taint: see Model)."""
        if self.gpu_model is None:
            return 0
        if self.slurm_compute:
            return self.gres_count
        if self.kubernetes_worker:
            return self.class_gpus
        return 0
