"""`estate verify`'s Kubernetes GPU check (estate.verify.k8s_view) on a recorded node list in
the shape of `kubectl get nodes -o json`: the lab's two GPU pools, k8s2's L4 time-sliced 4
ways and k8s3's two A100-40GB under MIG (mixed: 3 x 1g.5gb + 2 x 2g.10gb each), labelled by
GPU Feature Discovery."""
from __future__ import annotations

import copy
import json
import os

import pytest

from estate.verify import k8s_view
from estate.verify.k8s_view import compare, gfd_labels
from estate.model import kubernetes as k8s
from tests.unit.checkutil import ROOT
from tests.unit.test_mig import mig_spec
from tests.unit.test_ownership import estate_of

RECORDED = ROOT / "tests" / "data" / "k8s" / "nodes-gfd-mig-mixed.json"


@pytest.fixture(scope="module")
def estate():
    return estate_of(mig_spec())


@pytest.fixture
def nodes():
    return json.loads(RECORDED.read_text())


def _node(nodes, name) -> dict:
    return next(n for n in nodes["items"] if n["metadata"]["name"] == name)


def test_the_recorded_cluster_matches_the_spec(estate, nodes):
    assert compare(estate, nodes) == []


def test_gfd_labels_follow_the_sharing(estate):
    by = {n.name: n for n in k8s.plane_nodes(estate)}
    assert gfd_labels(by["k8s2"], estate) == {"nvidia.com/gpu.product": "NVIDIA-L4-SHARED",
                                              "nvidia.com/gpu.count": "1"}
    assert gfd_labels(by["k8s3"], estate) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2",
        "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.5gb.count": "6",
        "nvidia.com/mig-2g.10gb.count": "4"}
    single = estate_of(mig_spec("single", {"1g.5gb": 7}))
    k8s3 = next(n for n in k8s.plane_nodes(single) if n.name == "k8s3")
    assert gfd_labels(k8s3, single) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "14", "nvidia.com/mig.strategy": "single"}


@pytest.mark.parametrize("edit,field,expected,actual", [
    # the hardware is another GPU than the class says
    (lambda n: _node(n, "k8s3")["metadata"]["labels"].update(
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
     "label nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"),
    (lambda n: _node(n, "k8s3")["metadata"]["labels"].update({"nvidia.com/gpu.memory": "81920"}),
     "label nvidia.com/gpu.memory", "about 40960 (MiB)", "81920"),
    # one GPU fewer than the class declares
    (lambda n: _node(n, "k8s2")["metadata"]["labels"].update({"nvidia.com/gpu.count": "0"}),
     "label nvidia.com/gpu.count", "1", "0"),
    # the MIG layout applied is not the spec's
    (lambda n: _node(n, "k8s3")["status"]["capacity"].update({"nvidia.com/mig-1g.5gb": "14"}),
     "capacity nvidia.com/mig-1g.5gb", "6", "14"),
    (lambda n: _node(n, "k8s3")["metadata"]["labels"].pop("nvidia.com/mig-2g.10gb.count"),
     "label nvidia.com/mig-2g.10gb.count", "4", "absent"),
    # the device plugin is not running: nothing advertised
    (lambda n: _node(n, "k8s2")["status"]["capacity"].pop("nvidia.com/gpu"),
     "capacity nvidia.com/gpu", "4", "absent"),
    # a node that never joined
    (lambda n: n["items"].remove(_node(n, "k8s2")), "registered", "yes", "no"),
])
def test_differences_from_the_spec_are_reported(estate, nodes, edit, field, expected, actual):
    edit(nodes)
    [m] = compare(estate, nodes)
    assert (m.field, m.expected, m.actual) == (field, expected, actual)
    assert m.fix


def test_without_gfd_the_registered_labels_are_compared(estate, nodes):
    """Without GFD's labels (no nvidia.com/gpu.memory) the node carries Estate's own
    registration: the product without GFD's -SHARED suffix."""
    for name in ("k8s2", "k8s3"):
        labels = _node(nodes, name)["metadata"]["labels"]
        for key in [k for k in labels if k.startswith("nvidia.com/")]:
            del labels[key]
        labels.update({k: v for k, v in next(
            n for n in k8s.plane_nodes(estate) if n.name == name).labels.items()})
    assert compare(estate, nodes) == []
    bad = copy.deepcopy(nodes)
    _node(bad, "k8s2")["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L4-SHARED"
    [m] = compare(estate, bad)
    assert m.expected == "NVIDIA-L4" and "kubeadm" in m.fix


def test_without_a_cluster_there_is_nothing_to_compare(monkeypatch):
    monkeypatch.delenv(k8s_view.KUBECONFIG_ENV, raising=False)
    assert k8s_view.kubectl_nodes() is None
    assert "ESTATE_KUBECONFIG" in k8s_view.no_cluster_reason()


def _verify(estate, tmp_path, monkeypatch):
    from estate.output import Output
    from estate.provision.inventory import connection
    from estate.verify.context import VerifyContext
    from estate.paths import CHECKS
    from estate.verify.run import run_suites
    ctx = VerifyContext(estate, tmp_path, connection(True, None, "root", False), tmp_path,
                        "k8s1")
    monkeypatch.setattr(VerifyContext, "nodes", {"k8s1": None})
    return run_suites(ctx, [str(CHECKS / "test_kubernetes_gpus.py")],
                      output=Output.text)


def test_estate_verify_skips_the_check_without_a_cluster(estate, tmp_path, monkeypatch):
    monkeypatch.delenv(k8s_view.KUBECONFIG_ENV, raising=False)
    report = _verify(estate, tmp_path, monkeypatch)
    [r] = report.results
    assert (r.node, r.role, r.check, r.outcome) == ("k8s1", "cluster", "gpu_nodes_match_spec",
                                                    "skipped")
    assert "ESTATE_KUBECONFIG" in r.detail


def test_estate_verify_compares_the_clusters_gpu_nodes(estate, nodes, tmp_path, monkeypatch):
    """Through ESTATE_KUBECONFIG and a kubectl on PATH (here one that prints the recorded
    list, with k8s2 labelled two GPUs)."""
    _node(nodes, "k8s2")["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    listing = tmp_path / "nodes.json"
    listing.write_text(json.dumps(nodes))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(f"#!/bin/sh\ncat {listing}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(k8s_view.KUBECONFIG_ENV, str(tmp_path / "kubeconfig"))
    [r] = _verify(estate, tmp_path, monkeypatch).results
    assert r.outcome == "failed" and "nvidia.com/gpu.count is '2'" in r.detail, r.detail
