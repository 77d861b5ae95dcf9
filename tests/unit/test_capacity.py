"""The GPU budget: one capacity model for both planes, computed on hostlist ranges."""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from estate.capacity import gpu_budget
from estate.model import kubernetes as k8s_model
from estate.spec.hostlist import Hostlist
from estate.spec.hostset import HostSet
from estate.spec.model import Spec
from estate.spec.resolved import Estate

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def _spec(name: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"{name}.yaml").read_text())


def budget(name: str, mutate=None) -> dict:
    data = copy.deepcopy(_spec(name))
    if mutate:
        mutate(data)
    return gpu_budget(Estate(Spec.model_validate(data))).as_dict()


def test_lab_budget():
    assert budget("lab") == {
        "total": 5,
        "planes": {"kubernetes": 1, "slurm": 4},
        "pools": {
            "gpu-2x": {"model": "a100", "nodes": 2, "gpus": 4, "by_plane": {"slurm": 4},
                       "hosts": "gpu[1-2]"},
            "inference-1x": {"model": "l4", "nodes": 1, "gpus": 1,
                             "by_plane": {"kubernetes": 1}, "hosts": "k8s2"},
        },
        "partitions": {"gpu": {"gpus": 4, "by_model": {"a100": 4}},
                       "urgent": {"gpus": 4, "by_model": {"a100": 4}}},
        "tenants": {"inference": {"gpus": 1, "by_model": {"l4": 1}}},
        "kubernetes_unassigned": {"l4": 0},
    }


def test_prod_budget_per_plane_pool_partition_and_tenant():
    b = budget("example-prod")
    assert b["planes"] == {"kubernetes": 32, "slurm": 1024}
    assert b["pools"]["h100-8x"]["hosts"] == "gpu[001-128]"
    assert {k: v["gpus"] for k, v in b["partitions"].items()} == \
        {"batch": 1024, "debug": 32, "interactive": 128}
    assert {k: v["gpus"] for k, v in b["tenants"].items()} == {"batch-embed": 8, "inference": 24}
    assert b["kubernetes_unassigned"] == {"l40s": 0}


def test_kubernetes_count_agrees_with_the_renderers_flavors():
    """One model: the plane's GPUs are the ones the Kueue flavors are built from."""
    for name in ("lab", "example-prod"):
        estate = Estate(Spec.model_validate(_spec(name)))
        flavors = {f.name: f.gpus for f in k8s_model.flavors(estate)}
        b = gpu_budget(estate)
        assert b.kubernetes_models == flavors
        assert b.planes["kubernetes"] == sum(flavors.values())


def test_slurm_gres_override_and_controllers_do_not_count():
    def override(d):
        d["nodes"][2]["slurm"]["gres_count"] = 1            # gpu[1-2]: one GPU each for Slurm
        d["nodes"][0]["class"] = "gpu-2x"                    # a controller with GPUs
    b = budget("lab", override)
    assert b["planes"]["slurm"] == 2 and b["partitions"]["gpu"]["gpus"] == 2


def test_overcommitted_tenants_show_negative_unassigned():
    def greedy(d):
        d["kubernetes"]["tenants"].append({"name": "extra", "gpus": {"l4": 2}})
    assert budget("lab", greedy)["kubernetes_unassigned"] == {"l4": -2}


def test_ten_thousand_nodes_without_expanding():
    def big(d):   # addresses play no part in the budget
        d["nodes"][2]["hosts"] = "gpu[00001-10000]"
        d["slurm"]["partitions"] = [{"name": "all", "nodes": "gpu[00001-10000]"},
                                    {"name": "half", "nodes": "gpu[00001-05000]"}]
    b = budget("lab", big)
    assert b["planes"]["slurm"] == 20000
    assert {k: v["gpus"] for k, v in b["partitions"].items()} == {"all": 20000, "half": 10000}


@pytest.mark.parametrize("a, b, n", [
    ("gpu[001-128]", "gpu[065-200]", 64),
    ("gpu[1-20]", "gpu[01-20]", 11),         # gpu1..gpu9 differ from gpu01..gpu09
    ("gpu0[1-9]", "gpu[01-05]", 5),         # the same names, written differently
    ("ctl1,login1", "login1", 1),
    ("gpu[1-4]", "cpu[1-4]", 0),
])
def test_overlap_on_ranges_matches_expansion(a, b, n):
    ha, hb = Hostlist.parse(a), Hostlist.parse(b)
    assert len(HostSet.of(ha) & HostSet.of(hb)) == n == len(set(ha) & set(hb))
