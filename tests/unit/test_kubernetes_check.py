"""Kubernetes validators: one seeded mistake per spec check, and rendered files that were
tampered with after rendering are caught by the artifact checks `estate check` runs."""
from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import yaml

from estate.check import check_artifacts
from estate.check import kubernetes_schema as kcheck
from estate.check.registry import REGISTRY
from estate.findings import Severity
from estate.pipeline import build
from estate.model import kubernetes as k8s
from estate.render import Artifacts, render_all
from estate.spec.hostlist import Hostlist
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, findings_for, keyed, spec_dict
from tests.unit.test_check_validators import DROP, put

E, W = Severity.ERROR, Severity.WARNING

# (validator id, severity, base spec, edits {path: value}, expected finding path)
CASES = [
    ("kubernetes.tenant_group", E, "lab", {"kubernetes.tenants[0].groups": ["nobody"]},
     "kubernetes.tenants[0].groups[0]"),
    ("kubernetes.version", E, "lab", {"kubernetes.version": "v1.31"}, "kubernetes.version"),
    ("kubernetes.version", E, "lab", {"kubernetes.version": "1.30.2"}, "kubernetes.version"),
    ("kubernetes.version", E, "lab", {"kubernetes.version": "1.99.0"}, "kubernetes.version"),
    ("kubernetes.control_plane", E, "lab", {"kubernetes.control_plane": ["k8s9"]},
     "kubernetes.control_plane[0]"),
    ("kubernetes.control_plane", E, "lab",
     {"kubernetes.control_plane": ["k8s1", "k8s2"]}, "kubernetes.control_plane[1]"),
    ("kubernetes.control_plane_not_listed", W, "lab",
     {"nodes[5].roles": ["k8s_control_plane"]}, "nodes[5].roles"),
    ("kubernetes.api_vip_missing", E, "lab",
     {"nodes[5].roles": ["k8s_control_plane", "k8s_worker"],
      "kubernetes.control_plane": ["k8s1", "k8s2"]}, "kubernetes.control_plane"),
    ("kubernetes.api_vip_missing", E, "ha", {"kubernetes.api_vip": DROP},
     "kubernetes.control_plane"),
    ("kubernetes.api_vip", E, "ha", {"kubernetes.api_vip": "10.40.0.5"}, "kubernetes.api_vip"),
    ("kubernetes.api_vip", E, "ha", {"kubernetes.api_vip": "10.30.0.0"}, "kubernetes.api_vip"),
    # the first auto-allocated address of the service segment: a node's
    ("kubernetes.api_vip", E, "ha", {"kubernetes.api_vip": "10.30.0.15"}, "kubernetes.api_vip"),
    ("kubernetes.api_vip_interface", E, "ha", {"kubernetes.api_vip_interface": DROP},
     "kubernetes.api_vip_interface"),
    ("kubernetes.api_vip_interface", E, "ha", {"kubernetes.api_vip_interface": "eth1"},
     "kubernetes.api_vip_interface"),
    ("kubernetes.api_vip_interface", E, "ha",
     {"kubernetes.api_vip_interface": "enp0s31f6-storage"}, "kubernetes.api_vip_interface"),
    ("kubernetes.etcd_even", W, "ha", {"nodes[6].hosts": "k8s-cp[1-2]",
                                      "kubernetes.control_plane": ["k8s-cp1", "k8s-cp2"]},
     "kubernetes.control_plane"),
    ("kubernetes.api_address", E, "lab", {"nodes[5].addresses.service": DROP},
     "nodes[5].addresses"),
    ("kubernetes.tenant_name", E, "lab", {"kubernetes.tenants[0].name": "Inference_A"},
     "kubernetes.tenants[0].name"),
    ("kubernetes.tenant_name", E, "lab", {"kubernetes.tenants[0].name": "kube-system"},
     "kubernetes.tenants[0].name"),
    ("kubernetes.tenant_name", E, "lab", {"kubernetes.tenants[0].cohort": "Main_Pool"},
     "kubernetes.tenants[0].cohort"),
    ("kubernetes.tenant_name", E, "prod", {"kubernetes.tenants[1].name": "inference"},
     "kubernetes.tenants[1].name"),
    ("kubernetes.allow_from_unknown", E, "prod",
     {"kubernetes.tenants[0].allow_from": ["batch-embed", "trainng"]},
     "kubernetes.tenants[0].allow_from[1]"),
    ("kubernetes.gpu_model", E, "lab", {"node_classes[2].gpus.model": "L4"},
     "node_classes[2].gpus.model"),
    ("kubernetes.gpu_model", E, "lab", {"node_classes[2].gpus.product": "NVIDIA L4 (24GB)"},
     "node_classes[2].gpus.product"),
    ("kubernetes.gpu_sharing", E, "lab",
     {"kubernetes.gpu_sharing_by_class": {"h100-8x": {"mode": "none"}}},
     "kubernetes.gpu_sharing_by_class.h100-8x"),
    ("kubernetes.gpu_sharing", E, "lab",
     {"kubernetes.gpu_sharing_by_class": {"svc-small": {"mode": "none"}}},
     "kubernetes.gpu_sharing_by_class.svc-small"),
    ("kubernetes.gpu_sharing", E, "lab", {"kubernetes.gpu_sharing": {"mode": "mig"}},
     "kubernetes.gpu_sharing"),
    ("kubernetes.gpu_sharing", E, "lab",
     {"kubernetes.gpu_sharing": {"mode": "time-slicing", "replicas": 4, "mig_devices": 7}},
     "kubernetes.gpu_sharing.mig_devices"),
    ("kubernetes.gpu_sharing", E, "lab",
     {"node_classes[2].gpus.mig": True,
      "kubernetes.gpu_sharing": {"mode": "mig", "mig_strategy": "mixed", "mig_devices": 7}},
     "kubernetes.gpu_sharing.mig_devices"),
    # a layout of 7 MIG devices per GPU, yet mig_devices says 3
    ("kubernetes.gpu_sharing", E, "lab",
     {"node_classes[2].gpus.mig": True, "node_classes[2].gpus.mig_profiles": {"1g.5gb": 7},
      "kubernetes.gpu_sharing": {"mode": "mig", "mig_devices": 3}},
     "kubernetes.gpu_sharing.mig_devices"),
    ("kubernetes.mig_quota_units", W, "lab",
     {"node_classes[2].gpus.mig": True, "kubernetes.gpu_sharing": {"mode": "mig"}},
     "nodes[5].class"),
    ("kubernetes.node_labels", E, "lab", {"nodes[5].labels": {"node-role.kubernetes.io/gpu": ""}},
     "nodes[5].labels.node-role.kubernetes.io/gpu"),
    ("kubernetes.node_labels", E, "lab", {"nodes[5].labels": {"nvidia.com/gpu.count": "8"}},
     "nodes[5].labels.nvidia.com/gpu.count"),
    ("kubernetes.topology_label", E, "lab",
     {"topology.switches": [{"name": "spine1", "switches": ["leaf1-"]}, {"name": "leaf1-"}],
      "nodes[0].switch": "leaf1-", "nodes[1].switch": "leaf1-", "nodes[2].switch": "leaf1-"},
     "topology.switches[1].name"),
    ("kubernetes.export_name", E, "lab",
     {"storage.exports[1].name": "Model_Store", "storage.mounts[1].export": "Model_Store",
      "kubernetes.tenants[0].storage[0].export": "Model_Store"},
     "storage.exports[1].name"),
    ("kubernetes.plane_too_large", W, "lab", {"nodes[5].hosts": "inf[0001-5000]"},
     "nodes[5].hosts"),
    # end of life 2025-10-28; the tests' day is fixed (tests/conftest.py FIXED_TODAY)
    ("kubernetes.version_end_of_life", W, "lab", {"kubernetes.version": "1.31.4"},
     "kubernetes.version"),
    # Kueue v0.19.2 is tested on 1.34-1.36
    ("kubernetes.kueue_untested_version", W, "lab", {"kubernetes.version": "1.37.1"},
     "kubernetes.version"),
    ("kubernetes.reserved_exceeds_capacity", E, "lab",
     {"kubernetes.kubelet": {"kube_reserved": {"cpu_millicores": 0, "memory_mb": 4096}}},
     "kubernetes.kubelet"),
    ("kubernetes.reserved_exceeds_capacity", E, "lab",
     {"kubernetes.kubelet": {"system_reserved": {"cpu_millicores": 2000, "memory_mb": 0}}},
     "kubernetes.kubelet"),
    ("kubernetes.yaml_word", E, "lab", {"kubernetes.tenants[0].cohort": "on"},
     "kubernetes.tenants[0].cohort"),
]


