"""One seeded mistake per validator: the finding has the validator's id, severity and path.

Each case copies an example spec (as a dict), changes what the 'edits' say, and
checks the result. Paths in 'edits' use the spec-path syntax findings use.
"""
from __future__ import annotations

import re

import pytest

from estate.findings import Severity
from tests.unit.checkutil import findings_for, keyed, spec_dict

E, W = Severity.ERROR, Severity.WARNING
DROP = object()


def _parts(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]


def put(data: dict, path: str, value) -> None:
    *head, last = _parts(path)
    for part in head:
        data = data[part]
    if value is DROP:
        del data[last]
    elif isinstance(data, list) and last == len(data):
        data.append(value)
    else:
        data[last] = value


LEAF05 = {"name": "leaf05"}
CTLD_LOGIN_ONLY = {"name": "slurmctld", "to": "ctl1", "segment": "management", "port": 6817,
                   "from_roles": ["slurm_login"], "reason": "clients only"}
NFS_GPU1 = {"name": "nfs", "to": "nfs1", "segment": "storage", "port": 2049,
            "reason": "one client"}

# (validator id, severity, base spec, edits {path: value}, expected finding path)
CASES = [
    ("slurm.cgroup_mountpoint_without_cgroup", W, "lab",
     {"slurm.process_tracking": "linuxproc"}, "slurm.cgroup_mountpoint"),
    ("slurm.tres_weight_without_accounting", E, "lab", {"slurm.accounting": None},
     "slurm.priority.tres.GRES/gpu"),
    # network
    ("network.duplicate_segment", E, "prod", {"segments[3].name": "fabric"}, "segments[3].name"),
    ("network.duplicate_vlan", W, "prod", {"segments[1].vlan": 100}, "segments[1].vlan"),
    ("network.cidr_overlap", E, "prod", {"segments[2].cidr": "10.10.8.0/22"}, "segments[2].cidr"),
    ("network.kubernetes_cidr_overlap", E, "prod", {"kubernetes.pod_cidr": "10.0.0.0/8"},
     "kubernetes.pod_cidr"),
    ("network.kubernetes_cidr_overlap", E, "prod", {"kubernetes.service_cidr": "10.244.128.0/20"},
     "kubernetes.service_cidr"),
    ("network.unknown_segment", E, "prod", {"nodes[1].addresses.sevice": "auto"},
     "nodes[1].addresses.sevice"),
    ("network.unknown_segment", E, "prod", {"slurm.address_segment": "mgmt"},
     "slurm.address_segment"),
    ("network.cidr_exhausted", E, "prod", {"segments[2].cidr": "10.30.0.0/28"},
     "nodes[6].addresses.service"),
    ("network.address_outside_segment", E, "prod", {"nodes[0].addresses.management": "10.10.15.254"},
     "nodes[0].addresses.management"),
    ("network.segment_too_small", E, "prod", {"segments[2].cidr": "255.255.255.255/32"},
     "segments[2].cidr"),
    ("network.duplicate_address", E, "prod", {"nodes[0].addresses.storage": "10.40.0.6"},
     "nodes[0].addresses.storage"),
    ("network.address_is_gateway", W, "prod", {"nodes[8].addresses.storage": "10.40.0.1"},
     "nodes[8].addresses.storage"),
    # nodes
    ("nodes.duplicate_class", E, "prod", {"node_classes[3].name": "svc-std"},
     "node_classes[3].name"),
    ("nodes.unknown_class", E, "prod", {"nodes[7].class": "l40"}, "nodes[7].class"),
    ("nodes.bad_hostlist", E, "prod", {"slurm.partitions[2].nodes": "gpu[128-125]"},
     "slurm.partitions[2].nodes"),
    ("nodes.bad_hostlist", E, "prod", {"nodes[1].hosts": "login[1-2"}, "nodes[1].hosts"),
    ("nodes.duplicate_host", E, "prod", {"nodes[1].hosts": "login[1-2],ctl2"}, "nodes[1].hosts"),
    ("nodes.duplicate_host", E, "prod", {"nodes[3].hosts": "gpu[032-063]"}, "nodes[3].hosts"),
    ("nodes.empty_hostlist", E, "prod", {"nodes[1].hosts": ","}, "nodes[1].hosts"),
    ("nodes.empty_hostlist", E, "prod", {"slurm.partitions[1].nodes": ","},
     "slurm.partitions[1].nodes"),
    ("nodes.hostname_length", E, "prod", {"nodes[1].hosts": "l" * 63 + "[1-2]"},
     "nodes[1].hosts"),
    ("nodes.reserved_name", E, "prod", {"nodes[6].hosts": "DEFAULT"}, "nodes[6].hosts"),
    ("nodes.reserved_name", E, "prod", {"slurm.partitions[1].nodes": "ALL"},
     "slurm.partitions[1].nodes"),
    ("nodes.reserved_name", E, "prod", {"slurm.partitions[1].name": "Default"},
     "slurm.partitions[1].name"),
    ("nodes.too_many_hosts", E, "prod", {"nodes[2].hosts": "gpu[1-65536]x[1-4]",
                                          "nodes[3].hosts": "gpu[1-65536]y[1-4]"}, "nodes"),
    ("nodes.hostlists_too_large", E, "prod",
     {f"slurm.partitions[{i}].nodes": "n[1-65536]x[1-4]" for i in range(3)},
     "slurm.partitions[0].nodes"),
    ("nodes.no_roles", W, "prod", {"nodes[1].roles": []}, "nodes[1].roles"),
    ("nodes.hostname_style", W, "prod", {"nodes[1].hosts": "Login_[1-2]"}, "nodes[1].hosts"),
    # boundaries
    ("boundaries.node_in_both_planes", E, "prod", {"nodes[7].hosts": "inf[01-04],gpu128"},
     "nodes[7].hosts"),
    ("boundaries.role_plane", E, "prod", {"nodes[7].roles": ["k8s_worker", "slurm_worker"]},
     "nodes[7].roles[1]"),
    ("boundaries.role_plane", E, "prod", {"nodes[8].roles": ["storage", "slurm_login"]},
     "nodes[8].roles[1]"),
    ("boundaries.kubernetes_node_in_partition", E, "prod",
     {"slurm.partitions[2].nodes": "gpu[125-128],inf01"}, "slurm.partitions[2].nodes"),
    ("boundaries.host_on_wrong_plane", E, "prod", {"slurm.controllers": ["ctl1", "k8s-cp1"]},
     "slurm.controllers[1]"),
    ("boundaries.host_on_wrong_plane", E, "prod", {"kubernetes.control_plane": ["ctl1"]},
     "kubernetes.control_plane[0]"),
    ("boundaries.kubernetes_section_missing", E, "lab", {"kubernetes": DROP}, "nodes[4].plane"),
    ("boundaries.tenant_gpus_exceed_plane", E, "prod", {"kubernetes.tenants[1].gpus.l40s": 9},
     "kubernetes.tenants[1].gpus.l40s"),
    ("boundaries.tenant_gpus_exceed_plane", E, "prod", {"kubernetes.tenants[0].gpus.h100": 8},
     "kubernetes.tenants[0].gpus.h100"),
    ("boundaries.tenant_gpus_unassigned", E, "prod", {"kubernetes.tenants[1].gpus.l40s": 4},
     "kubernetes.tenants"),
    ("identity.missing_service_account", E, "lab", {"identity.users[1].name": "munged"},
     "identity.users"),
    # slurm
    ("slurm.duplicate_name", E, "prod", {"slurm.partitions[2].name": "batch"},
     "slurm.partitions[2].name"),
    ("slurm.duplicate_name", E, "prod", {"slurm.qos[2].name": "Normal"}, "slurm.qos[2].name"),
    ("slurm.reserved_name", E, "prod", {"slurm.partitions[2].name": "DEFAULT"},
     "slurm.partitions[2].name"),
    # GPU kinds and MIG (prod: node_classes[0] h100-8x on Slurm, [1] l40s-8x on Kubernetes)
    ("kubernetes.gpu_kinds", E, "prod", {"node_classes[1].gpus": [
        {"model": "l40s", "product": "NVIDIA-L40S", "count": 4, "memory_gb": 48},
        {"model": "l4", "product": "NVIDIA-L4", "count": 4, "memory_gb": 24}]},
     "nodes[7].class"),
    ("nodes.mig_profile_unknown", E, "prod",
     {"node_classes[0].gpus.mig_profiles": {"1g.10gb": 7}, "slurm.gres_autodetect": "nvml"},
     "node_classes[0].gpus.mig_profiles"),
    ("nodes.mig_profile_unknown", E, "prod",
     {"node_classes[0].gpus.mig": True, "node_classes[0].gpus.mig_profiles": {"1g.5gb": 7},
      "slurm.gres_autodetect": "nvml"},
     "node_classes[0].gpus.mig_profiles.1g.5gb"),
    ("nodes.mig_over_capacity", E, "prod",
     {"node_classes[0].gpus.mig": True,
      "node_classes[0].gpus.mig_profiles": {"3g.40gb": 2, "1g.10gb": 2},
      "slurm.gres_autodetect": "nvml"}, "node_classes[0].gpus.mig_profiles"),
    ("slurm.mig_needs_nvml", E, "prod",
     {"node_classes[0].gpus.mig": True, "node_classes[0].gpus.mig_profiles": {"1g.10gb": 7}},
     "slurm.gres_autodetect"),
    ("slurm.plugin_not_in_release", E, "prod", {"slurm.gres_autodetect": "nvml"},
     "slurm.gres_autodetect"),
    ("slurm.shards_mixed_gpus", E, "prod", {"node_classes[0].gpus": [
        {"model": "h100", "product": "NVIDIA-H100-80GB-HBM3", "count": 6, "memory_gb": 80},
        {"model": "l4", "product": "NVIDIA-L4", "count": 2, "memory_gb": 24}],
        "nodes[2].slurm.shards_per_gpu": 2}, "nodes[2].slurm.shards_per_gpu"),
    # v100s and s100v differ only by bytes in the same lane of slurmctld's type number
    ("slurm.gres_type_clash", E, "prod", {"node_classes[0].gpus": [
        {"model": "v100s", "product": "Tesla-V100S-PCIE-32GB", "count": 4, "memory_gb": 32},
        {"model": "s100v", "product": "Tesla-V100S-PCIE-32GB", "count": 4, "memory_gb": 32}]},
     "node_classes[0].gpus[1].model"),
    # node sets (prod: h100-nodes = classes [h100-8x], named by batch)
    ("slurm.nodeset_selector", E, "prod", {"slurm.nodesets[0].feature": "hbm80"},
     "slurm.nodesets[0]"),
    ("slurm.nodeset_unknown_class", E, "prod", {"slurm.nodesets[0].classes": ["h100-8x", "h200"]},
     "slurm.nodesets[0].classes[1]"),
    ("slurm.nodeset_non_compute", E, "prod",
     {"slurm.nodesets[0].classes": [], "slurm.nodesets[0].nodes": "gpu[001-128],login1"},
     "slurm.nodesets[0].nodes"),
    ("slurm.nodeset_empty", W, "prod",
     {"slurm.nodesets[0].classes": [], "slurm.nodesets[0].feature": "nvlink"},
     "slurm.nodesets[0]"),
    ("slurm.nodeset_name_clash", E, "prod", {"slurm.nodesets[0].name": "gpu001"},
     "slurm.nodesets[0].name"),
    ("slurm.nodeset_name_clash", E, "prod", {"slurm.nodesets[0].name": "debug"},
     "slurm.nodesets[0].name"),
    ("slurm.nodeset_name_clash", E, "prod", {"slurm.nodesets[0].name": "ALL"},
     "slurm.nodesets[0].name"),
    ("slurm.partition_unknown_nodeset", E, "prod",
     {"slurm.partitions[0].nodesets": ["h100-nodes", "h100"]}, "slurm.partitions[0].nodesets[1]"),
    ("slurm.partition_no_nodes", E, "prod", {"slurm.partitions[0].nodesets": []},
     "slurm.partitions[0]"),
    ("nodes.bad_hostlist", E, "prod",
     {"slurm.nodesets[0].classes": [], "slurm.nodesets[0].nodes": "gpu[9-1]"},
     "slurm.nodesets[0].nodes"),
    ("slurm.unknown_controller", E, "prod", {"slurm.controllers": ["ctl1", "ctl3"]},
     "slurm.controllers[1]"),
    ("slurm.duplicate_controller", E, "prod", {"slurm.controllers": ["ctl1", "ctl1"]},
     "slurm.controllers[1]"),
    ("slurm.controller_role", E, "prod", {"nodes[0].roles": ["slurmrestd"]},
     "slurm.controllers[0]"),
    ("slurm.controller_not_listed", W, "prod", {"slurm.controllers": ["ctl1"]}, "nodes[0].roles"),
    ("slurm.partition_unknown_node", E, "prod", {"slurm.partitions[2].nodes": "gpu[125-130]"},
     "slurm.partitions[2].nodes"),
    ("slurm.partition_non_compute", E, "prod", {"slurm.partitions[2].nodes": "gpu[125-128],login1"},
     "slurm.partitions[2].nodes"),
    ("slurm.no_default_partition", W, "prod", {"slurm.partitions[0].default": False},
     "slurm.partitions"),
    ("slurm.multiple_default_partitions", W, "prod", {"slurm.partitions[2].default": True},
     "slurm.partitions[2].default"),
    ("slurm.idle_worker", W, "prod", {"slurm.nodesets[0]": {"name": "h100-nodes",
                                                              "nodes": "gpu[001-120]"}},
     "nodes[5].hosts"),
    ("slurm.unknown_qos", E, "prod", {"slurm.partitions[1].qos": "interactve"},
     "slurm.partitions[1].qos"),
    ("slurm.unknown_qos", E, "prod", {"slurm.accounts[3].qos[1]": "dbg"},
     "slurm.accounts[3].qos[1]"),
    ("slurm.unknown_account", E, "prod", {"slurm.partitions[2].allow_accounts": ["ops", "opz"]},
     "slurm.partitions[2].allow_accounts[1]"),
    ("slurm.unknown_account", E, "prod", {"slurm.accounts[1].parent": "reserch"},
     "slurm.accounts[1].parent"),
    ("slurm.account_cycle", E, "prod", {"slurm.accounts[0].parent": "vision"},
     "slurm.accounts[0].parent"),
    ("slurm.unknown_user", W, "prod", {"slurm.accounts[3].users": ["dave", "erin"]},
     "slurm.accounts[3].users[1]"),
    ("slurm.time_format", E, "prod", {"slurm.partitions[2].max_time": "30min"},
     "slurm.partitions[2].max_time"),
    ("slurm.time_format", E, "prod", {"slurm.qos[1].max_wall": "8h"}, "slurm.qos[1].max_wall"),
    ("slurm.gres_mismatch", E, "prod", {"nodes[2].slurm.gres_count": 4},
     "nodes[2].slurm.gres_count"),
    ("slurm.real_memory_exceeds", E, "prod", {"nodes[3].slurm.real_memory_mb": 3000000},
     "nodes[3].slurm.real_memory_mb"),
    ("slurm.prolog_flags", E, "lab", {"slurm.hooks": {"prolog_flags": ["X11"]},
                                      "slurm.process_tracking": "linuxproc"},
     "slurm.hooks.prolog_flags"),
    ("slurm.prolog_flags", E, "prod", {"slurm.hooks": {"prolog_flags": ["Contain", "NoHold"]}},
     "slurm.hooks.prolog_flags"),
    ("slurm.ha_state_not_shared", E, "prod", {"storage.mounts[2].clients": "ctl1"},
     "slurm.state_dir"),
    ("slurm.ha_state_not_shared", E, "prod", {"slurm.state_dir": "/var/lib/slurmctld"},
     "slurm.state_dir"),
    ("slurm.state_export_squashed", E, "prod",
     {"storage.exports[2].options": "rw,sync,no_subtree_check,root_squash"},
     "storage.exports[2].options"),
    ("slurm.cloud_without_power_saving", E, "lab", {"nodes[2].slurm.state": "cloud"},
     "nodes[2].slurm.state"),
    ("slurm.power_saving_without_cloud", W, "lab",
     {"slurm.power_saving": {"resume_program": "r.sh", "suspend_program": "s.sh"}},
     "slurm.power_saving"),
    ("slurm.core_spec_exceeds", E, "prod", {"nodes[3].slurm.core_spec_count": 112},
     "nodes[3].slurm.core_spec_count"),
    ("slurm.mem_spec_exceeds", E, "prod", {"nodes[3].slurm.real_memory_mb": 2000000,
                                          "nodes[3].slurm.mem_spec_limit_mb": 2000000},
     "nodes[3].slurm.mem_spec_limit_mb"),
    ("slurm.node_addr_missing", W, "prod", {"nodes[4].addresses.management": DROP},
     "nodes[4].addresses"),
    ("slurm.node_addr_missing", W, "prod", {"nodes[0].addresses.management": DROP},
     "nodes[0].addresses"),
    ("slurm.no_compute_nodes", W, "lab", {"nodes[2].roles": ["slurm_login"]}, "nodes"),
    ("slurm.hooks_without_workers", W, "lab",
     {"nodes[2].roles": ["slurm_login"], "slurm.hooks": {"health_check": {"program": "h.sh"}}},
     "slurm.hooks"),
    ("slurm.accounting_host", E, "prod", {"slurm.accounting.host": "dbd1"},
     "slurm.accounting.host"),
    ("slurm.accounting_host", E, "prod", {"nodes[0].addresses": {"service": "10.30.0.11"}},
     "slurm.accounting.host"),
    ("slurm.slurmrestd_address", E, "prod", {"nodes[0].addresses.service": DROP},
     "nodes[0].addresses"),
    ("slurm.limits_without_accounting", W, "prod", {"slurm.accounting": DROP}, "slurm"),
    ("slurm.slurmrestd_host", W, "prod", {"nodes[0].roles": ["slurm_controller"]},
     "slurm.slurmrestd"),
    ("slurm.unknown_qos", E, "prod", {"slurm.partitions[2].allow_qos": ["debug", "dbg"]},
     "slurm.partitions[2].allow_qos[1]"),
    ("slurm.unknown_account", E, "prod", {"slurm.partitions[1].deny_accounts": ["opz"]},
     "slurm.partitions[1].deny_accounts[0]"),
    ("slurm.time_format", E, "prod", {"slurm.partitions[0].default_time": "4h"},
     "slurm.partitions[0].default_time"),
    ("slurm.time_format", E, "prod", {"slurm.priority.decay_half_life": "7d"},
     "slurm.priority.decay_half_life"),
    ("slurm.unknown_setting", E, "prod", {"slurm.extra.MaxJobCont": 5}, "slurm.extra.MaxJobCont"),
    ("slurm.owned_setting", E, "prod", {"slurm.extra.killwait": 3}, "slurm.extra.killwait"),
    ("slurm.unknown_scheduler_parameter", E, "prod", {"slurm.scheduler_parameters.bf_windw": 10},
     "slurm.scheduler_parameters.bf_windw"),
    ("slurm.select_type_parameters", E, "prod",
     {"slurm.select_type_parameters": ["CR_Core", "CR_Socket_Memory"]},
     "slurm.select_type_parameters"),
    ("slurm.select_type_parameters", E, "prod",
     {"slurm.select_type_parameters": ["CR_Memory"]}, "slurm.select_type_parameters"),
    ("slurm.default_time_exceeds", E, "prod", {"slurm.partitions[2].default_time": "01:00:00"},
     "slurm.partitions[2].default_time"),
    ("slurm.allow_and_deny_accounts", W, "prod",
     {"slurm.partitions[1].allow_accounts": ["research"]},
     "slurm.partitions[1].deny_accounts"),
    ("slurm.unknown_group", W, "prod",
     {"slurm.partitions[0].allow_groups": ["research", "reserch"]},
     "slurm.partitions[0].allow_groups[1]"),
    ("slurm.preempt_mode_unused", W, "prod", {"slurm.preemption": DROP},
     "slurm.partitions[1].preempt_mode"),
    # issue 44 §3: the lab's grace time sat on urgent, whose jobs are never preempted
    ("slurm.grace_time_unused", W, "lab", {"slurm.partitions[1].grace_time_s": 30},
     "slurm.partitions[1].grace_time_s"),
    ("slurm.grace_time_unused", W, "lab", {"slurm.preemption.type": "qos"},
     "slurm.partitions[0].grace_time_s"),
    ("slurm.grace_time_unused", W, "lab", {"slurm.partitions[0].preempt_mode": "off"},
     "slurm.partitions[0].grace_time_s"),
    ("slurm.grace_time_unused", W, "lab", {"slurm.qos[0].grace_time_s": 5},
     "slurm.qos[0].grace_time_s"),
    ("slurm.preemptor_without_preemptee", W, "lab", {"slurm.partitions[0].preempt_mode": "off"},
     "slurm.partitions[1].priority_tier"),
    ("slurm.preemptor_without_preemptee", W, "lab", {"slurm.partitions[1].priority_tier": 1},
     "slurm.preemption"),
    ("slurm.preempt_mode_ignored", E, "lab", {"slurm.partitions[0].preempt_mode": "suspend"},
     "slurm.partitions[0].preempt_mode"),
    ("slurm.preempt_mode_ignored", E, "lab", {"slurm.preemption.type": "qos"},
     "slurm.partitions[0].preempt_mode"),
    # issue 38 §2: privacy's privileged users must exist in slurmdbd
    ("slurm.privileged_user_unknown", E, "lab", {"slurm.operators": ["bob", "carol"]},
     "slurm.operators[1]"),
    ("slurm.privileged_user_unknown", E, "lab", {"slurm.accounting": None},
     "slurm.accounts[0].coordinators[0]"),
    ("slurm.private_data_not_in_release", W, "prod", {"slurm.private_data": ["jobs", "cloud"]},
     "slurm.private_data[1]"),
    ("slurm.gpu_defaults_exceed_node", E, "prod",
     {"slurm.partitions[0].def_mem_per_gpu_mb": 300000},
     "slurm.partitions[0].def_mem_per_gpu_mb"),
    ("slurm.gpu_defaults_exceed_node", E, "prod", {"slurm.partitions[2].def_cpu_per_gpu": 32},
     "slurm.partitions[2].def_cpu_per_gpu"),
    ("slurm.unknown_tres", E, "prod", {"slurm.partitions[0].tres_billing_weights.GRES/gpu:a100": 2},
     "slurm.partitions[0].tres_billing_weights.GRES/gpu:a100"),
    ("slurm.unknown_tres", E, "prod", {"slurm.priority.tres.GRES/mps": 2},
     "slurm.priority.tres.GRES/mps"),
    # topology
    ("topology.duplicate_name", E, "prod", {"topology.switches[6].name": "leaf03"},
     "topology.switches[6].name"),
    ("topology.duplicate_name", E, "prod", {"topology.blocks[7].name": "b01"},
     "topology.blocks[7].name"),
    ("topology.unknown_switch", E, "prod", {"nodes[2].switch": "leaf1"}, "nodes[2].switch"),
    ("topology.unknown_switch", E, "prod", {"topology.switches[1].switches": ["leaf01", "leaf09"]},
     "topology.switches[1].switches[1]"),
    ("topology.unknown_node", E, "prod", {"topology.blocks[7].nodes": "gpu[113-130]"},
     "topology.blocks[7].nodes"),
    ("topology.non_compute_node", W, "prod", {"topology.switches[3].nodes": "login1"},
     "topology.switches[3].nodes"),
    ("topology.switch_mixed_children", E, "prod", {"topology.switches[1].nodes": "gpu[001-002]"},
     "topology.switches[1]"),
    ("topology.empty_switch", E, "prod", {"topology.switches[7]": LEAF05,
                                          "topology.switches[2].switches[2]": "leaf05"},
     "topology.switches[7]"),
    ("topology.switch_two_parents", W, "prod",
     {"topology.switches[2].switches": ["leaf02", "leaf03", "leaf04"]},
     "topology.switches[2].switches[0]"),
    ("topology.cycle", E, "prod", {"topology.switches[2].switches[2]": "core"},
     "topology.switches[0]"),
    ("topology.node_two_leaves", W, "prod", {"topology.switches[4].nodes": "gpu[030-033]"},
     "topology.switches[4].nodes"),
    ("topology.slurm_node_missing", W, "prod", {"nodes[5].switch": DROP}, "nodes[5].switch"),
    ("topology.no_root", W, "prod", {"topology.switches[0]": DROP}, "topology.switches"),
    ("topology.block_version", E, "prod", {"slurm.version": "22.05"}, "topology.blocks"),
    ("slurm.plugin_not_in_release", E, "prod", {"slurm.mpi_default": "pmix_v4"},
     "slurm.mpi_default"),
    ("topology.block_sizes", E, "prod", {"topology.block_sizes": [16, 48]},
     "topology.block_sizes[1]"),
    ("topology.block_too_small", E, "prod", {"topology.blocks[7].nodes": "gpu[113-120]"},
     "topology.blocks[7].nodes"),
    ("topology.node_in_two_blocks", W, "prod", {"topology.blocks[7].nodes": "gpu[112-128]"},
     "topology.blocks[7].nodes"),
    ("topology.node_outside_blocks", W, "prod", {"topology.blocks[7]": DROP}, "topology.blocks"),
    # storage
    ("storage.duplicate_export", E, "prod", {"storage.exports[1].name": "home"},
     "storage.exports[1].name"),
    ("storage.unknown_export", E, "prod", {"storage.mounts[1].export": "data"},
     "storage.mounts[1].export"),
    ("storage.insecure_export", W, "prod",
     {"storage.exports[0].options": "rw,sync,insecure,no_subtree_check"},
     "storage.exports[0].options"),
    ("storage.unknown_server", E, "prod", {"storage.exports[1].server": "nfs3"},
     "storage.exports[1].server"),
    ("storage.server_role", E, "prod", {"storage.exports[1].server": "login1"},
     "storage.exports[1].server"),
    ("storage.server_not_on_segment", E, "prod", {"storage.exports[0].segment": "service"},
     "storage.exports[0].segment"),
    ("storage.unknown_client", E, "prod",
     {"storage.mounts[0].clients": "ctl[1-2],login[1-2],gpu[001-130]"}, "storage.mounts[0].clients"),
    ("storage.client_unreachable", E, "prod", {"nodes[7].addresses.storage": DROP},
     "storage.mounts[1].clients"),
    ("storage.relative_path", E, "prod", {"storage.mounts[0].path": "home"},
     "storage.mounts[0].path"),
    ("storage.duplicate_mount", E, "prod", {"storage.mounts[1].path": "/home/"},
     "storage.mounts[1].path"),
    ("storage.export_segment_purpose", W, "prod", {"storage.exports[0].segment": "management"},
     "storage.exports[0].segment"),
    ("storage.no_root_squash", W, "prod",
     {"storage.exports[0].options": "rw,sync,no_subtree_check,no_root_squash"},
     "storage.exports[0].options"),
    ("storage.unmounted_export", W, "lab", {"storage.mounts[1].export": "home"},
     "storage.exports[1].name"),
    # grants of exports to Kubernetes tenants
    ("storage.unknown_grant", E, "lab", {"kubernetes.tenants[0].storage[0].export": "model"},
     "kubernetes.tenants[0].storage[0].export"),
    ("storage.duplicate_grant", E, "prod",
     {"kubernetes.tenants[1].storage[1]": {"export": "datasets", "reason": "again"}},
     "kubernetes.tenants[1].storage[1].export"),
    ("storage.grant_not_mounted", E, "lab", {"storage.mounts[1].clients": "gpu[1-2]"},
     "kubernetes.tenants[0].storage[0].export"),
    # even with a reason: root in a pod would be root on the export
    ("storage.no_root_squash_granted", E, "lab",
     {"storage.exports[1].options": "rw,sync,no_subtree_check,no_root_squash",
      "storage.exports[1].reason": "a reason"}, "kubernetes.tenants[0].storage[0].export"),
    # an export the Slurm nodes mount ...
    ("storage.cross_plane_grant", E, "lab", {"kubernetes.tenants[0].storage[0].reason": ""},
     "kubernetes.tenants[0].storage[0]"),
    # ... or the Slurm users' homes (alice's is /home/alice), even where only Kubernetes mounts it
    ("storage.cross_plane_grant", E, "lab",
     {"storage.mounts[0]": {"export": "home", "path": "/home", "clients": "k8s2"},
      "kubernetes.tenants[0].storage[1]": {"export": "home", "access": "rw"}},
     "kubernetes.tenants[0].storage[1]"),
    # identity
    ("identity.duplicate_name", E, "prod", {"identity.users[5].name": "alice"},
     "identity.users[5].name"),
    ("identity.duplicate_name", E, "prod", {"identity.groups[4].name": "research"},
     "identity.groups[4].name"),
    ("identity.id_collision", E, "prod", {"identity.users[3].uid": 20101}, "identity.users[3].uid"),
    ("identity.id_collision", E, "prod", {"identity.groups[4].gid": 20001}, "identity.groups[4].gid"),
    ("identity.unknown_group", E, "prod", {"identity.users[4].group": "reserch"},
     "identity.users[4].group"),
    ("identity.reserved_id", E, "prod", {"identity.users[5].uid": 0}, "identity.users[5].uid"),
    ("identity.uid_range", W, "prod", {"identity.users[2].uid": 500}, "identity.users[2].uid"),
    ("identity.run_as_unknown", E, "lab", {"kubernetes.tenants[0].run_as.users[0]": "bobby"},
     "kubernetes.tenants[0].run_as.users[0]"),
    ("identity.run_as_unknown", E, "lab", {"kubernetes.tenants[0].run_as.groups[0]": "opps"},
     "kubernetes.tenants[0].run_as.groups[0]"),
    ("identity.run_as_system", E, "lab", {"kubernetes.tenants[0].run_as.users[1]": "slurm"},
     "kubernetes.tenants[0].run_as.users[1]"),
    ("identity.run_as_system", E, "lab", {"identity.users[3].uid": 0},   # bob as root
     "kubernetes.tenants[0].run_as.users[0]"),
    ("identity.run_as_system", E, "prod", {"kubernetes.tenants[1].run_as.groups": ["munge"]},
     "kubernetes.tenants[1].run_as.groups[0]"),
    # bob, granted, in the slurm daemons' group
    ("identity.run_as_system", E, "prod", {"identity.users[3].group": "slurm"},
     "kubernetes.tenants[0].run_as.users[0]"),
    # flows
    ("network.unknown_segment", E, "prod", {"firewall.flows[0].segment": "servce"},
     "firewall.flows[0].segment"),
    ("flows.unknown_node", E, "prod", {"firewall.flows[0].to": "login[1-3]"},
     "firewall.flows[0].to"),
    ("flows.unknown_node", E, "prod", {"firewall.flows[0].from_cidrs": []}, "firewall.flows[0]"),
    ("flows.unknown_node", E, "prod", {"firewall.flows[0].port_end": 80},
     "firewall.flows[0].port_end"),
    # the jupyter flow from the GPU nodes, which have no service address
    ("flows.source_off_segment", W, "prod", {"firewall.flows[0].from_roles": ["slurm_worker"]},
     "firewall.flows[0]"),
    # slurmctld from the login nodes only: the workers' slurmd could not register
    ("flows.required_cut", E, "lab", {"firewall.flows": [CTLD_LOGIN_ONLY]}, "firewall.flows[0]"),
    # NFS from gpu1 only: the export's other mount clients are cut
    ("flows.required_cut", E, "lab", {"firewall.flows": [{**NFS_GPU1, "from_hosts": "gpu1"}]},
     "firewall.flows[0]"),
    # job traffic: NCCL cannot keep to a narrowed range; Open MPI needs a port per rank
    ("jobs.narrowing_launcher", E, "lab",
     {"firewall.jobs": {"ports": [50000, 50100], "launchers": ["nccl", "torchrun"]}},
     "firewall.jobs.ports"),
    ("jobs.narrowing_launcher", E, "lab",
     {"firewall.jobs": {"ports": [50000, 50010], "launchers": ["openmpi"]}},
     "firewall.jobs.ports"),
    ("jobs.nic_segment", E, "lab", {"node_classes[1].nics[1].segments": ["fabrik"]},
     "node_classes[1].nics[1].segments[0]"),
    # gpu[1-2] have a fabric address, but no NIC of gpu-2x says it carries the fabric
    ("jobs.no_fabric_nic", W, "lab", {"node_classes[1].nics[1].segments": []},
     "node_classes[1].nics"),
    # gpu[001-032] without a fabric address: 8 x 8 ranks x 31 peers x 2 = 3968 > 2048
    ("jobs.conntrack_overflow", W, "prod",
     {"nodes[2].addresses": {"management": "auto", "storage": "auto"},
      "firewall.jobs": {"conntrack_max": 2048}}, "firewall.jobs"),
    # monitoring: Prometheus on a node the spec lacks, or off the segment it scrapes
    ("monitoring.unknown_host", E, "lab", {"monitoring.host": "mon1"}, "monitoring.host"),
    ("monitoring.host_off_segment", E, "lab", {"monitoring.host": "gpu1",
                                               "monitoring.segment": "service"},
     "monitoring.host"),
    # gpu[1-2] and nfs1 have no service address: their exporters are not scraped
    ("monitoring.targets_off_segment", W, "lab", {"monitoring.segment": "service"},
     "monitoring.segment"),
    ("network.unknown_segment", E, "lab", {"monitoring.segment": "mgmt"}, "monitoring.segment"),
    # gpu[1-2] split their A100s into MIG devices: the DCGM job mapping cannot say whose
    ("monitoring.mig_gpu_attribution", W, "lab",
     {"node_classes[1].gpus.mig_profiles": {"1g.5gb": 7}, "slurm.gres_autodetect": "nvml"},
     "node_classes[1].gpus.mig_profiles"),
    # Alertmanager (the lab routes slurm to ops, research to research, inference to inference)
    ("monitoring.alertmanager_duplicate_receiver", E, "lab",
     {"monitoring.alertmanager.receivers[2].name": "ops"},
     "monitoring.alertmanager.receivers[2].name"),
    ("monitoring.alertmanager_reserved_receiver", E, "lab",
     {"monitoring.alertmanager.receivers[3]": {"name": "null"}},
     "monitoring.alertmanager.receivers[3].name"),
    ("monitoring.alertmanager_unknown_receiver", E, "lab",
     {"monitoring.alertmanager.routes[1].receiver": "reserch"},
     "monitoring.alertmanager.routes[1].receiver"),
    ("monitoring.alertmanager_unknown_receiver", E, "lab",
     {"monitoring.alertmanager.receiver": "pager"}, "monitoring.alertmanager.receiver"),
    ("monitoring.alertmanager_unused_receiver", W, "lab",
     {"monitoring.alertmanager.receivers[3]": {"name": "spare"}},
     "monitoring.alertmanager.receivers[3].name"),
    ("monitoring.alertmanager_unknown_plane", E, "lab",
     {"monitoring.alertmanager.routes[3].plane": "nfs"},
     "monitoring.alertmanager.routes[3].plane"),
    # a Slurm tenant is an account; inference is a Kubernetes tenant
    ("monitoring.alertmanager_unknown_tenant", E, "lab",
     {"monitoring.alertmanager.routes[1].tenant": "inference"},
     "monitoring.alertmanager.routes[1].tenant"),
    ("monitoring.alertmanager_unknown_tenant", E, "lab",
     {"monitoring.alertmanager.routes[3].tenant": "nfs9"},
     "monitoring.alertmanager.routes[3].tenant"),
    ("monitoring.alertmanager_unknown_tenant", E, "lab",
     {"kubernetes": DROP, "storage.mounts[1].clients": "gpu[1-2]"},
     "monitoring.alertmanager.routes[2].tenant"),
    ("monitoring.alertmanager_duplicate_route", E, "lab",
     {"monitoring.alertmanager.routes[4]": {"plane": "slurm", "tenant": "research",
                                            "receiver": "ops"}},
     "monitoring.alertmanager.routes[4]"),
    ("monitoring.alertmanager_no_smtp", E, "prod", {"monitoring.alertmanager.smtp": DROP},
     "monitoring.alertmanager.receivers[0].emails"),
    ("monitoring.alertmanager_unknown_receiver", E, "lab",
     {"monitoring.alertmanager.watchdog.receiver": "heartbeat"},
     "monitoring.alertmanager.watchdog.receiver"),
    # the lab sends its Watchdog to the lab host's receiver
    ("monitoring.watchdog_not_sent", W, "lab", {"monitoring.alertmanager.watchdog": DROP},
     "monitoring.alertmanager"),
    ("monitoring.alertmanager_repeat_before_interval", W, "lab",
     {"monitoring.alertmanager.repeat_interval_s": 120,
      "monitoring.alertmanager.group_interval_s": 300},
     "monitoring.alertmanager.repeat_interval_s"),
    # bridge (the lab's inference tenant submits as svc-inference to ops/gpu with normal)
    ("bridge.no_slurmrestd", E, "lab", {"slurm.slurmrestd": None}, "kubernetes.tenants[0].bridge"),
    ("bridge.no_slurmrestd", E, "lab", {"slurm.accounting": None,
                                        "slurm.priority.tres": {}}, "kubernetes.tenants[0].bridge"),
    ("bridge.unknown_user", E, "lab", {"kubernetes.tenants[0].bridge.user": "svc-missing"}, "kubernetes.tenants[0].bridge.user"),
    ("bridge.unknown_user", E, "lab", {"kubernetes.tenants[0].bridge.user": "slurm"}, "kubernetes.tenants[0].bridge.user"),
    ("bridge.shared_user", E, "lab", {"kubernetes.tenants[0].bridge.user": "bob"}, "kubernetes.tenants[0].bridge.user"),
    ("bridge.unknown_account", E, "lab", {"kubernetes.tenants[0].bridge.account": "finance"}, "kubernetes.tenants[0].bridge.account"),
    ("bridge.unknown_partition", E, "lab", {"kubernetes.tenants[0].bridge.partitions": ["gpu", "batch"]},
     "kubernetes.tenants[0].bridge.partitions[1]"),
    # urgent denies vision
    ("bridge.unknown_partition", E, "lab", {"kubernetes.tenants[0].bridge.account": "vision",
                                            "kubernetes.tenants[0].bridge.partitions": ["urgent"]},
     "kubernetes.tenants[0].bridge.partitions[0]"),
    ("bridge.unknown_qos", E, "lab", {"kubernetes.tenants[0].bridge.qos": ["normal", "premium"]}, "kubernetes.tenants[0].bridge.qos[1]"),
    # ops may use normal only
    ("bridge.unknown_qos", E, "lab", {"kubernetes.tenants[0].bridge.qos": ["debug"]}, "kubernetes.tenants[0].bridge.qos[0]"),
]



