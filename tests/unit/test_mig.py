"""MIG on the Kubernetes plane: a layout per node class (gpus.mig_profiles), rendered as a
nvidia-mig-parted config, and quotas in the resources the MIG nodes advertise (one
nvidia.com/mig-<profile> per profile under the mixed strategy, MIG devices as
nvidia.com/gpu under single). Rendered files whose quotas name a resource the nodes do not
advertise, or whose layout does not fit the GPU, are caught by `estate check`."""
from __future__ import annotations

import pytest
import yaml

from estate.check import check_spec
from estate.model import kubernetes as k8s
from estate.model.nvidia import MIG_PROFILES, mig_family, mig_layout_problems
from estate.render import render_all
from tests.unit.test_ownership import (artifact_findings, checked, corrupted, estate_of,
                                       research)

MIXED = {"1g.5gb": 3, "2g.10gb": 2}      # 7 compute, 7 memory slices of an A100-40GB
TENANT = "kubernetes/manifests/30-tenant-research.yaml"
KUEUE = "kubernetes/manifests/50-kueue.yaml"
PLUGIN = "kubernetes/manifests/20-device-plugin.yaml"


def mig_spec(strategy: str = "mixed", layout: dict | None = None) -> dict:
    """The two-pool lab (k8s3's two A100-40GB GPUs for tenant research) under MIG. The
    Slurm workers of the same hardware get a class of their own without the layout: MIG on
    the batch plane needs slurmd's NVML autodetection (slurm.mig_needs_nvml), which
    Debian's Slurm lacks."""
    d = research()
    gpu_2x = d["node_classes"][1]
    batch = dict(gpu_2x, name="gpu-2x-batch", gpus=dict(gpu_2x["gpus"]))
    d["node_classes"].append(batch)
    for group in d["nodes"]:
        if group["class"] == "gpu-2x" and group.get("plane", "slurm") == "slurm":
            group["class"] = "gpu-2x-batch"
    d["node_classes"][1]["gpus"]["mig_profiles"] = layout or MIXED
    d["kubernetes"]["gpu_sharing_by_class"] = {"gpu-2x": {"mode": "mig",
                                                          "mig_strategy": strategy}}
    return d


@pytest.fixture(scope="module")
def mixed():
    estate = estate_of(mig_spec())
    return estate, render_all(estate, "<test>")


def docs(arts, path) -> list[dict]:
    return [d for d in yaml.safe_load_all(arts[path].content) if d]


def queue(arts, name) -> dict:
    return next(d for d in docs(arts, KUEUE) if d["kind"] == "ClusterQueue"
                and d["metadata"]["name"] == name)


# --- the profile table -------------------------------------------------------------------

def test_the_profile_table_knows_the_four_gpus_and_their_slices():
    assert set(MIG_PROFILES) == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}
    assert mig_family("NVIDIA-A100-SXM4-40GB", 40) == "A100-40GB"
    assert mig_family("NVIDIA-H100-80GB-HBM3", 80) == "H100-80GB"
    assert mig_family("NVIDIA-H200", 141) == "H200-141GB"
    assert mig_family("NVIDIA-L4", 24) is None
    for table in MIG_PROFILES.values():      # the whole-GPU profile takes every slice
        full = next(p for p in table if p.startswith("7g."))
        assert (table[full].compute, table[full].memory) == (7, 8)
    assert mig_layout_problems("H100-80GB", {"1g.10gb": 7}) == []
    assert mig_layout_problems("H200-141GB", {"3g.71gb": 1, "4g.71gb": 1}) == []


@pytest.mark.parametrize("family,layout,why", [
    ("A100-40GB", {"7g.40gb": 1, "1g.5gb": 1}, "takes 8 compute and 9 memory slices"),
    ("A100-40GB", {"1g.10gb": 5}, "5 x 1g.10gb exceeds the 4"),
    ("A100-40GB", {"1g.5gb+me": 2}, "exceeds the 1"),
    ("A100-80GB", {"1g.5gb": 7}, "1g.5gb is not a MIG profile of the A100-80GB"),
    (None, {"1g.5gb": 1}, "no MIG profile table for this GPU"),
])
def test_layouts_that_do_not_fit_are_explained(family, layout, why):
    assert any(why in p for p in mig_layout_problems(family, layout)), \
        mig_layout_problems(family, layout)


# --- rendered: mixed strategy ------------------------------------------------------------

def test_mixed_quotas_are_in_the_mig_resources_the_nodes_advertise(mixed):
    estate, arts = mixed
    assert not check_spec(estate)
    assert artifact_findings(estate, arts) == {}
    [rg] = queue(arts, "research")["spec"]["resourceGroups"]
    assert rg["coveredResources"] == ["cpu", "memory", "nvidia.com/mig-1g.5gb",
                                      "nvidia.com/mig-2g.10gb"]
    [f] = rg["flavors"]
    assert {r["name"]: r["nominalQuota"] for r in f["resources"][2:]} == \
        {"nvidia.com/mig-1g.5gb": 6, "nvidia.com/mig-2g.10gb": 4}   # x 2 GPUs
    hard = docs(arts, TENANT)[0]["spec"]["hard"]
    assert hard == {"requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.5gb": "6",
                    "requests.nvidia.com/mig-2g.10gb": "4"}
    limits = next(d for d in docs(arts, TENANT) if d["kind"] == "LimitRange")
    assert limits["spec"]["limits"][0]["max"]["nvidia.com/mig-1g.5gb"] == "6"


