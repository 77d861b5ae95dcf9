"""k8s_control_plane: initialised by kubeadm, the API answers, the rendered manifests'
objects exist; 'unsupported here' where the node could not get kubeadm."""
from __future__ import annotations

import shlex

import pytest

from estate.verify.plugin import UNSUPPORTED
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
    for p in sorted(x for x in ctx.nodes[node].consumes if x.startswith("kubernetes/manifests/")):
        # server-side, as the role applies them (Kueue's CRDs are too large otherwise)
        out = host.run(f"kubectl --kubeconfig /etc/kubernetes/admin.conf diff --server-side "
                       f"--force-conflicts -f {shlex.quote('/etc/estate/' + p)}")
        assert out.rc == 0, f"{p} is not applied as rendered: {out.stdout[-300:]}"
