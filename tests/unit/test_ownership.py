"""GPU ownership is proven from the rendered files (estate.check.ownership).

Specs that double-book a GPU, name a Kubernetes node in a partition or promise a pool more
than it advertises fail `estate check` with their paths; and renders corrupted behind the
spec's back (the spec validators see nothing wrong) are caught from what was written.
"""
from __future__ import annotations

import dataclasses

import pytest
import yaml

import estate.render.kubernetes as rk
from estate.check import check_artifacts, check_spec
from estate.check.ownership import selects, tolerates
from estate.findings import Severity
from estate.pipeline import build
from estate.render import Artifacts, render_all
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, spec_dict
from tests.unit.test_check_validators import put
from tests.unit.test_kubernetes_check import Ctx, tampered

E, W = Severity.ERROR, Severity.WARNING


def research() -> dict:
    """The lab with a second Kubernetes GPU pool: k8s3's A100s, granted to tenant research."""
    d = spec_dict("lab")
    d["nodes"].append({"hosts": "k8s3", "class": "gpu-2x", "plane": "kubernetes",
                       "roles": ["k8s_worker"], "rack": "r1",
                       "addresses": {"management": "auto", "service": "auto",
                                     "storage": "auto"}})
    d["kubernetes"]["tenants"].append({"name": "research", "gpus": {"a100": 2}})
    return d


SHARING = {   # GPU sharing of the a100 pool -> the units its nodes advertise
    "whole GPUs": {"mode": "none"},
    "time-slice replicas": {"mode": "time-slicing", "replicas": 3},
    "MIG devices": {"mode": "mig", "mig_devices": 7},
}


def research_shared(kind: str) -> dict:
    d = research()
    d["kubernetes"]["gpu_sharing_by_class"] = {"gpu-2x": SHARING[kind]}
    return d


