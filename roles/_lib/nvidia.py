"""NVIDIA's container toolkit repository, shared by the roles that install from it (each
role imports this, never another role): gpu_node (the Kubernetes GPU workers' runtime)
and dcgm_exporter (nvidia-ctk, which writes the CDI spec podman reads)."""
from __future__ import annotations

from typing import Callable

from pyinfra.operations import server

from roles._lib import probe

REPO = "https://nvidia.github.io/libnvidia-container"
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
DRIVER = "/proc/driver/nvidia/version"


def driver_problem(run: Callable[[str], str]) -> str:
    """Why the node has no NVIDIA driver ('' if it has one); run is a node's shell. Asked
    before any network probe, so that a node without a driver contacts no outside host."""
    if (run(f"test -r {DRIVER} && echo ok") or "").strip() == "ok":
        return ""
    return (f"no NVIDIA driver is loaded ({DRIVER} is missing), so there is no GPU to serve "
            "(the node's GPUs are device files only, or the driver is not installed yet)")


def toolkit_source() -> None:
    """NVIDIA's apt source and signing key, once (the role installs curl and gpg first)."""
    if probe(f"test -s {SOURCE} && echo ok"):
        return
    server.shell(name="NVIDIA container toolkit source", commands=[
        f"curl -fsSL {REPO}/gpgkey | gpg --dearmor -o {KEYRING}",
        f"curl -fsSL {REPO}/stable/deb/nvidia-container-toolkit.list | sed "
        f"'s#deb https://#deb [signed-by={KEYRING}] https://#' > {SOURCE}"])