def test_the_mig_parted_config_is_the_class_layout_on_its_nodes(mixed):
    _, arts = mixed
    a = arts[k8s.MIG_PARTED]
    assert list(a.consumers) == ["k8s3"]
    config = yaml.safe_load(a.content)
    assert config == {"version": "v1", "mig-configs": {"gpu-2x": [
        {"devices": "all", "mig-enabled": True, "mig-devices": MIXED}]}}
    join = yaml.safe_load(arts["kubernetes/kubeadm/join/k8s3.yaml"].content)
    labels = {a["name"]: a["value"] for a in join["nodeRegistration"]["kubeletExtraArgs"]}
    assert f"{k8s.MIG_CONFIG_LABEL}=gpu-2x" in labels["node-labels"]


def test_the_device_plugin_monitors_mig_devices(mixed):
    _, arts = mixed
    ds = next(d for d in docs(arts, PLUGIN) if d["kind"] == "DaemonSet")
    plugin = ds["spec"]["template"]["spec"]["containers"][1]
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in plugin["env"]
    # SYS_ADMIN, which the toolkit's MIG monitor devices need, and nothing else
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}


def test_without_mig_the_plugin_gets_neither():
    estate = estate_of(research())
    ds = next(d for d in docs(render_all(estate, "<t>"), PLUGIN) if d["kind"] == "DaemonSet")
    plugin = ds["spec"]["template"]["spec"]["containers"][1]
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in plugin["env"]}
    # SYS_ADMIN all the same: without it the toolkit hides every GPU from the plugin
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert k8s.MIG_PARTED not in render_all(estate, "<t>")


# --- rendered: single strategy -----------------------------------------------------------

def test_single_strategy_counts_the_layouts_devices_as_gpus(tmp_path):
    estate = estate_of(mig_spec("single", {"1g.5gb": 7}))
    arts = render_all(estate, "<test>")
    assert not check_spec(estate)
    assert artifact_findings(estate, arts) == {}
    [f] = queue(arts, "research")["spec"]["resourceGroups"][0]["flavors"]
    assert f["resources"][2] == {"name": "nvidia.com/gpu", "nominalQuota": 14,
                                 "borrowingLimit": 0}
    assert docs(arts, TENANT)[0]["spec"]["hard"] == {"requests.nvidia.com/gpu": "14"}


def test_a_layout_that_exceeds_the_gpu_fails_estate_check(tmp_path):
    """Caught on the spec (nodes.mig_over_capacity, before anything renders); a rendered
    mig-parted file edited past the GPU is kubernetes.mig_layout_invalid (the tamper cases
    below)."""
    found = checked(mig_spec("mixed", {"7g.40gb": 1, "1g.5gb": 1}), tmp_path)
    [f] = [f for f in found if f.id == "nodes.mig_over_capacity"]
    assert f.path == "node_classes[1].gpus.mig_profiles"
    assert "8 compute and 9 memory slices" in f.message


def test_single_strategy_on_a_layout_of_two_profiles_fails_estate_check(tmp_path):
    found = checked(mig_spec("single"), tmp_path)
    [f] = [f for f in found if f.id == "kubernetes.mig_layout_invalid"]
    assert "single strategy needs one profile" in f.message


# --- rendered files changed behind the spec's back ---------------------------------------

def _queue_gpu(edit_resources):
    def edit(documents):
        q = next(d for d in documents if d and d["kind"] == "ClusterQueue"
                 and d["metadata"]["name"] == "research")
        rg = q["spec"]["resourceGroups"][0]
        rg["coveredResources"], rg["flavors"][0]["resources"] = edit_resources(
            rg["flavors"][0]["resources"])
    return edit


def _whole_gpus(resources):
    """The quota as it was before MIG layouts: 16 nvidia.com/gpu on the MIG pool."""
    kept = resources[:2] + [{"name": "nvidia.com/gpu", "nominalQuota": 16,
                             "borrowingLimit": 0}]
    return [r["name"] for r in kept], kept


def _mig_parted(layout):
    def edit(documents):
        documents[0]["mig-configs"]["gpu-2x"][0]["mig-devices"] = layout
    return edit


def _plugin_single(documents):
    documents[3]["data"]["gpu-2x"] = "version: v1\nflags: {migStrategy: single}\n"


TAMPER = [
    # a ClusterQueue quota of whole GPUs on nodes that advertise only MIG devices
    (KUEUE, _queue_gpu(_whole_gpus), "kubernetes.quota_not_advertised",
     "give 16 nvidia.com/gpu in pool 'a100'"),
    # a ResourceQuota in nvidia.com/gpu there
    (TENANT, lambda ds: ds[0]["spec"]["hard"].update({"requests.nvidia.com/gpu": "16"}),
     "kubernetes.quota_not_advertised", "advertise no nvidia.com/gpu, only "
     "nvidia.com/mig-1g.5gb, nvidia.com/mig-2g.10gb"),
    # a layout over the GPU's slices
    (k8s.MIG_PARTED, _mig_parted({"7g.40gb": 1, "1g.5gb": 1}), "kubernetes.mig_layout_invalid",
     "8 compute and 9 memory slices"),
    # a profile this GPU does not have
    (k8s.MIG_PARTED, _mig_parted({"1g.10gb": 2, "3g.40gb": 1}),
     "kubernetes.mig_layout_invalid", "3g.40gb is not a MIG profile of the A100-40GB"),
    # the plugin's single strategy on a two-profile layout
    (PLUGIN, _plugin_single, "kubernetes.mig_layout_invalid",
     "single strategy needs one profile"),
]


@pytest.mark.parametrize("path,edit,vid,text", TAMPER, ids=[f"{t[2]}:{t[3]}" for t in TAMPER])
def test_corrupted_mig_files_are_caught(mixed, path, edit, vid, text):
    estate, arts = mixed
    found = artifact_findings(estate, corrupted(arts, path, edit))
    assert vid in found, found
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]
    assert all(f.path and f.hint for f in found[vid])
