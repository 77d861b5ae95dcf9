"""Slurm GRES beyond one GPU kind: several kinds on a node, MIG devices, AutoDetect.

MIG devices are found by slurmd through NVML (AutoDetect=nvml): without it gres.conf
would need each instance's MultipleFiles= (its parent GPU and the /dev/nvidia-caps files
of its GPU and compute instance), whose minors exist only once mig-parted has made the
instances, so no spec can say them (slurm_conf/README.md). Whether the release's packages
have gpu/nvml is slurm.plugin_not_in_release's (slurm_conf/keys), like every plugin.
"""
from __future__ import annotations

from estate.check._common import problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import model
from estate.model.slurm import gres_kinds, gres_type_id
from estate.model.slurm_refusals import sentence as refusal
from estate.spec.resolved import Estate

E = Severity.ERROR


@validator("slurm.mig_needs_nvml", E, "slurm",
           "MIG devices on Slurm workers while gres.conf has AutoDetect=off")
def mig_needs_nvml(estate: Estate) -> Problems:
    if estate.spec.slurm.gres_autodetect == "nvml":
        return
    for g in model(estate).groups:
        if g.slurm_compute and any(k.mig for k in gres_kinds(g)):
            yield problem(("slurm", "gres_autodetect"), f"nodes[{g.index}] "
                          f"({g.spec.hosts}) have MIG devices, which slurmd finds only "
                          "through NVML", "set slurm.gres_autodetect: nvml")
            return


@validator("slurm.shards_mixed_gpus", E, "slurm",
           "GRES shards on nodes with several GPU kinds or MIG devices")
def shards_mixed_gpus(estate: Estate) -> Problems:
    for g in model(estate).groups:
        kinds = gres_kinds(g) if g.slurm_compute else ()
        if g.spec.slurm.shards_per_gpu and (len(kinds) > 1 or any(k.mig for k in kinds)):
            yield problem(("nodes", g.index, "slurm", "shards_per_gpu"), "shards are "
                          "spread over a node's GPUs as one pool; on several GPU kinds or "
                          "MIG devices a job could not say which it shares",
                          "drop shards_per_gpu here, or give the shared GPUs a class of "
                          "one kind")


def _type_loc(spec, cls_name: str, gres_type: str) -> tuple:
    """The spec path that names a GRES type: a kind's model, or a MIG profile of it."""
    for ci, cls in enumerate(spec.node_classes):
        if cls.name != cls_name:
            continue
        for ki, gpu in enumerate(cls.gpu_kinds):
            at = ("node_classes", ci, "gpus") + ((ki,) if isinstance(cls.gpus, list) else ())
            if gres_type in gpu.mig_profiles:
                return at + ("mig_profiles", gres_type)
            if gpu.model == gres_type and not gpu.mig_profiles:
                return at + ("model",)
    return ("node_classes",)


@validator("slurm.gres_type_clash", E, "slurm",
           "two GRES type names slurmctld takes for one type")
def gres_type_clash(estate: Estate) -> Problems:
    """slurmctld compares GRES types by a 32-bit sum of their bytes, not by name
    (gres_build_id in src/interfaces/gres.c, SchedMD/slurm 22.05 to 24.11: see
    estate.model.slurm.gres_type_id). Two names with one sum are one type: a node's
    counts of both are added up and a job asking for one may be given the other.
    Names where one is a prefix or substring of another (a100, a100_80gb; 1g.10gb,
    1g.10gb+me) have different sums and are distinct types to slurmctld; slurmd's
    AutoDetect gives a device the longest configured type its NVML name contains
    (_normalize_sys_gres_types in src/plugins/gres/gpu/gres_gpu.c), so such a pair
    sorts itself out. Not checked: a type longer than a MIG profile that NVML's name of
    the MIG device also contains (the device name is the GPU's, then _<profile>), which
    would take that device; the NVML names are not in the spec."""
    seen: dict[int, str] = {}
    reported: set[str] = set()
    for g in model(estate).groups:
        for kind in gres_kinds(g) if g.slurm_compute else ():
            if kind.type is None or kind.type in reported:
                continue
            first = seen.setdefault(gres_type_id(kind.type), kind.type)
            if first != kind.type:
                reported.add(kind.type)     # once per name, however many groups use it
                yield problem(_type_loc(estate.spec, g.spec.node_class, kind.type),
                              f"GRES types '{first}' and '{kind.type}' have the same "
                              f"number ({gres_type_id(first)}) in slurmctld: "
                              f"{refusal('gres_type_clash')}", f"rename '{kind.type}'")