@pytest.mark.parametrize("vid,severity,base,edits,path", CASES,
                         ids=[f"{c[0]}:{c[4]}" for c in CASES])
def test_seeded_mistake_is_reported(vid, severity, base, edits, path):
    data = spec_dict(base)
    for where, value in edits.items():
        put(data, where, value)
    found = keyed(findings_for(data))
    assert (vid, path) in found, sorted(found)
    f = found[(vid, path)]
    assert f.severity is severity and f.hint and f.location.startswith("<test>:")


@pytest.mark.parametrize("base", ["lab", "prod", "ha"])
def test_example_stacks_have_no_kubernetes_errors(base):
    errors = [f for f in findings_for(spec_dict(base))
              if f.id.startswith("kubernetes.") and f.severity is E]
    assert errors == []


# --- artifact checks ---------------------------------------------------------------------

@dataclass
class Ctx:
    estate: Estate
    artifacts: Artifacts


@pytest.fixture(scope="module")
def lab():
    loaded = load_text((ROOT / "stacks" / "lab.yaml").read_text(), "stacks/lab.yaml")
    estate = Estate(loaded.spec)
    return estate, render_all(estate, "stacks/lab.yaml")


def artifact_findings(estate, arts) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in check_artifacts(Ctx(estate, arts)):
        out.setdefault(f.id, []).append(f)
    return out


