"""GPU plane nodes: the NVIDIA container toolkit (nvidia-container-runtime, which the
rendered config-gpu.toml names as containerd's default runtime) from NVIDIA's repository.

Where that repository cannot be reached (these machines) the role is Unsupported.
"""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt

from roles._lib import probe, Unsupported, consumed, install, install_packages
from roles._lib.kubernetes import reach_problem
from roles._lib.nvidia import REPO, toolkit_source


@deploy("gpu_node")
def gpu_node() -> None:
    problem = reach_problem(probe, REPO)
    if problem:
        raise Unsupported(problem)
    install_packages("gpu_node")
    toolkit_source()
    apt.packages(name="Install the NVIDIA container toolkit",
                 packages=["nvidia-container-toolkit"], update=True)
    # after the package, whose own config.toml this replaces (the toolkit reads it per
    # container start, so no restart)
    for path in consumed("kubernetes/nvidia/*"):
        install(path)
