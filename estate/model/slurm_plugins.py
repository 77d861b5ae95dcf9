"""The plugins each rendered Slurm file names: the one place their values are chosen.

slurm.conf.j2 prints them (through estate.render.slurm), ``slurm_plugins`` lists what a
daemon will load (``estate doctor``, the plugin-package test) and the validators check
them against what the spec's release ships (slurm_conf/keys/<version>.json).
"""
from __future__ import annotations

from estate.model.services import uses_jwt
from estate.model.slurm import block_topology, node_lines
from estate.model.slurm_keys import ships
from estate.spec.resolved import Estate


def plugin_settings(estate: Estate) -> dict[str, dict[str, str]]:
    """The plugin keywords of each rendered config file, the one place their values are chosen.

    The templates print them; ``slurm_plugins`` lists what a daemon will load, so that
    ``estate doctor`` and the plugin-package test know which shared objects must exist."""
    slurm = estate.spec.slurm
    cgroup = slurm.process_tracking == "cgroup"
    conf = {"AuthType": "auth/munge"}
    if uses_jwt(estate.spec):
        conf["AuthAltTypes"] = "auth/jwt"
    conf |= {
        "ProctrackType": "proctrack/cgroup" if cgroup else "proctrack/linuxproc",
        "TaskPlugin": "task/cgroup,task/affinity" if cgroup else "task/none",
        "SelectType": "select/cons_tres",
        "TopologyPlugin": topology_plugin(estate),
        "SchedulerType": "sched/backfill",
        "PriorityType": "priority/multifactor",
        "AccountingStorageType": ("accounting_storage/slurmdbd" if slurm.accounting
                                  else "accounting_storage/none"),
        "JobAcctGatherType": f"jobacct_gather/{job_acct_gather(slurm)}",
        "GresTypes": "gpu,shard" if any(ln.shards for ln in node_lines(estate)) else "gpu",
        "MpiDefault": slurm.mpi_default,
    }
    if slurm.preemption:
        conf["PreemptType"] = f"preempt/{slurm.preemption.type}"
    conf = {k: v for k, v in conf.items() if not unset_by_release(slurm.version, k, v)}
    out = {"slurm.conf": conf, "cgroup.conf": {"CgroupPlugin": "autodetect"}}
    if slurm.gres_autodetect != "off":   # slurmd loads gpu/<autodetect> for gres.conf
        out["gres.conf"] = {"AutoDetect": slurm.gres_autodetect}
    if slurm.accounting:
        out["slurmdbd.conf"] = {"AuthType": "auth/munge",
                                "StorageType": "accounting_storage/mysql"}
    if uses_jwt(estate.spec):
        out["slurmrestd"] = {"rest_auth": "rest_auth/jwt"}
    return out


def topology_plugin(estate: Estate) -> str:
    """topology/block for blocks, topology/tree for a switch tree, else the flat plugin:
    24.11's topology/tree with no switch refuses every multi-node job ("Requested topology
    configuration is not available"; slurm_conf/refusals.json, tree_without_switches);
    'none' is unset where the release has no topology/none (24.11: its default,
    topology/default, is flat)."""
    if block_topology(estate):
        return "topology/block"
    return "topology/tree" if estate.spec.topology.switches else "topology/none"


# Keywords whose values are not "type/name" plugins but imply one.
_IMPLIED = {"GresTypes": "gres/{}", "MpiDefault": "mpi/{}", "AutoDetect": "gpu/{}"}


def unset_by_release(version: str, key: str, value: str) -> bool:
    """A 'none' plugin the release does not ship: 24.11 dropped mpi/none, task/none,
    accounting_storage/none, jobacct_gather/none and the like, and leaves the keyword
    unset for 'none' (slurm.conf(5): "Unset by default"), so it is not written."""
    plugin = _IMPLIED[key].format(value) if key in _IMPLIED else value
    return plugin.endswith("/none") and not ships(version, plugin)


def job_acct_gather(slurm) -> str:
    return slurm.job_acct_gather or ("linux" if slurm.accounting else "none")




def slurm_plugins(estate: Estate) -> dict[str, list[str]]:
    """Plugin names ('auth/jwt') each rendered file makes a daemon load.

    'autodetect' (cgroup/v1 or v2, chosen by the running kernel) names no one plugin:
    ``estate doctor`` checks cgroup v2 on its own."""
    out = {}
    for path, settings in plugin_settings(estate).items():
        names = []
        for key, value in settings.items():
            for item in value.split(","):
                if key in _IMPLIED:
                    names.append(_IMPLIED[key].format(item))
                elif "/" in item:
                    names.append(item)
        out[path] = list(dict.fromkeys(names))
    return out