def tampered(arts: Artifacts, path: str, edit) -> Artifacts:
    """A copy of arts whose YAML file at path is changed by edit(list of documents)."""
    out = Artifacts(arts)
    docs = list(yaml.safe_load_all(arts[path].content))
    edit(docs)
    out[path] = replace(arts[path], content=yaml.safe_dump_all(docs, sort_keys=False).encode())
    return out


def test_clean_render_has_no_kubernetes_artifact_findings(lab):
    found = artifact_findings(*lab)
    assert not {k: v for k, v in found.items() if k.startswith("kubernetes.")}


def test_pipeline_runs_the_artifact_checks():
    ids = {v.id for v in REGISTRY.values() if v.domain == "kubernetes" and v.stage == "artifacts"}
    assert ids == {"kubernetes.manifest_invalid", "kubernetes.config_invalid",
                   "kubernetes.secret_rendered", "kubernetes.gpu_node_scheduling",
                   "kubernetes.tenant_unfenced", "kubernetes.gpu_isolation",
                   "kubernetes.quota_exceeds_allocatable", "kubernetes.kueue_config_invalid",
                   "kubernetes.kueue_tenant_unmanaged", "kubernetes.addon_unschedulable",
                   "kubernetes.api_vip_mismatch", "kubernetes.control_plane_timers",
                   "kubernetes.quota_not_advertised", "kubernetes.mig_layout_invalid",
                   "kubernetes.tenant_boundary_writable", "kubernetes.tenant_secrets_readable",
                   "kubernetes.namespace_pod_security_implicit",
                   "kubernetes.quota_over_daemonsets"}
    result = build(ROOT / "stacks" / "lab.yaml")
    assert result.ok and "kubernetes/manifests/50-kueue.yaml" in result.artifacts


def _set(path: list, value):
    def edit(docs):
        target = docs
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


