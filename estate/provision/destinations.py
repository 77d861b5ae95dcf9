"""Where each rendered artifact is installed on a node: the one table roles and verify share.

Paths are Debian's (bookworm): /etc/slurm for Slurm, /etc/default for unit
environments. Artifacts that are data for a role rather than configuration
(identity, GPU device lists, accounting scripts) are kept under /etc/estate so a
verifier can still compare them byte for byte with the rendered tree.
"""
from __future__ import annotations

from fnmatch import fnmatch

ESTATE_ETC = "/etc/estate"

# First match wins; patterns are fnmatch on the artifact path.
TABLE: list[tuple[str, str]] = [
    ("common/hosts", "/etc/hosts"),
    ("network/nftables/*.nft", "/etc/nftables.conf"),
    ("slurm/slurmd.env", "/etc/default/slurmd"),
    ("slurm/slurmrestd/*.env", "/etc/default/slurmrestd"),
    ("slurm/*.conf", "/etc/slurm/{name}"),
]


def destination(path: str) -> str:
    """Absolute install path for an artifact path such as 'slurm/slurm.conf'."""
    name = path.rsplit("/", 1)[-1]
    for pattern, dest in TABLE:
        if fnmatch(path, pattern):
            return dest.format(name=name)
    return f"{ESTATE_ETC}/{path}"
