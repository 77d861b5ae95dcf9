"""gpu_node: the NVIDIA container runtime the rendered containerd config names is installed;
'unsupported here' where no NVIDIA driver is loaded, or NVIDIA's repository cannot be
reached from the node."""
from __future__ import annotations

import pytest

from estate.verify.plugin import UNSUPPORTED
from roles.gpu_node.tasks import REPO
from roles._lib.kubernetes import reach_problem
from roles._lib.nvidia import driver_problem

ROLE = "gpu_node"


def unsupported_here(host, ctx, node) -> str | None:
    def run(command: str) -> str:
        return host.run(command).stdout
    return driver_problem(run) or reach_problem(run, REPO)


def test_nvidia_runtime_installed(host, node, ctx):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")
    assert host.package("nvidia-container-toolkit").is_installed
    assert host.exists("nvidia-container-runtime")
