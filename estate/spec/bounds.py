"""Numeric bounds of the spec and of its input, in one place.

Every number a spec carries has a realistic range, so that a typo such as
``memory_mb: 1000000000000000000000000000000`` is a schema finding and not an
integer that flows into slurm.conf, a Kueue quota or a loop. The limits on the
input itself (file size, YAML aliases, expanded hosts) keep a hostile or broken
spec from taking unbounded time or memory: each is named in the finding that
reports it.
"""
from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from typing import Annotated

from pydantic import BeforeValidator, Field

# --- the input ------------------------------------------------------------------------

MAX_SPEC_BYTES = 8 * 1024 * 1024        # a 10,000-node spec is well under 1 MiB
MAX_YAML_ALIASES = 100_000              # alias (*name) uses in one spec (yaml.dump of shared
                                        # objects writes one per repeat)
MAX_YAML_NODES = 1_000_000              # YAML nodes after expanding every alias
MAX_YAML_DEPTH = 64                     # nesting of mappings and sequences
MAX_HOSTS_PER_EXPRESSION = 262_144      # hosts one hostlist expression may expand to
MAX_HOSTS_PER_SPEC = 262_144            # hosts all node groups together may hold
MAX_HOSTLIST_HOSTS = 4 * MAX_HOSTS_PER_SPEC   # hosts of every hostlist in a spec together
MAX_HOSTLIST_RANGES = 131_072           # ranges (n[1-4] is one, a[1-9]b[1-2] nine) together
MAX_HOSTNAME = 63                       # RFC 1123 label length (and Slurm's node names)

# --- hardware -------------------------------------------------------------------------

MAX_MEMORY_MB = 64 * 1024 * 1024        # 64 TiB of RAM in one node
MAX_SOCKETS = 16
MAX_CORES_PER_SOCKET = 1024
MAX_GPU_MEMORY_GB = 4096
MAX_LINK_GBPS = 3200                    # NIC and switch link speeds (today's fastest: 800)
MAX_GRES = 1024

# --- scheduling -----------------------------------------------------------------------

SLURM_UINT32_MAX = 2**32 - 2            # Slurm's largest finite uint32 (the next is INFINITE)
MAX_FAIRSHARE = 1_000_000
MAX_K8S_PRIORITY = 1_000_000_000        # PriorityClass values above are system classes
MIN_K8S_PRIORITY = -(2**31)
MAX_GPUS = MAX_HOSTS_PER_SPEC * 16      # GPU quotas and per-user limits
MAX_RESERVED = 2**24                    # addresses reserved at the start of a segment

MemoryMB = Annotated[int, Field(ge=256, le=MAX_MEMORY_MB)]
SlurmMemoryMB = Annotated[int, Field(ge=1, le=MAX_MEMORY_MB)]
Sockets = Annotated[int, Field(ge=1, le=MAX_SOCKETS)]
CoresPerSocket = Annotated[int, Field(ge=1, le=MAX_CORES_PER_SOCKET)]
GpuMemoryGB = Annotated[int, Field(ge=1, le=MAX_GPU_MEMORY_GB)]
LinkGbps = Annotated[int, Field(ge=1, le=MAX_LINK_GBPS)]
GresCount = Annotated[int, Field(ge=0, le=MAX_GRES)]
SlurmWeight = Annotated[int, Field(ge=1, le=SLURM_UINT32_MAX)]
SlurmPriority = Annotated[int, Field(ge=0, le=SLURM_UINT32_MAX)]
Fairshare = Annotated[int, Field(ge=1, le=MAX_FAIRSHARE)]
GpuQuota = Annotated[int, Field(ge=0, le=MAX_GPUS)]
K8sPriority = Annotated[int, Field(ge=MIN_K8S_PRIORITY, le=MAX_K8S_PRIORITY)]
BlockSize = Annotated[int, Field(ge=1, le=MAX_HOSTS_PER_SPEC)]
Reserved = Annotated[int, Field(ge=1, le=MAX_RESERVED)]


def _written_as_text(value):
    """An address or CIDR must be written as text: pydantic would read 7 as 0.0.0.7 and
    true as 0.0.0.1/32."""
    if isinstance(value, (bool, int, float)):
        raise ValueError(f"write the address as text such as 10.0.0.0/24, not the number "
                         f"{value!r}")
    return value


IPv4 = Annotated[IPv4Address, BeforeValidator(_written_as_text)]
IPv4Cidr = Annotated[IPv4Network, BeforeValidator(_written_as_text)]
