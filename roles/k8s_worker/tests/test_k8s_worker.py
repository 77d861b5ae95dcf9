"""k8s_worker: joined (kubelet.conf) and kubelet running; 'unsupported here' where the
node could not get kubeadm."""
from __future__ import annotations

import pytest

from estate.verify.plugin import UNSUPPORTED
from roles.k8s_packages.tests.test_k8s_packages import unsupported_here  # noqa: F401

ROLE = "k8s_worker"


@pytest.fixture
def plane(host, ctx, node):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: no kubeadm/kubelet: {problem}")


def test_joined_and_kubelet_running(host, node, plane):
    assert host.file("/etc/kubernetes/kubelet.conf").exists, "kubeadm join has not run"
    svc = host.service("kubelet")
    assert svc.is_running and svc.is_enabled