def _case_id(case) -> str:
    return f"{case[0]}:{case[4]}"


@pytest.mark.parametrize("vid,severity,base,edits,path", CASES, ids=map(_case_id, CASES))
def test_seeded_mistake_is_reported(vid, severity, base, edits, path):
    data = spec_dict(base)
    for where, value in edits.items():
        put(data, where, value)
    found = keyed(findings_for(data))
    assert (vid, path) in found, f"{vid} at {path} not reported; got {sorted(found)}"
    finding = found[(vid, path)]
    assert finding.severity is severity
    assert finding.hint, "every finding says how to fix it"
    assert finding.location.startswith("<test>:"), "every finding points into the file"


def test_a_cross_plane_grant_says_which_plane_it_crosses():
    data = spec_dict("lab")
    put(data, "storage.mounts[0]", {"export": "home", "path": "/home", "clients": "k8s2"})
    put(data, "kubernetes.tenants[0].storage[1]", {"export": "home", "access": "rw"})
    put(data, "kubernetes.tenants[0].storage[0].reason", "")
    found = keyed(findings_for(data))
    assert "holds the Slurm users' homes" in \
        found[("storage.cross_plane_grant", "kubernetes.tenants[0].storage[1]")].message
    assert "is mounted by Slurm-plane nodes" in \
        found[("storage.cross_plane_grant", "kubernetes.tenants[0].storage[0]")].message
    # with reasons, the same grants pass
    put(data, "kubernetes.tenants[0].storage[0].reason", "checkpoints")
    put(data, "kubernetes.tenants[0].storage[1].reason", "notebooks")
    assert not [f for f in findings_for(data) if f.id.startswith("storage.")]
