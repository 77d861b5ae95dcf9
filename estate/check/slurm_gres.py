"""Slurm GRES beyond one GPU kind: several kinds on a node, MIG devices, AutoDetect.

MIG devices are found by slurmd through NVML (AutoDetect=nvml): without it gres.conf
would need each instance's MultipleFiles= (its parent GPU and the /dev/nvidia-caps files
of its GPU and compute instance), whose minors exist only once mig-parted has made the
instances, so no spec can say them (slurm_conf/README.md). Whether the release's packages
have gpu/nvml is slurm.plugin_not_in_release's (slurm_conf/keys), like every plugin.
"""
from __future__ import annotations

from estate.check._common import problem
from estate.check.findings import Severity
from estate.check.registry import validator
from estate.model import model
from estate.model.slurm import gres_kinds

E = Severity.ERROR


@validator("slurm.mig_needs_nvml", E, "slurm",
           "MIG devices on Slurm workers while gres.conf has AutoDetect=off")
def mig_needs_nvml(estate):
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
def shards_mixed_gpus(estate):
    for g in model(estate).groups:
        kinds = gres_kinds(g) if g.slurm_compute else ()
        if g.spec.slurm.shards_per_gpu and (len(kinds) > 1 or any(k.mig for k in kinds)):
            yield problem(("nodes", g.index, "slurm", "shards_per_gpu"), "shards are "
                          "spread over a node's GPUs as one pool; on several GPU kinds or "
                          "MIG devices a job could not say which it shares",
                          "drop shards_per_gpu here, or give the shared GPUs a class of "
                          "one kind")