def estate_of(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, loaded.findings
    return Estate(loaded.spec)


def artifact_findings(estate, arts) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in check_artifacts(Ctx(estate, arts)):
        out.setdefault(f.id, []).append(f)
    return out


def rendered_anyway(data: dict) -> dict[str, list]:
    """The ownership proof over what a spec renders to, even where the spec checks fail."""
    estate = estate_of(data)
    return artifact_findings(estate, render_all(estate, "<test>"))


def checked(data: dict, tmp_path) -> list:
    """`estate check` on the spec: the whole pipeline, artifact checks included."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return build(spec).findings


def paths(findings, vid: str) -> set[str]:
    return {f.path for f in findings if f.id == vid}


# --- clean estates prove ownership ----------------------------------------------------------

@pytest.mark.parametrize("name", ["lab.yaml", "example-prod.yaml"])
def test_example_specs_pass_with_zero_findings(name):
    result = build(ROOT / "stacks" / name)
    assert result.ok and result.findings == []


@pytest.mark.parametrize("kind", sorted(SHARING))
def test_two_pools_in_every_unit_pass(kind, tmp_path):
    assert checked(research_shared(kind), tmp_path) == []


# --- specs that double-book fail `estate check` with their paths -----------------------------

def test_a_host_in_a_slurm_partition_and_a_kubernetes_flavor_fails(tmp_path):
    d = spec_dict("lab")
    put(d, "nodes[5].hosts", "k8s2,gpu2")          # gpu2: Slurm's gpu[1-2] and the l4 pool
    found = checked(d, tmp_path)
    assert "nodes[5].hosts" in paths(found, "boundaries.node_in_both_planes")
    # what it would render says the same, read back from slurm.conf and the kubeadm files
    art = rendered_anyway(d)
    [double] = art["ownership.gpu_double_booked"]
    assert double.path == "nodes[5].hosts" and "hosts gpu2 have GPUs" in double.message
    assert "nodes[2].hosts (gpu2)" in double.message
    # both of the lab's partitions (gpu and the hidden urgent one) name gpu2
    assert [f.path for f in art["ownership.partition_kubernetes_node"]] == \
        ["slurm.partitions[0].nodes", "slurm.partitions[1].nodes"]


def test_a_partition_naming_a_kubernetes_node_fails(tmp_path):
    d = spec_dict("lab")
    put(d, "slurm.partitions[0].nodes", "gpu[1-2],k8s2")
    assert "slurm.partitions[0].nodes" in paths(checked(d, tmp_path),
                                                "boundaries.kubernetes_node_in_partition")
    [f] = rendered_anyway(d)["ownership.partition_kubernetes_node"]
    assert f.path == "slurm.partitions[0].nodes" and "k8s2" in f.message


@pytest.mark.parametrize("kind", sorted(SHARING))
def test_tenant_quotas_over_the_pool_fail(kind, tmp_path):
    d = research_shared(kind)
    d["kubernetes"]["tenants"].append({"name": "more", "gpus": {"a100": 1}})
    assert "kubernetes.tenants[2].gpus.a100" in paths(checked(d, tmp_path),
                                                      "boundaries.tenant_gpus_exceed_plane")


@pytest.mark.parametrize("kind", sorted(SHARING))
def test_rendered_quotas_over_the_pool_are_caught_in_its_units(kind, tmp_path, monkeypatch):
    """One unit more than the pool advertises, in whole GPUs, replicas or MIG devices."""
    d = research_shared(kind)
    quotas = rk.tenant_quotas
    monkeypatch.setattr(rk, "tenant_quotas", lambda e: {
        t: tuple(dataclasses.replace(q, resources={**q.resources, "nvidia.com/gpu": q.units
                                                   + (q.flavor == "a100")}) for q in qs)
        for t, qs in quotas(e).items()})
    estate = estate_of(d)
    assert not check_spec(estate)
    found = checked(d, tmp_path)
    [f] = [f for f in found if f.id == "ownership.pool_overcommitted"]
    units = {"whole GPUs": 2, "time-slice replicas": 6, "MIG devices": 14}[kind]
    assert f.path == "kubernetes.tenants[1].gpus.a100"
    assert f"give {units + 1} nvidia.com/gpu in pool 'a100'" in f.message
    assert f"advertise {units} ({kind}; nodes[6].hosts (k8s3))" in f.message


# --- the proof reads the rendered files, not the spec ------------------------------------------

def test_a_render_that_lets_a_tenant_tolerate_a_pool_it_was_not_granted_is_caught(
        tmp_path, monkeypatch):
    """The spec is clean (inference holds only l4); the rendered whitelist of its namespace
    also tolerates the a100 pool's taint: only the rendered files show it."""
    d = research()
    whitelist = rk.tolerations_whitelist
    monkeypatch.setattr(rk, "tolerations_whitelist", lambda e, t: whitelist(e, t) + (
        [rk.pool_toleration("a100")] if t.name == "inference" else []))
    assert not check_spec(estate_of(d))
    found = checked(d, tmp_path)
    assert [(f.id, f.path) for f in found] == \
        [("ownership.tenant_pool_access", "kubernetes.tenants[0].gpus")]
    assert "not granted pool 'a100'" in found[0].message
    assert "nodes[6].hosts (k8s3)" in found[0].message


@pytest.fixture(scope="module")
def two_pools():
    estate = estate_of(research())
    return estate, render_all(estate, "<test>")


def _set(path: list, value):
    def edit(docs):
        target = docs
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _text(old: str, new: str):
    """A marker for a plain-text edit (slurm.conf)."""
    return ("text", old, new)


KUEUE, TENANTS = "kubernetes/manifests/50-kueue.yaml", "kubernetes/manifests/00-tenants.yaml"
# (rendered file, edit, validator, text in its message) over the two-pool estate
TAMPER = [
    # the research ClusterQueue selects every namespace: Kueue admits inference to a100
    (KUEUE, _set([5, "spec", "namespaceSelector"], {}), "ownership.tenant_pool_access",
     "ClusterQueue 'research' admits its workloads"),
    # an Exists toleration for the GPU key in inference's whitelist opens every pool
    (TENANTS, _set([0, "metadata", "annotations",
                    "scheduler.alpha.kubernetes.io/tolerationsWhitelist"],
                   '[{"key":"nvidia.com/gpu","operator":"Exists"}]'),
     "ownership.tenant_pool_access", "not granted pool 'a100'"),
    # a namespace without a whitelist may carry any toleration
    (TENANTS, _set([0, "metadata", "annotations"], {}), "ownership.tenant_pool_access",
     "has no scheduler.alpha.kubernetes.io/tolerationsWhitelist"),
    # the API server without PodTolerationRestriction enforces no whitelist
    ("kubernetes/kubeadm/init.yaml",
     _set([1, "apiServer", "extraArgs"], [{"name": "enable-admission-plugins",
                                           "value": "NodeRestriction"}]),
     "ownership.tenant_pool_access", "PodTolerationRestriction is not enabled"),
    # the a100 pool's node loses its taint: every namespace reaches it
    ("kubernetes/kubeadm/join/k8s3.yaml", _set([0, "nodeRegistration", "taints"], []),
     "ownership.tenant_pool_access", "tenant 'inference' is not granted pool 'a100'"),
    # a flavor selecting every GPU node: k8s2's L4 promised in two flavors
    (KUEUE, _set([1, "spec", "nodeLabels"], {"nvidia.com/gpu.present": "true"}),
     "ownership.gpu_double_booked", "match ResourceFlavors l4, a100"),
    # slurm.conf declares a GPU node Kubernetes also registers
    ("slurm/slurm.conf", _text("NodeName=gpu[1-2]", "NodeName=gpu[1-2],k8s3"),
     "ownership.gpu_double_booked", "hosts k8s3 have GPUs in Slurm"),
    # a partition naming a Kubernetes node
    ("slurm/slurm.conf", _text("Nodes=gpu[1-2]", "Nodes=gpu[1-2],k8s2"),
     "ownership.partition_kubernetes_node", "names k8s2"),
    # a GPU node no partition names
    ("slurm/slurm.conf", _text("Nodes=gpu[1-2]", "Nodes=gpu1"),
     "ownership.gpu_unowned", "no PartitionName names them"),
    # a Kubernetes GPU node no flavor selects
    (KUEUE, _set([1, "spec", "nodeLabels"], {"nvidia.com/gpu.product": "NVIDIA-A100-80GB"}),
     "ownership.gpu_unowned", "k8s3 match no ResourceFlavor"),
    # a ResourceQuota above the pools the tenant holds
    ("kubernetes/manifests/30-tenant-research.yaml",
     _set([0, "spec", "hard", "requests.nvidia.com/gpu"], "9"),
     "ownership.pool_overcommitted", "allows 9 requests.nvidia.com/gpu"),
    # a quota in Kubernetes' own suffix notation is counted, not skipped
    ("kubernetes/manifests/30-tenant-research.yaml",
     _set([0, "spec", "hard", "requests.nvidia.com/gpu"], "2k"),
     "ownership.pool_overcommitted", "allows 2000 requests.nvidia.com/gpu"),
    # more time-slice replicas promised than the device-plugin config makes
    ("kubernetes/manifests/20-device-plugin.yaml",
     _set([3, "data", "default"], "version: v1\nflags: {migStrategy: none}\nsharing:\n"
          "  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"),
     "ownership.pool_overcommitted", "advertise 4 (time-slice replicas"),
]


def corrupted(arts: Artifacts, path: str, edit) -> Artifacts:
    if isinstance(edit, tuple):
        _, old, new = edit
        out = Artifacts(arts)
        assert old.encode() in arts[path].content, old
        out[path] = dataclasses.replace(arts[path],
                                        content=arts[path].content.replace(old.encode(),
                                                                           new.encode()))
        return out
    return tampered(arts, path, edit)


def test_the_two_pool_render_is_clean(two_pools):
    assert artifact_findings(*two_pools) == {}


@pytest.mark.parametrize("path,edit,vid,text", TAMPER, ids=[f"{t[2]}:{t[3]}" for t in TAMPER])
def test_corrupted_rendered_file_is_caught(two_pools, path, edit, vid, text):
    estate, arts = two_pools
    assert not check_spec(estate)
    found = artifact_findings(estate, corrupted(arts, path, edit))
    assert vid in found, sorted(found)
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]
    assert all(f.path and f.hint for f in found[vid])


