"""What a change needs before it takes effect: per Slurm key and release, and per artifact.

The Slurm half is data: slurm_conf/update-policy/<release>.json, written by
scripts/slurm-update-policy.py from the release's own manual pages (each entry quotes
the sentence it was read from). On top of it sit Estate's judgements (JUDGED), each with
its reason: a key the manuals do not document, a rule the manual states once for many
keys (TCP listening settings), or what the live tier measured on real slurmctld
(tests/live_slurm/test_diff.py). tests/unit/test_update_policy.py fails when a key Estate
writes has no class for a release of the catalogue.

Slurm classes, weakest first (CLASSES): reconfigure, restart_slurmctld, restart_slurmd,
restart_all (slurmctld and every slurmd), restart_all_drain (every daemon restarted and
running steps lost: drain the workers first). What a class means for one node depends
on what runs there (estate.operate.diff.logic.per_node).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import lru_cache

from estate import paths
from estate.model.services import (CTLD_HOOKS, GPU_DEVICES, HOOKS, MANIFESTS, OPENMPI,
                                   SLURMD_RESTART)
from estate.model.slurm_keys import at_least

POLICY_DIR = paths.UPDATE_POLICY

# The actions a node can need, in Slurm's (and Kubernetes') terms, weakest first: a
# node's action is the strongest its changes need.
ACTIONS = ("nothing", "file", "restart_service", "reconfigure", "restart_slurmctld",
           "restart_slurmd", "drain_restart", "k8s_rollout", "node_rejoin")
SAY = {"nothing": "nothing", "file": "file install only",
       "restart_service": "service restart", "reconfigure": "scontrol reconfigure",
       "restart_slurmctld": "slurmctld restart", "restart_slurmd": "slurmd restart",
       "drain_restart": "drain, then restart", "k8s_rollout": "Kubernetes rollout",
       "node_rejoin": "node rejoin"}
CLASSES = ("reconfigure", "restart_slurmctld", "restart_slurmd", "restart_all",
           "restart_all_drain")


# What a class means for a node by what runs there (estate.operate.diff.logic.per_node; the workers'
# part also estate.model.slurm_files.slurmd_restart_facts).
CTLD_PART = {"reconfigure": "reconfigure", "restart_slurmctld": "restart_slurmctld",
             "restart_slurmd": "reconfigure", "restart_all": "restart_slurmctld",
             "restart_all_drain": "restart_slurmctld"}
SLURMD_PART = {"reconfigure": "reconfigure", "restart_slurmctld": "reconfigure",
               "restart_slurmd": "restart_slurmd", "restart_all": "restart_slurmd",
               "restart_all_drain": "drain_restart"}


def rank(action: str) -> int:
    return ACTIONS.index(action)


def strongest(actions) -> str:
    return max(actions, key=rank, default="nothing")


def stronger_class(a: str, b: str) -> str:
    """The stronger of two Slurm classes (restart_slurmctld and restart_slurmd give
    restart_all: both daemons)."""
    if {a, b} == {"restart_slurmctld", "restart_slurmd"}:
        return "restart_all"
    return max(a, b, key=CLASSES.index)


@dataclass(frozen=True)
class Judged:
    key: str              # as in the JSON: "SlurmctldPort", "node:RealMemory", "node"
    cls: str
    reason: str
    since: tuple[int, int] | None = None    # from this release on (inclusive)
    before: tuple[int, int] | None = None   # up to this release (exclusive)

    def applies(self, version: str) -> bool:
        return ((self.since is None or at_least(version, self.since))
                and (self.before is None or not at_least(version, self.before)))


LISTENING = ("slurm.conf(5) DESCRIPTION: \"Changes to TCP listening settings will require a "
             "daemon restart\"; slurmd talks to slurmctld at SlurmctldHost:SlurmctldPort and "
             "listens on SlurmdPort, so every daemon restarts")
PLUGIN_22 = ("before 23.11 scontrol reconfigure re-reads slurm.conf in the running daemons, "
             "which keep the plugins they loaded at start (from 23.11 reconfigure re-executes "
             "the daemons); issue 31 names TopologyPlugin among the keys that restart every "
             "daemon")
JUDGED = (
    Judged("SlurmctldHost", "restart_all", LISTENING),
    Judged("SlurmctldPort", "restart_all", LISTENING),
    Judged("SlurmdPort", "restart_all", LISTENING),
    Judged("TopologyPlugin", "restart_all", PLUGIN_22, before=(23, 11)),
    Judged("cgroup.conf:CgroupPlugin", "restart_slurmd", PLUGIN_22, before=(23, 11)),
    Judged("SelectType", "restart_all", "slurm.conf(5) 22.05 SelectType: \"A restart of "
           "slurmctld and slurmd is required ... When changed, all job information ... "
           "will be lost\"; 24.11's manual dropped the sentence but the select plugin's "
           "state is still per plugin", since=(23, 11)),
    Judged("node:RealMemory", "reconfigure", "measured (tests/live_slurm/test_diff.py): "
           "22.05's slurmctld takes a node's changed RealMemory on scontrol reconfigure, "
           "with a job running there, and the node stays usable; the manual's NODE "
           "CONFIGURATION rule (restart both daemons) still holds for adding or removing "
           "nodes and the other fields", before=(23, 11)),
    Judged("node", "restart_all", "slurm.conf(5) 22.05: \"Changes in node configuration "
           "(e.g. adding nodes ...) require restarting both the slurmctld daemon and the "
           "slurmd daemons\"; measured (tests/live_slurm/test_diff.py): scontrol "
           "reconfigure after adding a node makes 22.05's slurmctld exit (\"fatal: "
           "MaxNodeCount has changed (2->3) during reconfig, slurmctld must be "
           "restarted\"), so restart it, never reconfigure", before=(23, 11)),
    # The line keywords themselves: the manuals document their fields, not the keyword.
    Judged("NodeName", "reconfigure", "the line keyword: its fields and the node "
           "section's rule (\"node\") classify a NodeName line"),
    Judged("PartitionName", "reconfigure", "the line keyword: its fields and the "
           "partition section's rule classify a PartitionName line"),
    Judged("NodeSet", "reconfigure", "the line keyword: its fields classify a NodeSet line"),
)

# What an artifact's change needs on the nodes that install it, when it is not one of the
# Slurm files read key by key (SLURM_FILES): first match wins; (pattern, action, service).
SLURM_FILES = ("slurm/slurm.conf", "slurm/gres.conf", "slurm/topology.conf",
               "slurm/cgroup.conf")
ARTIFACT_ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("slurm/slurmd.env", "restart_slurmd", "slurmd"),   # the unit reads it at start only
    ("slurm/slurmdbd.conf", "restart_service", "slurmdbd"),
    ("slurm/slurmrestd/*", "restart_service", "slurmrestd"),
    ("slurm/slurmrestd-tls/*", "restart_service", "stunnel4"),
    (GPU_DEVICES + "*", "restart_slurmd", "slurmd"),    # device files gres.conf names
    # the settings its slurmd restarts for: the slurm.conf lines that changed say so too
    (SLURMD_RESTART + "*", "restart_slurmd", "slurmd"),
    (HOOKS + "*", "file", ""),        # slurmd runs the installed script at each job
    (CTLD_HOOKS + "*", "file", ""),
    (OPENMPI + "*", "file", ""),  # Open MPI reads it at each mpirun
    ("network/nftables/*", "restart_service", "nftables"),
    ("monitoring/prometheus*", "restart_service", "prometheus"),
    ("monitoring/rules/*", "restart_service", "prometheus"),
    ("monitoring/node-exporter.env", "restart_service", "prometheus-node-exporter"),
    ("monitoring/slurm-exporter*", "restart_service", "estate-slurm-exporter"),
    ("monitoring/dcgm-exporter/*", "restart_service", "estate-dcgm-exporter"),
    ("storage/exports/*", "restart_service", "nfs-server"),
    ("kubernetes/kubeadm/join/*", "node_rejoin", ""),
    ("kubernetes/kubeadm/init.yaml", "node_rejoin", ""),
    ("kubernetes/containerd/*", "restart_service", "containerd"),
    (MANIFESTS + "*", "k8s_rollout", ""),
    ("kubernetes/*.yaml", "k8s_rollout", ""),
    ("kubernetes/*/*.yaml", "k8s_rollout", ""),
)


def artifact_action(path: str) -> tuple[str, str]:
    """(action, service) an artifact's change needs where it is installed."""
    for pattern, action, service in ARTIFACT_ACTIONS:
        if fnmatch(path, pattern):
            return action, service
    return "file", ""


