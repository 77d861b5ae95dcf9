"""GPU kinds of the node classes: MIG layouts against the model's profile table.

The table (estate.model.nvidia.MIG_PROFILES) is NVIDIA's; a layout must name the
model's profiles and fit its slices, or nvidia-smi (mig-parted) refuses to make it and
slurmd finds fewer GPUs than slurm.conf declares and drains the node.
"""
from __future__ import annotations

from estate.check._common import problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.nvidia import MIG_PROFILES, mig_family, mig_layout_problems
from estate.spec.resolved import Estate

E = Severity.ERROR


def _mig_kinds(spec):
    """(loc of the GPU kind, the kind) for every kind with a MIG layout."""
    for ci, cls in enumerate(spec.node_classes):
        single = not isinstance(cls.gpus, list)
        for ki, gpu in enumerate(cls.gpu_kinds):
            if gpu.mig_profiles:
                yield ("node_classes", ci, "gpus") + (() if single else (ki,)), gpu


@validator("nodes.mig_profile_unknown", E, "nodes",
           "a MIG layout on a GPU that is not MIG-capable, or naming a profile it has not")
def mig_profile_unknown(estate: Estate) -> Problems:
    for loc, gpu in _mig_kinds(estate.spec):
        key = mig_family(gpu.product, gpu.memory_gb)
        if not gpu.mig or key is None:
            why = ("is not MIG-capable (mig: false)" if not gpu.mig else
                   "is none Estate has a MIG profile table for")
            yield problem(loc + ("mig_profiles",), f"{gpu.model} ({gpu.product}, "
                          f"{gpu.memory_gb} GB) {why}",
                          "drop mig_profiles, or set mig: true on a GPU of "
                          f"{', '.join(MIG_PROFILES)} (product and memory_gb as the driver "
                          "reports them)")
            continue
        for name in gpu.mig_profiles:
            if name not in MIG_PROFILES[key]:
                yield problem(loc + ("mig_profiles", name), f"{key} has no MIG profile "
                              f"'{name}'", f"use one of: {', '.join(MIG_PROFILES[key])}")


@validator("nodes.mig_over_capacity", E, "nodes",
           "a MIG layout that needs more slices, or more instances of a profile, than one "
           "GPU has")
def mig_over_capacity(estate: Estate) -> Problems:
    for loc, gpu in _mig_kinds(estate.spec):
        key = mig_family(gpu.product, gpu.memory_gb)
        if key is None or not gpu.mig or set(gpu.mig_profiles) - set(MIG_PROFILES[key]):
            continue    # nodes.mig_profile_unknown
        for why in mig_layout_problems(key, gpu.mig_profiles):
            yield problem(loc + ("mig_profiles",), why,
                          "use fewer or smaller instances per GPU (NVIDIA's MIG user guide "
                          "lists the layouts that fit)")
