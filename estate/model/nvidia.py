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


# --- MIG ---------------------------------------------------------------------------
# The MIG profiles of each MIG-capable GPU, from NVIDIA's MIG user guide ("Supported MIG
# Profiles"; the same names mig-parted's configs use): profile -> (compute slices of 7,
# memory slices of 8) one instance takes. A GPU's instances fit when their slices add up
# to at most 7 and 8 (placement can refuse some layouts that fit: the guide's tables say
# which; this is the capacity check). "+me" profiles carry the GPU's one set of media
# engines, so a GPU has at most one of them.
COMPUTE_SLICES, MEMORY_SLICES = 7, 8
MIG_PROFILES: dict[str, dict[str, tuple[int, int]]] = {
    "A100-40GB": {"1g.5gb": (1, 1), "1g.5gb+me": (1, 1), "1g.10gb": (1, 2), "2g.10gb": (2, 2),
                  "3g.20gb": (3, 4), "4g.20gb": (4, 4), "7g.40gb": (7, 8)},
    "A100-80GB": {"1g.10gb": (1, 1), "1g.10gb+me": (1, 1), "1g.20gb": (1, 2),
                  "2g.20gb": (2, 2), "3g.40gb": (3, 4), "4g.40gb": (4, 4), "7g.80gb": (7, 8)},
    "H100-80GB": {"1g.10gb": (1, 1), "1g.10gb+me": (1, 1), "1g.20gb": (1, 2),
                  "2g.20gb": (2, 2), "3g.40gb": (3, 4), "4g.40gb": (4, 4), "7g.80gb": (7, 8)},
    "H200-141GB": {"1g.18gb": (1, 1), "1g.18gb+me": (1, 1), "1g.35gb": (1, 2),
                   "2g.35gb": (2, 2), "3g.71gb": (3, 4), "4g.71gb": (4, 4),
                   "7g.141gb": (7, 8)},
}
_FAMILY = re.compile(r"\b(A100|H100|H200)\b")


def mig_table_key(product: str, memory_gb: int) -> str | None:
    """MIG_PROFILES' key for a GPU: its family (from the product string, e.g.
    NVIDIA-H100-80GB-HBM3) and its memory; None for a GPU without a table."""
    m = _FAMILY.search(product.upper().replace("-", " ").replace("_", " "))
    key = f"{m.group(1)}-{memory_gb}GB" if m else None
    return key if key in MIG_PROFILES else None


def mig_slices(table: dict[str, tuple[int, int]], layout: dict[str, int]) -> tuple[int, int]:
    """(compute, memory) slices a per-GPU layout takes; profiles not in the table count 0."""
    used = [(table[p], n) for p, n in layout.items() if p in table]
    return (sum(c * n for (c, _), n in used), sum(m * n for (_, m), n in used))
