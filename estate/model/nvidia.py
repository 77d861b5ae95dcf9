"""The NVIDIA driver that GPU nodes must have loaded before an apply: one place for the
minimum version, where it is read and how to install it (`estate doctor` checks it).

Estate does not install the driver (see k8s/README.md, "The NVIDIA driver"): it is a
precondition of GPU nodes, like their firmware.
"""
from __future__ import annotations

import re

# The oldest driver branch Estate accepts. The device plugin (v0.20.0) and the container
# toolkit ask only for >= 384.81; the floor is what the GPUs need: R535 is NVIDIA's
# long-term-support data-center branch covering Hopper (H100, first supported in R520) and
# Ada (L40S, L4), and it is the branch Debian 12 ships in non-free (nvidia-driver 535.x).
DRIVER_MINIMUM = (535,)
# Written by the loaded kernel module; nvidia-smi (from the driver's utilities) is the
# fallback where /proc is not readable.
VERSION_FILE = "/proc/driver/nvidia/version"
SMI_QUERY = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
INSTALL_FIX = ("install and load the NVIDIA driver >= {minimum}: Debian 12's non-free "
               "`nvidia-driver` (535.x; enable the non-free and non-free-firmware components, "
               "install linux-headers-$(uname -r) for DKMS, then reboot) or NVIDIA's "
               "data-center driver; check with `nvidia-smi`")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  ..." (and the open module's
# "NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  ...")
_PROC = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)(?:\s|$)")
_VERSION = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$")


def minimum_text() -> str:
    return ".".join(map(str, DRIVER_MINIMUM))


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def proc_version(text: str | None) -> str | None:
    """The loaded module's version from /proc/driver/nvidia/version, if it names one."""
    m = _PROC.search(text or "")
    return m.group(1) if m else None


def smi_versions(text: str) -> list[str]:
    """One driver version per GPU from `nvidia-smi --query-gpu=driver_version`."""
    return [m.group(1) for line in text.splitlines() if (m := _VERSION.match(line))]


def new_enough(version: str) -> bool:
    return version_tuple(version) >= DRIVER_MINIMUM