TAMPER = [
    # tenants bound to the built-in `edit`, which writes NetworkPolicies (issue 46)
    ("kubernetes/manifests/30-tenant-inference.yaml", _set([1, "roleRef", "name"], "edit"),
     "kubernetes.tenant_boundary_writable", "change what the estate owns in 'inference'"),
    # a tenant role that may delete its own default-deny
    ("kubernetes/manifests/00-tenants.yaml",
     _set([-1, "rules", 6, "verbs"], ["get", "list", "watch", "delete"]),
     "kubernetes.tenant_boundary_writable", "networkpolicies"),
    # kube-state-metrics allowed to list Secrets everywhere again (issue 38)
    ("kubernetes/manifests/26-kube-state-metrics.yaml",
     _set([0, "rules"], [{"apiGroups": [""], "resources": ["secrets"],
                          "verbs": ["list", "watch"]}]),
     "kubernetes.tenant_secrets_readable", "read Secrets in 'inference'"),
    # kueue-system without a Pod Security level: privileged by default
    ("kubernetes/manifests/40-kueue-install.yaml", _set([0, "metadata", "labels"], {}),
     "kubernetes.namespace_pod_security_implicit", "namespace 'kueue-system' has no"),
    # the device plugin unprivileged, under a toolkit that ignores the devices variable then
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([4, "spec", "template", "spec", "containers", 1, "securityContext"],
          {"privileged": False}),
     "kubernetes.gpu_isolation", "the plugin finds no GPU and fails to start"),
    # the plugin with every capability dropped: the toolkit counts it unprivileged
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([4, "spec", "template", "spec", "containers", 1, "securityContext", "capabilities"],
          {"drop": ["ALL"]}),
     "kubernetes.gpu_isolation", "has no SYS_ADMIN"),
    # a device plugin passing GPUs only as NVIDIA_VISIBLE_DEVICES, which the toolkit ignores
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([3, "data", "default"], "version: v1\nflags:\n  plugin:\n"
          "    deviceListStrategy: envvar\n"),
     "kubernetes.gpu_isolation", "passes GPUs only through NVIDIA_VISIBLE_DEVICES"),
    # a tenant namespace that no longer enforces Pod Security
    ("kubernetes/manifests/00-tenants.yaml",
     _set([0, "metadata", "labels", "pod-security.kubernetes.io/enforce"], "privileged"),
     "kubernetes.tenant_unfenced", "enforces Pod Security level 'privileged'"),
    # a tenant whose pods may take the system's priority
    ("kubernetes/manifests/30-tenant-inference.yaml",
     _set([2, "spec", "scopeSelector", "matchExpressions", 0, "values"], ["nobody"]),
     "kubernetes.tenant_unfenced", "may name PriorityClasses"),
    # an unknown field in a built-in object (strict schema)
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([4, "spec", "template", "spec", "nodeSelecter"], {"a": "b"}),
     "kubernetes.manifest_invalid", "nodeSelecter"),
    # a wrong type in a built-in object
    ("kubernetes/manifests/00-tenants.yaml", _set([1, "value"], "high"),
     "kubernetes.manifest_invalid", "'high' is not of type 'integer'"),
    # Kueue v1beta1's field name in a v1beta2 ClusterQueue (CRD schema, closed)
    ("kubernetes/manifests/50-kueue.yaml", _set([1, "spec", "cohort"], "estate"),
     "kubernetes.manifest_invalid", "cohort"),
    # a CRD enum
    ("kubernetes/manifests/50-kueue.yaml",
     _set([1, "spec", "preemption", "reclaimWithinCohort"], "Always"),
     "kubernetes.manifest_invalid", "Always"),
    # an object name Kubernetes rejects
    ("kubernetes/manifests/00-tenants.yaml", _set([0, "metadata", "name"], "Inference"),
     "kubernetes.manifest_invalid", "not a valid Namespace name"),
    # a misspelt kubeadm field
    ("kubernetes/kubeadm/init.yaml", _set([0, "nodeRegistraton"], {}),
     "kubernetes.config_invalid", "nodeRegistraton"),
    # the kubelet's cgroup driver
    ("kubernetes/kubeadm/init.yaml", _set([2, "cgroupDriver"], "cgroupsv2"),
     "kubernetes.config_invalid", "cgroupsv2"),
    # Kueue left to manage only what names a queue: a tenant's Deployment runs unadmitted
    ("kubernetes/manifests/41-kueue-controller.yaml",
     _set([0, "data", "controller_manager_config.yaml"],
          "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
          "manageJobsWithoutQueueName: false\n"),
     "kubernetes.kueue_tenant_unmanaged", "manageJobsWithoutQueueName is not true"),
    # a misspelt Kueue configuration field (closed schema)
    ("kubernetes/manifests/41-kueue-controller.yaml",
     _set([0, "data", "controller_manager_config.yaml"],
          "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
          "manageJobsWithoutQueueNames: true\n"),
     "kubernetes.kueue_config_invalid", "manageJobsWithoutQueueNames"),
    # Kueue's controller without the control-plane toleration: every node is tainted
    ("kubernetes/manifests/41-kueue-controller.yaml",
     _set([1, "spec", "template", "spec", "tolerations"], []),
     "kubernetes.addon_unschedulable", "kueue-system/kueue-controller-manager has no node"),
    # a kubelet reservation in a unit the kubelet cannot parse
    ("kubernetes/kubeadm/init.yaml", _set([2, "kubeReserved", "cpu"], "half"),
     "kubernetes.config_invalid", "half"),
    # a reservation the quotas were not split for: they now exceed allocatable
    ("kubernetes/kubeadm/init.yaml", _set([2, "systemReserved", "memory"], "3Gi"),
     "kubernetes.quota_exceeds_allocatable", "MiB of memory in flavor 'l4'"),
    # a DaemonSet on the GPU workers that asks for more than the quotas left it
    ("kubernetes/manifests/22-dcgm-exporter.yaml",
     _set([0, "spec", "template", "spec", "containers", 0, "resources", "requests", "memory"],
          "1Gi"), "kubernetes.quota_over_daemonsets", "dcgm-exporter"),
    # ... or for a GPU unit the tenants' ClusterQueue already holds
    ("kubernetes/manifests/22-dcgm-exporter.yaml",
     _set([0, "spec", "template", "spec", "containers", 0, "resources", "requests",
           "nvidia.com/gpu"], 1), "kubernetes.quota_over_daemonsets",
     "units of nvidia.com/gpu in flavor 'l4'"),
    # a hand-raised CPU quota
    ("kubernetes/manifests/50-kueue.yaml",
     _set([1, "spec", "resourceGroups", 0, "flavors", 0, "resources", 0, "nominalQuota"], 64),
     "kubernetes.quota_exceeds_allocatable", "millicores of cpu in flavor 'l4'"),
    # kind's node role
    ("kubernetes/kind-config.yaml", _set([0, "nodes", 0, "role"], "master"),
     "kubernetes.config_invalid", "master"),
    # a device plugin config the plugin would refuse (replicas must be > 0)
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([3, "data", "default"], "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
          "    - {name: nvidia.com/gpu, replicas: 0}\n"),
     "kubernetes.config_invalid", "replicas"),
    # a real-looking bootstrap token instead of the placeholder
    ("kubernetes/kubeadm/join/k8s2.yaml",
     _set([0, "discovery", "bootstrapToken", "token"], "abcdef.0123456789abcdef"),
     "kubernetes.secret_rendered", "bootstrap token"),
    # quotas above what the nodes advertise
    ("kubernetes/manifests/50-kueue.yaml",
     _set([1, "spec", "resourceGroups", 0, "flavors", 0, "resources", 2, "nominalQuota"], 5),
     "ownership.pool_overcommitted", "advertise 4 (time-slice replicas"),
    # a GPU node registered without its taint
    ("kubernetes/kubeadm/join/k8s2.yaml", _set([0, "nodeRegistration", "taints"], []),
     "kubernetes.gpu_node_scheduling", "without the nvidia.com/gpu taint"),
    # a flavor that selects no node
    ("kubernetes/manifests/50-kueue.yaml",
     _set([0, "spec", "nodeLabels"], {"nvidia.com/gpu.product": "NVIDIA-L4-SHARED"}),
     "ownership.pool_overcommitted", "matches no rendered node"),
]


