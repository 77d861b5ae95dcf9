"""The Kubernetes-plane roles' wiring and parsers, without nodes: which deploys a plane node
gets, where its artifacts go, and what the roles read back from the rendered files."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.pipeline import build
from estate.provision.destinations import destination, installer
from estate.catalogue import ORDER
from estate.provision.inventory import deploys_for, targets
from roles.k8s_node.tasks import kernel_problem, rendered_modules, rendered_sysctls
from roles.k8s_packages.tasks import pinned_packages, reach_problem, repository
from roles.k8s_worker.tasks import join_values

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    result = build(Path("stacks/lab.yaml"))
    assert result.ok
    manifest = {p: {"consumers": str(a.consumers), "plane": a.plane}
                for p, a in result.artifacts.items()}
    return result, manifest, {t.name: t for t in targets(result.estate, manifest)}


def test_plane_nodes_get_the_kubernetes_deploys(lab):
    _, _, ts = lab
    assert {"k8s_node", "k8s_packages", "k8s_control_plane"} <= set(ts["k8s1"].deploys)
    assert "k8s_worker" not in ts["k8s1"].deploys and "gpu_node" not in ts["k8s1"].deploys
    assert {"k8s_node", "k8s_packages", "k8s_worker", "gpu_node"} <= set(ts["k8s2"].deploys)
    assert not any(d.startswith("k8s") for d in ts["ctl1"].deploys)
    # control plane before workers: the order the deploys run in
    assert ORDER.index("k8s_node") < ORDER.index("k8s_control_plane") < ORDER.index("k8s_worker")
    assert len(ORDER) == len(set(ORDER))


def test_every_consumed_kubernetes_file_has_an_installer(lab):
    _, _, ts = lab
    for name in ("k8s1", "k8s2"):
        t = ts[name]
        for p in t.consumes:
            if p.startswith("kubernetes/"):
                assert installer(p, t.deploys), f"{name}: nobody installs {p}"


def test_destinations():
    assert destination("kubernetes/containerd/config-gpu.toml") == "/etc/containerd/config.toml"
    assert destination("kubernetes/apt/kubernetes.list") == \
        "/etc/apt/sources.list.d/kubernetes.list"
    assert destination("kubernetes/node/sysctl.conf").startswith("/etc/sysctl.d/")
    assert destination("kubernetes/node/modules.conf").startswith("/etc/modules-load.d/")
    assert installer("kubernetes/kubeadm/join/k8s2.yaml", ["k8s_worker"]) == "k8s_worker"


def test_package_source_is_rendered_from_the_spec_version(lab):
    result, _, _ = lab
    arts = result.artifacts
    url, keyring = repository(arts["kubernetes/apt/kubernetes.list"].content.decode())
    assert url == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
    pref = arts["kubernetes/apt/kubernetes.pref"].content.decode()
    assert pinned_packages(pref) == ["kubelet", "kubeadm", "kubectl"]
    assert "Pin: version 1.36.1-*" in pref


def test_package_repository_override(tmp_path):
    spec = (ROOT / "stacks" / "lab.yaml").read_text().replace(
        "kubernetes:\n", "kubernetes:\n  package_repository: http://mirror.example/k8s/ /\n", 1)
    (tmp_path / "s.yaml").write_text(spec)
    result = build(tmp_path / "s.yaml")
    assert result.ok, [f.as_dict() for f in result.findings]
    url, _ = repository(result.artifacts["kubernetes/apt/kubernetes.list"].content.decode())
    assert url == "http://mirror.example/k8s/"


def test_kernel_problem_names_what_cannot_be_applied():
    answers = {"uname -r": "6.1\n"}
    run = lambda cmd: answers.get(cmd, "ok" if "overlay" in cmd else "")  # noqa: E731
    problem = kernel_problem(run, ["overlay", "br_netfilter"], {"net.ipv4.ip_forward": "1"})
    assert "br_netfilter" in problem and "overlay" not in problem.split("modules")[1][:20]
    assert "net.ipv4.ip_forward" in problem
    assert kernel_problem(lambda cmd: "ok" if "echo ok" in cmd else "1", ["overlay"],
                          {"net.ipv4.ip_forward": "1"}) is None


def test_rendered_kernel_files_parse(lab):
    result, _, _ = lab
    a = result.artifacts
    assert rendered_modules(a["kubernetes/node/modules.conf"].content.decode()) == \
        ["overlay", "br_netfilter"]
    assert rendered_sysctls(a["kubernetes/node/sysctl.conf"].content.decode())[
        "net.ipv4.ip_forward"] == "1"


def test_reach_problem_names_host_and_port():
    assert reach_problem(lambda cmd: "", "https://pkgs.k8s.io/core:/stable:/v1.31/deb/") == \
        "cannot reach pkgs.k8s.io:443 (https://pkgs.k8s.io/core:/stable:/v1.31/deb/) from this node"
    assert reach_problem(lambda cmd: "ok\n", "http://mirror:8080/k8s/") is None


def test_join_values_from_the_control_plane_join_command():
    out = ("kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef "
           "--discovery-token-ca-cert-hash sha256:" + "a" * 64 + " \n")
    assert join_values(out) == {"KUBEADM_TOKEN": "abcdef.0123456789abcdef",
                                "KUBEADM_CA_CERT_HASH": "sha256:" + "a" * 64}


def test_manifests_are_applied_server_side_in_order_and_kueue_is_awaited(lab):
    from roles.k8s_control_plane.tasks import apply_command
    result, _, _ = lab
    files = [destination(p) for p in sorted(result.artifacts)
             if p.startswith("kubernetes/manifests/")]
    steps = apply_command(files).split(" && ")
    applied = [s.rsplit(" -f ", 1)[1] for s in steps if " apply " in s]
    assert applied == files and all("--server-side" in s for s in steps if " apply " in s)
    install = next(i for i, s in enumerate(steps) if s.endswith("40-kueue-install.yaml"))
    queues = next(i for i, s in enumerate(steps) if s.endswith("50-kueue.yaml"))
    waits = steps[install + 1:queues]
    assert any("condition=Established" in s and "crd/clusterqueues.kueue.x-k8s.io" in s
               for s in waits)
    assert any("rollout status deployment/kueue-controller-manager" in s for s in waits)
