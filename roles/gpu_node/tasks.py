"""GPU plane nodes: the NVIDIA container toolkit (nvidia-container-runtime, which the
rendered config-gpu.toml names as containerd's default runtime) from NVIDIA's repository.

Where that repository cannot be reached (these machines) the role is Unsupported.
"""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, server

from roles._lib import probe, Unsupported, consumed, install, install_packages
from roles._lib.kubernetes import reach_problem

REPO = "https://nvidia.github.io/libnvidia-container"
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"


@deploy("gpu_node")
def gpu_node() -> None:
    problem = reach_problem(probe, REPO)
    if problem:
        raise Unsupported(problem)
    install_packages("gpu_node")
    if not probe(f"test -s {SOURCE} && echo ok"):
        server.shell(name="NVIDIA container toolkit source", commands=[
            f"curl -fsSL {REPO}/gpgkey | gpg --dearmor -o {KEYRING}",
            f"curl -fsSL {REPO}/stable/deb/nvidia-container-toolkit.list | sed "
            f"'s#deb https://#deb [signed-by={KEYRING}] https://#' > {SOURCE}"])
    apt.packages(name="Install the NVIDIA container toolkit",
                 packages=["nvidia-container-toolkit"], update=True)
    # after the package, whose own config.toml this replaces (the toolkit reads it per
    # container start, so no restart)
    for path in consumed("kubernetes/nvidia/*"):
        install(path)