# --- an HA control plane (example-prod with three control planes and a VIP) ------------------

@pytest.fixture(scope="module")
def ha():
    estate = Estate(load_text(yaml.safe_dump(spec_dict("ha")), "<ha>").spec)
    return estate, render_all(estate, "<ha>")


def _text(path: str, old: str, new: str):
    """An edit of a non-YAML file (systemd units) by text."""
    return ("text", path, old, new)


def _dropped(path: str):
    return ("drop", path)


def _consumers(path: str, hosts: str):
    return ("consumers", path, hosts)


def retouched(arts: Artifacts, path: str, edit) -> Artifacts:
    if callable(edit):
        return tampered(arts, path, edit)
    out = Artifacts(arts)
    if edit[0] == "drop":
        del out[path]
    elif edit[0] == "consumers":
        out[path] = replace(arts[path], consumers=Hostlist.parse(edit[2]))
    else:
        out[path] = replace(arts[path], content=arts[path].content.replace(
            edit[2].encode(), edit[3].encode()))
    return out


TAMPER_HA = [
    # kube-vip announcing another address than the spec's VIP
    (k8s.KUBE_VIP_PATH, _set([0, "spec", "containers", 0, "env", -2, "value"], "10.30.0.11"),
     "kubernetes.api_vip_mismatch", "kube-vip announces 10.30.0.11"),
    # kubeadm's endpoint back on the first control plane's own address
    ("kubernetes/kubeadm/init.yaml", _set([1, "controlPlaneEndpoint"], "10.30.0.15:6443"),
     "kubernetes.api_vip_mismatch", "controlPlaneEndpoint's host is 10.30.0.15"),
    # a misspelt Pod field in kube-vip's static pod (strict Pod schema)
    (k8s.KUBE_VIP_INIT_PATH, _set([0, "spec", "hostNetwrok"], True),
     "kubernetes.api_vip_mismatch", "hostNetwrok"),
    # a control plane without kube-vip: the VIP cannot fail over to it
    (k8s.KUBE_VIP_PATH, _consumers(k8s.KUBE_VIP_PATH, "k8s-cp[1-2]"),
     "kubernetes.api_vip_mismatch", "control planes k8s-cp3 run no kube-vip"),
    (k8s.KUBE_VIP_PATH, _dropped(k8s.KUBE_VIP_PATH),
     "kubernetes.api_vip_mismatch", "no kube-vip manifest"),
    # renewal once a year: the certificates would expire first
    ("kubernetes/systemd/estate-cert-renew.timer",
     _text("kubernetes/systemd/estate-cert-renew.timer", "OnCalendar=monthly",
           "OnCalendar=yearly"),
     "kubernetes.control_plane_timers", "certificate renewal runs every 366 days"),
    ("kubernetes/systemd/estate-cert-renew.timer",
     _text("kubernetes/systemd/estate-cert-renew.timer", "OnCalendar=monthly",
           "OnCalendar=*-01-01"),
     "kubernetes.control_plane_timers", "which Estate cannot bound"),
    # a control plane without its etcd snapshots
    ("kubernetes/systemd/estate-etcd-snapshot.timer",
     _consumers("kubernetes/systemd/estate-etcd-snapshot.timer", "k8s-cp[1-2]"),
     "kubernetes.control_plane_timers", "control planes k8s-cp3 do not get "
                                        "estate-etcd-snapshot.timer"),
    ("kubernetes/sbin/estate-cert-renew", _dropped("kubernetes/sbin/estate-cert-renew"),
     "kubernetes.control_plane_timers", "do not get estate-cert-renew"),
]