def test_the_access_finding_names_the_tenant_and_the_pools_nodes(two_pools):
    estate, arts = two_pools
    found = artifact_findings(estate, corrupted(arts, *TAMPER[0][:2]))
    # (kueue-system, a rendered Namespace too, is reported as well: a queue selecting every
    # namespace selects it)
    [f] = [f for f in found["ownership.tenant_pool_access"] if "'inference'" in f.message]
    assert f.path == "kubernetes.tenants[0].gpus" and f.severity is E
    assert "k8s3 (nodes[6].hosts (k8s3))" in f.message


# --- the Kubernetes rules the proof relies on ---------------------------------------------

@pytest.mark.parametrize("toleration,taint,want", [
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "l4", "effect": "NoSchedule"},
     {"key": "nvidia.com/gpu", "value": "l4", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "l4", "effect": "NoSchedule"},
     {"key": "nvidia.com/gpu", "value": "a100", "effect": "NoSchedule"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists"},
     {"key": "nvidia.com/gpu", "value": "a100", "effect": "NoSchedule"}, True),
    ({"operator": "Exists"}, {"key": "anything", "value": "x", "effect": "NoExecute"}, True),
    ({"key": "nvidia.com/gpu", "value": "a100"},          # operator defaults to Equal
     {"key": "nvidia.com/gpu", "value": "a100", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
     {"key": "nvidia.com/gpu", "value": "a100", "effect": "NoSchedule"}, False),
])
def test_tolerates_follows_kubernetes(toleration, taint, want):
    assert tolerates(toleration, taint) is want


def test_namespace_selectors_follow_kueue():
    ns = {"kubernetes.io/metadata.name": "inference", "team": "a"}
    assert selects({}, ns) and not selects(None, ns)
    assert selects({"matchLabels": {"team": "a"}}, ns)
    assert not selects({"matchExpressions": [{"key": "team", "operator": "NotIn",
                                              "values": ["a"]}]}, ns)
    assert selects({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, ns)
