"""gpu_node: the NVIDIA container runtime the rendered containerd config names is installed;
'unsupported here' where NVIDIA's repository cannot be reached from the node."""
from __future__ import annotations

import pytest

from estate.verify.plugin import UNSUPPORTED
from roles.gpu_node.tasks import REPO
from roles._lib.kubernetes import reach_problem

ROLE = "gpu_node"


def unsupported_here(host, ctx, node) -> str | None:
    return reach_problem(lambda command: host.run(command).stdout, REPO)


def test_nvidia_runtime_installed(host, node, ctx):
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")
    assert host.package("nvidia-container-toolkit").is_installed
    assert host.exists("nvidia-container-runtime")