def test_clean_ha_render_has_no_findings(ha):
    found = artifact_findings(*ha)
    assert not {k: v for k, v in found.items() if k.startswith("kubernetes.")}


@pytest.mark.parametrize("path,edit,vid,text", TAMPER_HA,
                         ids=[f"{t[2]}:{t[3]}" for t in TAMPER_HA])
def test_tampered_ha_artifact_is_caught(ha, path, edit, vid, text):
    estate, arts = ha
    found = artifact_findings(estate, retouched(arts, path, edit))
    assert vid in found, sorted(found)
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]


def test_resource_quotas_that_each_fit_but_together_exceed_the_pool_are_caught():
    """Two tenants each allowed the whole pool: each alone fits (ownership.pool_overcommitted
    is silent), together they are twice the GPUs."""
    data = spec_dict("lab")
    data["kubernetes"]["tenants"] = [{"name": "a", "gpus": {"l4": 1}},
                                     {"name": "b", "gpus": {"l4": 0}}]
    estate = Estate(load_text(yaml.safe_dump(data), "<test>").spec)
    arts = render_all(estate, "<test>")
    assert "kubernetes.quota_exceeds_allocatable" not in artifact_findings(estate, arts)
    whole = _set([0, "spec", "hard", "requests.nvidia.com/gpu"], "4")
    arts = tampered(arts, "kubernetes/manifests/30-tenant-b.yaml", whole)
    found = artifact_findings(estate, arts)
    assert "ownership.pool_overcommitted" not in found
    [f] = found["kubernetes.quota_exceeds_allocatable"]
    assert "allow 8 requests.nvidia.com/gpu together (a 4, b 4)" in f.message, f.message


