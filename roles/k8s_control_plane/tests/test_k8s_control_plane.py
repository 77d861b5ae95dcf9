"""k8s_control_plane: initialised by kubeadm, the API answers, the rendered manifests'
objects exist; 'unsupported here' where the node could not get kubeadm."""
from __future__ import annotations

import shlex

import pytest

from estate.model.services import MANIFESTS
from estate.verify.plugin import UNSUPPORTED, assert_installed_secret
from roles.k8s_packages.tests.test_k8s_packages import unsupported_here  # noqa: F401

ROLE = "k8s_control_plane"


@pytest.fixture
def plane(host, ctx, node):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: no kubeadm/kubelet: {problem}")


def test_initialised_and_api_answers(host, node, plane):
    assert host.file("/etc/kubernetes/admin.conf").exists, "kubeadm init has not run"
    out = host.run("kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name")
    assert out.rc == 0, out.stderr
    assert f"node/{node}" in out.stdout


def test_manifests_applied(host, node, ctx, plane):
    for p in sorted(x for x in ctx.nodes[node].consumes if x.startswith(MANIFESTS)):
        # server-side, as the role applies them (Kueue's CRDs are too large otherwise)
        out = host.run(f"kubectl --kubeconfig /etc/kubernetes/admin.conf diff --server-side "
                       f"--force-conflicts -f {shlex.quote('/etc/estate/' + p)}")
        assert out.rc == 0, f"{p} is not applied as rendered: {out.stdout[-300:]}"


def test_snapshot_and_renewal_timers_enabled(host, node, ctx, plane):
    timers = sorted(p.rsplit("/", 1)[1] for p in ctx.nodes[node].consumes
                    if p.startswith("kubernetes/systemd/") and p.endswith(".timer"))
    assert timers, "no timers rendered for this control plane"
    for timer in timers:
        out = host.run(f"systemctl is-enabled {shlex.quote(timer)}")
        assert out.stdout.strip() == "enabled", f"{timer}: {out.stdout.strip()}"


def test_kube_vip_runs_where_the_spec_has_a_vip_and_only_there(host, node, ctx, plane):
    manifest = host.file("/etc/kubernetes/manifests/kube-vip.yaml")
    if "kubernetes/kube-vip/kube-vip.yaml" not in ctx.nodes[node].consumes:
        assert not manifest.exists, "kube-vip without an API VIP in the spec"
        return
    assert manifest.exists and "/etc/kubernetes/admin.conf" in manifest.content_string
    assert "super-admin.conf" not in manifest.content_string, "still the init variant"


def test_the_cluster_ca_is_the_estates_where_a_bridge_needs_it(host, node, ctx, plane):
    """Where a tenant has the bridge, the initialising control plane's CA is the estate's
    (estate.provision.kube_pki): the minter's client certificate chains to it. The key is
    root 0600 (digests compared, never read back)."""
    from estate.model import kubernetes as k8s
    from estate.model.bridge import K8S_CA_CERT, K8S_CA_KEY
    if not ctx.runtime.get("kubernetes_ca") or \
            "kubernetes/kubeadm/init.yaml" not in ctx.nodes[node].consumes:
        pytest.skip("no bridge, or not the control plane that initialises the cluster")
    for path, secret, mode in ((k8s.CLUSTER_CA_CERT, K8S_CA_CERT, 0o644),
                               (k8s.CLUSTER_CA_KEY, K8S_CA_KEY, 0o600)):
        assert_installed_secret(host, ctx, path, secret, mode=mode,
                                what=f"the estate's {secret}")
