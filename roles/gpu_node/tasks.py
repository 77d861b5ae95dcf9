"""GPU plane nodes: the NVIDIA container toolkit (nvidia-container-runtime, which the
rendered config-gpu.toml names as containerd's default runtime) from NVIDIA's repository.

Where no NVIDIA driver is loaded (looked for first, so that such a node contacts no outside
host), or NVIDIA's repository cannot be reached, the role is Unsupported.
"""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt

from roles._lib import probe, Unsupported, consumed, install, install_packages
from roles._lib.kubernetes import reach_problem
from roles._lib.nvidia import REPO, driver_problem, toolkit_source


@deploy("gpu_node")
def gpu_node() -> None:
    problem = driver_problem(probe) or reach_problem(probe, REPO)
    if problem:
        raise Unsupported(problem)
    install_packages("gpu_node")
    toolkit_source()
    apt.packages(name="Install the NVIDIA container toolkit",
                 packages=["nvidia-container-toolkit"], update=True, no_recommends=True)
    # after the package, whose own config.toml this replaces (the toolkit reads it per
    # container start, so no restart)
    for path in consumed("kubernetes/nvidia/*"):
        install(path)