@pytest.mark.parametrize("path,edit,vid,text", TAMPER, ids=[f"{t[2]}:{t[3]}" for t in TAMPER])
def test_tampered_artifact_is_caught(lab, path, edit, vid, text):
    estate, arts = lab
    found = artifact_findings(estate, tampered(arts, path, edit))
    assert vid in found, sorted(found)
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]


def test_containerd_config_without_systemd_cgroups_is_caught(lab):
    estate, arts = lab
    out = Artifacts(arts)
    path = "kubernetes/containerd/config-gpu.toml"
    out[path] = replace(arts[path], content=arts[path].content.replace(
        b"SystemdCgroup = true", b"SystemdCgroup = false"))
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.config_invalid"]]
    assert "runtime 'runc' does not set SystemdCgroup = true" in msgs
    out[path] = replace(arts[path], content=b"version = 2\n[plugins\n")
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.config_invalid"]]
    assert any(m.startswith("not valid TOML") for m in msgs)


def test_a_containerd_1_config_or_an_unpinned_sandbox_is_caught(lab):
    """Nodes run containerd 2 (its version 3 schema): a version 2 file would be read by its
    migration path, or refused, and the sandbox image must be kubeadm's."""
    estate, arts = lab
    out = Artifacts(arts)
    path = "kubernetes/containerd/config.toml"
    out[path] = replace(arts[path], content=arts[path].content.replace(
        b"version = 3", b"version = 2"))
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.config_invalid"]]
    assert "version is 2, not 3 (containerd 2's config schema)" in msgs
    out[path] = replace(arts[path], content=arts[path].content.replace(b"sandbox = ", b"# "))
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.config_invalid"]]
    assert "no sandbox (pause) image pinned" in msgs


def test_an_object_of_unknown_kind_is_an_error():
    errs = kcheck.validate_object({"apiVersion": "example.com/v1", "kind": "Widget",
                                   "metadata": {"name": "w"}}, "1.31.4")
    assert errs and "no schema for Widget" in errs[0]


def test_a_toolkit_that_takes_the_devices_variable_is_caught(lab):
    """With the toolkit's defaults, NVIDIA_VISIBLE_DEVICES=all in any pod tolerating the GPU
    taint shows every GPU; without the volume-mount setting, allocated pods get none."""
    estate, arts = lab
    path = k8s.TOOLKIT_CONFIG
    assert b"accept-nvidia-visible-devices-envvar-when-unprivileged = false" in arts[path].content
    out = Artifacts(arts)
    out[path] = replace(arts[path], content=arts[path].content.replace(b"= false", b"= true"))
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.gpu_isolation"]]
    assert any("a pod setting it to 'all' sees every GPU" in m for m in msgs), msgs
    out[path] = replace(arts[path], content=b"# the package's defaults\n")
    msgs = [f.message for f in artifact_findings(estate, out)["kubernetes.gpu_isolation"]]
    assert any("pods get no GPU" in m for m in msgs), msgs


def test_shipped_versions_read_without_import_match_kubernetes_validate():
    """Its all_versions() names each minor twice (the -local and -local-strict sets)."""
    import kubernetes_validate
    assert list(kcheck.shipped_versions()) == \
        list(dict.fromkeys(kubernetes_validate.utils.all_versions()))


@pytest.mark.parametrize("index", kcheck.VENDORED_INDEXES, ids=lambda p: p.parent.name)
def test_each_vendored_file_validates_and_its_index_is_its_own(index):
    """Validated once, when vendored: every document strictly against each schema set from
    1.31 on, no bootstrap token; and the index `estate check` reads is the one the file
    gives now (python -m estate.check.kubernetes_schema writes them)."""
    import json
    manifest = index.with_name(index.name.removesuffix(".index.json") + ".yaml")
    assert kcheck.index_path(manifest) == index
    assert kcheck.index_of(manifest) == json.loads(index.read_text())


