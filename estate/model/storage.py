"""Shared storage's derived facts: which addresses may mount each export and how, and
which Kubernetes tenants are granted which exports.

An export is served to the addresses of the clients that spec.storage.mounts names for
it, never to its whole segment. The Kubernetes plane's nodes mount on behalf of tenant
pods, so they get an export read-write only where some tenant's grant says rw; root is
squashed unless the export's options say otherwise (exports(5) root_squash).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from ipaddress import IPv4Address, summarize_address_range

from estate.spec.addressing import merge_ranges
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.model import Export, StorageGrant, User
from estate.spec.resolved import Estate

SLURM, KUBERNETES = "slurm", "kubernetes"


def home_of(user: User) -> str:
    return user.home or f"/home/{user.name}"


def options_of(options: str) -> list[str]:
    return [o for o in options.split(",") if o]


def squashes_root(export: Export) -> bool:
    return "no_root_squash" not in options_of(export.options)


@lru_cache(maxsize=8)
def export_clients(estate: Estate) -> dict[str, tuple[str, ...]]:
    """Export name -> the defined hosts that mount it, in mount order, each once.

    Cached per estate: a mount may name 10,000 Slurm nodes, and render and check ask."""
    out: dict[str, dict[str, None]] = {}
    for m in estate.spec.storage.mounts:
        try:
            names = Hostlist.parse(m.clients)
        except HostlistError:
            continue  # nodes.bad_hostlist reports it
        seen = out.setdefault(m.export, {})
        seen.update(dict.fromkeys(filter(estate.nodes.__contains__, names)))
    return {name: tuple(hosts) for name, hosts in out.items()}


def client_planes(estate: Estate, export: str) -> set[str | None]:
    """The planes of the nodes that mount an export (None: a node of neither plane)."""
    groups = {estate.nodes[n].group for n in export_clients(estate).get(export, ())}
    return {estate.spec.nodes[g].plane for g in groups}


# --- grants --------------------------------------------------------------------------

@dataclass(frozen=True)
class Grant:
    tenant: str
    index: tuple[int, int]          # (tenant, grant) indices in kubernetes.tenants
    grant: StorageGrant
    export: Export | None           # None: the grant names no defined export


def grants(estate: Estate) -> list[Grant]:
    k8s = estate.spec.kubernetes
    exports = {e.name: e for e in estate.spec.storage.exports}
    return [Grant(t.name, (ti, gi), g, exports.get(g.export))
            for ti, t in enumerate(k8s.tenants if k8s else ())
            for gi, g in enumerate(t.storage)]


def rw_granted(estate: Estate, export: str) -> bool:
    return any(g.grant.access == "rw" for g in grants(estate) if g.grant.export == export)


def slurm_home(estate: Estate, export: Export) -> bool:
    """The export holds the Slurm users' homes: a mount of it is, or is above, the home
    of a non-system user of the spec's identity."""
    homes = [home_of(u).rstrip("/") + "/" for u in estate.spec.identity.users if not u.system]
    paths = [m.path.rstrip("/") + "/" for m in estate.spec.storage.mounts
             if m.export == export.name]
    return any(h.startswith(p) for p in paths for h in homes)


def cross_plane(estate: Estate, export: Export) -> bool:
    """The export is the Slurm plane's too: Slurm nodes mount it, or it holds the Slurm
    users' homes. Granting it to a Kubernetes tenant crosses planes."""
    return SLURM in client_planes(estate, export.name) or slurm_home(estate, export)


# --- exports(5) client lists -------------------------------------------------------------

@dataclass(frozen=True)
class ClientSpec:
    client: str        # an address, or a CIDR covering exactly client addresses
    options: str


def plane_options(estate: Estate, export: Export, plane: str | None) -> str:
    """The export's options for one plane's nodes: Kubernetes nodes get it read-only unless
    a tenant is granted it rw, so that a read-only grant is enforced by the server."""
    opts = options_of(export.options)
    if plane != KUBERNETES or rw_granted(estate, export.name):
        return ",".join(opts)
    opts = ["ro" if o == "rw" else o for o in opts]
    return ",".join(opts if "ro" in opts else [*opts, "ro"])


def client_specs(estate: Estate, export: Export) -> list[ClientSpec]:
    """exports(5) clients of an export: each mounting node's address on the export's
    segment, contiguous addresses with the same options merged into exact CIDRs, the
    options in the order of their first client."""
    options = {p: plane_options(estate, export, p) for p in (None, SLURM, KUBERNETES)}
    first = {b.group: b.first for b in estate.address_blocks if b.segment == export.segment}
    clients = export_clients(estate).get(export.name, ())
    groups = dict.fromkeys(map(itemgetter(1), map(estate.nodes.__getitem__, clients)))
    by_options: dict[str, list[tuple[int, int]]] = {}
    # a group without an address on the segment has none: storage.client_unreachable says so
    for gi, spans in estate.address_ranges(frozenset(clients), first, groups).items():
        by_options.setdefault(options[estate.spec.nodes[gi].plane], []).extend(spans)
    return [ClientSpec(c, opts) for opts, spans in by_options.items()
            for lo, hi in merge_ranges(spans) for c in _cidrs(lo, hi)]


def _cidrs(lo: int, hi: int) -> list[str]:
    """The fewest CIDRs covering exactly the addresses lo..hi."""
    return [str(net.network_address) if net.prefixlen == 32 else str(net)
            for net in summarize_address_range(IPv4Address(lo), IPv4Address(hi))]
