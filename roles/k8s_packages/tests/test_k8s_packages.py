"""k8s_packages: kubelet, kubeadm, kubectl at the spec's version, held; 'unsupported here'
where the rendered package repository cannot be reached from the node."""
from __future__ import annotations

import pytest

from estate.verify.plugin import UNSUPPORTED
from roles.k8s_packages.tasks import pinned_packages, reach_problem, repository

ROLE = "k8s_packages"


def unsupported_here(host, ctx, node) -> str | None:
    lists = [p for p in ctx.nodes[node].consumes if p.startswith("kubernetes/apt/")
             and p.endswith(".list")]
    if not lists:
        return None
    url, _ = repository(ctx.rendered(lists[0]).decode())
    return reach_problem(lambda command: host.run(command).stdout, url)


@pytest.fixture
def reachable(host, ctx, node):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")


def test_pinned_packages_installed_and_held(host, node, ctx, reachable):
    pref = ctx.rendered("kubernetes/apt/kubernetes.pref").decode()
    version = next(l.split()[-1] for l in pref.splitlines() if l.startswith("Pin: version"))
    held = host.run("apt-mark showhold").stdout.split()
    for name in pinned_packages(pref):
        pkg = host.package(name)
        assert pkg.is_installed, f"{name} is not installed"
        assert pkg.version.startswith(version.rstrip("*")), f"{name} is {pkg.version}"
        assert name in held, f"{name} is not held"