@lru_cache(maxsize=None)
def _load(version: str) -> dict:
    return json.loads((POLICY_DIR / f"{version}.json").read_text())


def versions() -> list[str]:
    return sorted(p.stem for p in POLICY_DIR.glob("*.json"))


def source(version: str) -> dict[str, str]:
    return _load(version)["source"]


@dataclass(frozen=True)
class Policy:
    cls: str
    why: str      # the manual's sentence, or Estate's reason
    origin: str   # "slurm.conf(5) entry", "slurm.conf(5) default", "judged"


@lru_cache(maxsize=None)
def table(version: str) -> dict[str, Policy]:
    """lowercase key -> its Policy for the release: the manual's, then JUDGED over it.
    Keys: "maxtime"-style for slurm.conf's own, "partition:maxtime", "node:realmemory",
    "gres.conf:type", and the line kinds' own rules "node", "partition", "nodeset"."""
    doc = _load(version)
    out = {}
    for key, e in {**doc["keys"], **doc.get("sections", {})}.items():
        manual = key.split(":")[0] if key.endswith(".conf") or ".conf:" in key else "slurm.conf"
        out[key.lower()] = Policy(e["action"], e["quote"], f"{manual}(5) {e['from']}")
    for j in JUDGED:
        if j.applies(version):
            out[j.key.lower()] = Policy(j.cls, j.reason, "judged")
    return out


def policy(version: str, key: str) -> Policy | None:
    """The key's policy ("MaxTime" is slurm.conf's; "partition:MaxTime" a line field);
    a line field is at least its line kind's own rule. None: unclassified."""
    t = table(version)
    found = t.get(key.lower())
    if found and found.origin == "judged":   # Estate's own word is final, line rule or not
        return found
    kind = key.split(":")[0].lower() if ":" in key else None
    line_rule = t.get(kind) if kind in ("node", "partition", "nodeset") else None
    if found and line_rule:
        return Policy(stronger_class(found.cls, line_rule.cls),
                      found.why if CLASSES.index(found.cls) >= CLASSES.index(line_rule.cls)
                      else line_rule.why, found.origin)
    return found
