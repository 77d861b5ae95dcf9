"""NVIDIA's container toolkit repository, shared by the roles that install from it (each
role imports this, never another role): gpu_node (the Kubernetes GPU workers' runtime)
and dcgm_exporter (nvidia-ctk, which writes the CDI spec podman reads)."""
from __future__ import annotations

from pyinfra.operations import server

from roles._lib import probe

REPO = "https://nvidia.github.io/libnvidia-container"
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"


def toolkit_source() -> None:
    """NVIDIA's apt source and signing key, once (the role installs curl and gpg first)."""
    if probe(f"test -s {SOURCE} && echo ok"):
        return
    server.shell(name="NVIDIA container toolkit source", commands=[
        f"curl -fsSL {REPO}/gpgkey | gpg --dearmor -o {KEYRING}",
        f"curl -fsSL {REPO}/stable/deb/nvidia-container-toolkit.list | sed "
        f"'s#deb https://#deb [signed-by={KEYRING}] https://#' > {SOURCE}"])
