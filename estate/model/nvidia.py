"""The NVIDIA driver that GPU nodes must have loaded before an apply: one place for the
minimum version, where it is read and how to install it (`estate doctor` checks it).

Estate does not install the driver (see k8s/README.md, "The NVIDIA driver"): it is a
precondition of GPU nodes, like their firmware.
"""
from __future__ import annotations

import re
from typing import NamedTuple

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


# --- MIG: the GPU instance profiles each MIG-capable GPU offers -------------------------

# One table for both planes (Slurm's GRES and Kubernetes' device-plugin resources read it).
# A MIG-capable GPU has 7 compute slices and 8 memory slices; a profile takes some of each,
# and no more than `max` instances of it fit one GPU. Source: NVIDIA Multi-Instance GPU
# User Guide, "Supported MIG Profiles" (docs.nvidia.com/datacenter/tesla/mig-user-guide/,
# the tables for A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB and H200-SXM5-141GB), the
# same names nvidia-mig-parted's default config (deployments/.../config-default.yaml,
# "all-1g.10gb" etc.) uses. `+me` profiles hold the GPU's media engines: one per GPU.
COMPUTE_SLICES = 7
MEMORY_SLICES = 8


class MigProfile(NamedTuple):
    compute: int        # of COMPUTE_SLICES
    memory: int         # of MEMORY_SLICES
    most: int           # instances of it one GPU holds


def _profiles(g1: str, g1big: str, g3: str, g7: str) -> dict[str, MigProfile]:
    """The family's profile table from its memory sizes (every family has the same shapes)."""
    return {f"1g.{g1}gb": MigProfile(1, 1, 7), f"1g.{g1}gb+me": MigProfile(1, 1, 1),
            f"1g.{g1big}gb": MigProfile(1, 2, 4), f"2g.{g1big}gb": MigProfile(2, 2, 3),
            f"3g.{g3}gb": MigProfile(3, 4, 2), f"4g.{g3}gb": MigProfile(4, 4, 1),
            f"7g.{g7}gb": MigProfile(7, 8, 1)}


MIG_PROFILES: dict[str, dict[str, MigProfile]] = {
    "A100-40GB": _profiles("5", "10", "20", "40"),
    "A100-80GB": _profiles("10", "20", "40", "80"),
    "H100-80GB": _profiles("10", "20", "40", "80"),
    "H200-141GB": _profiles("18", "35", "71", "141"),
}
# (product substring, memory in GB) -> family: the spec's gpus.product is the driver's
# product name (NVIDIA-A100-SXM4-40GB), its memory_gb tells the 40 and 80 GB A100s apart.
_FAMILIES = {("A100", 40): "A100-40GB", ("A100", 80): "A100-80GB", ("H100", 80): "H100-80GB",
             ("H200", 141): "H200-141GB"}


def mig_family(product: str, memory_gb: int) -> str | None:
    """The MIG_PROFILES key of a GPU, or None when Estate knows no MIG table for it."""
    return next((fam for (name, mem), fam in _FAMILIES.items()
                 if name in product.upper() and memory_gb == mem), None)


def mig_layout_problems(family: str | None, layout: dict[str, int]) -> list[str]:
    """Why a layout (profile -> instances per GPU) does not fit one GPU; empty if it does."""
    if family is None:
        return ["Estate has no MIG profile table for this GPU (known: "
                f"{', '.join(MIG_PROFILES)})"]
    table = MIG_PROFILES[family]
    unknown = sorted(p for p in layout if p not in table)
    if unknown:
        verb = "is not a MIG profile" if len(unknown) == 1 else "are not MIG profiles"
        return [f"{', '.join(unknown)} {verb} of the {family} (it has {', '.join(table)})"]
    out = [f"{n} x {p} exceeds the {table[p].most} a {family} GPU holds"
           for p, n in layout.items() if n > table[p].most]
    compute = sum(table[p].compute * n for p, n in layout.items())
    memory = sum(table[p].memory * n for p, n in layout.items())
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        out.append(f"the layout takes {compute} compute and {memory} memory slices; a "
                   f"{family} GPU has {COMPUTE_SLICES} and {MEMORY_SLICES}")
    return out