def test_a_vendored_document_changed_in_a_rendered_file_is_parsed_and_validated():
    """A piece of a rendered file that is not a vendored document byte for byte is Estate's
    own: parsed and validated, with its parse error's line counted in the whole file."""
    from estate.render.artifacts import Artifact
    text = (ROOT / "k8s" / "cni" / "tigera-operator.yaml").read_bytes()
    pieces = text.split(b"\n---\n")
    changed = pieces[1].replace(b"kind: ServiceAccount", b"kind: ServiceAccount\nbogus: 1")
    art = Artifact("kubernetes/manifests/x.yaml",
                   b"\n---\n".join([pieces[0], changed, *pieces[2:]]), Hostlist.parse("a"),
                   k8s.PLANE)
    docs = kcheck.unvalidated_documents(art, "1.36.0")
    assert [d["kind"] for d in docs] == ["ServiceAccount"] and docs[0]["bogus"] == 1
    assert any("bogus" in e for e in kcheck.validate_object(docs[0], "1.36.0"))
    broken = Artifact(art.path, b"\n---\n".join([pieces[0], b"a: [\n", *pieces[1:]]),
                      art.consumers, art.plane)
    line = pieces[0].count(b"\n") + 3
    assert f"line {line}," in kcheck.parse_error(broken) or \
        f"line {line + 1}," in kcheck.parse_error(broken), kcheck.parse_error(broken)


def test_the_model_reserves_what_the_rendered_daemonsets_request_on_a_gpu_worker(lab):
    """k8s.DAEMONSET_REQUESTS is what the quotas leave out: it must be the rendered pods'
    requests (init containers counted as the scheduler does), one pod of each per node."""
    from estate.check.kubernetes_addons import (_daemonsets, lands_on, pod_requests,
                                                scheduling_nodes)
    estate, arts = lab
    nodes = scheduling_nodes(arts)
    gpu = [n for n in nodes.values() if n["labels"].get(k8s.GPU_PRESENT) == "true"]
    assert gpu
    for node in gpu:
        on = {name: pod_requests(pod) for name, pod in _daemonsets(arts) if lands_on(pod, node)}
        names = {n.removeprefix("gpu-feature-discovery-") if n.startswith("gpu-feature")
                 else n for n in on}
        assert len(names) == len(on) == len(k8s.DAEMONSET_REQUESTS)
        held = k8s.daemonset_reserve()
        assert sum(r["cpu"] for r in on.values()) == held.cpu_millis
        assert sum(r["memory"] for r in on.values()) == held.memory_mi


def test_quotas_split_what_the_daemonsets_leave(lab):
    estate, _ = lab
    held = k8s.daemonset_reserve()
    classes = {n.name: n.cls for n in k8s.plane_nodes(estate)}
    for f in k8s.flavors(estate):
        free = [k8s.allocatable(estate, classes[n]) for n in f.nodes]
        assert f.cpu_millis == sum(a.cpu_millis - held.cpu_millis for a in free)
        assert f.memory_mi == sum(a.memory_mi - held.memory_mi for a in free)


def test_quotas_over_the_whole_allocatable_are_caught(monkeypatch):
    """Quotas split as before this check (nothing left for the DaemonSets) fail it."""
    monkeypatch.setattr(k8s, "DAEMONSET_REQUESTS", {})
    estate = Estate(load_text(yaml.safe_dump(spec_dict("lab")), "<lab>").spec)
    found = artifact_findings(estate, render_all(estate, "<lab>"))
    messages = [f.message for f in found.get("kubernetes.quota_over_daemonsets", [])]
    assert any("millicores of cpu" in m for m in messages), sorted(found)
    assert any("MiB of memory" in m and "nvidia-device-plugin" in m for m in messages)


def test_every_kubelet_gives_unprofiled_containers_the_runtime_seccomp_profile(lab):
    """kubeadm hands init.yaml's one KubeletConfiguration to every node it joins; with
    seccompDefault a container that names no profile gets RuntimeDefault, not Unconfined."""
    _, arts = lab
    [kubelet] = [d for d in yaml.safe_load_all(arts["kubernetes/kubeadm/init.yaml"].content)
                 if d.get("kind") == "KubeletConfiguration"]
    assert kubelet["seccompDefault"] is True
    for path, a in arts.items():
        if path.startswith("kubernetes/kubeadm/join/"):
            assert b"KubeletConfiguration" not in a.content, path
