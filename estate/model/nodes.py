"""Per node group facts: plane, roles, GPUs a scheduler hands out, Slurm node shape.

Facts are kept per group, on hostlist ranges: a 10,000-node spec has a few dozen groups,
and nothing here expands names.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.hostlist import Hostlist
from estate.spec.model import NodeClass, NodeGroup


def slurm_compute(group: NodeGroup) -> bool:
    """A Slurm worker: a NodeName line, Gres and device files."""
    return group.plane == "slurm" and "slurm_worker" in group.roles


@dataclass(frozen=True)
class Group:
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
    def kubernetes_worker(self) -> bool:
        return self.plane == "kubernetes" and "k8s_worker" in self.spec.roles

    @property
    def gpu_model(self) -> str | None:
        return self.cls.gpus.model if self.cls and self.cls.gpus else None

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
