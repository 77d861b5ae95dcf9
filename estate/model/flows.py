"""The flow matrix: who may reach whom, on which ports, and why. One derivation, read by
the nftables renderer, the tenants' NetworkPolicies, slurm.conf (SrunPortRange),
`estate doctor`, `estate check` (flows.required_cut) and the lab's reachability probe.

The defaults follow from the spec's roles, so a spec rarely names a flow: `firewall.admin`
and `firewall.monitoring` say where operators and outside scrapers sit, `monitoring.host`
is the one node that scrapes the exporters, and `firewall.flows` adds a flow or replaces a
default of the same name. Sources are node addresses on the flow's
segment (consecutive addresses merged into ranges), never whole segments, except for the
admin and monitoring hosts, which are not nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network

from estate.model import cni, jobs
from estate.model.services import PORT_RANGES, PORTS, PROTOCOLS
from estate.model.slurm import gpu_workers
from estate.model.storage import export_clients
from estate.spec.addressing import merge_ranges
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.resolved import Estate

# ICMP the input chains accept from anywhere: path MTU discovery needs "fragmentation
# needed" (destination-unreachable) to reach the sender even when conntrack has no entry.
ICMP_TYPES = ("destination-unreachable", "time-exceeded", "parameter-problem")
ICMPV6_TYPES = ("destination-unreachable", "packet-too-big", "time-exceeded",
                "parameter-problem", "nd-neighbor-solicit", "nd-neighbor-advert",
                "nd-router-advert")
# Outbound flows: the output chains accept (replies come back as established), so these
# are named in the rendered files and the matrix, not enforced per destination.
EGRESS = (("dns", "udp", 53, "name resolution"),
          ("ntp", "udp", 123, "time sync (chrony)"),
          ("package-mirror", "tcp", 443, "the Debian package mirror (and 80)"))


@dataclass(frozen=True)
class Flow:
    name: str
    proto: str                      # tcp | udp
    ports: tuple[int, int]          # inclusive
    to: frozenset[str]              # nodes that accept it
    segment: str                    # where: the nodes' addresses on it
    sources: frozenset[str]         # estate nodes that may connect
    cidrs: tuple[str, ...]          # other sources (admin, monitoring hosts)
    reason: str
    path: tuple                     # the spec location that asks for it
    vips: tuple[str, ...] = ()      # addresses the `to` nodes hold besides their own

    @property
    def port_text(self) -> str:
        lo, hi = self.ports
        return str(lo) if lo == hi else f"{lo}-{hi}"

    def has_port(self, proto: str, port: int) -> bool:
        return proto == self.proto and self.ports[0] <= port <= self.ports[1]


class Matrix:
    def __init__(self, estate: Estate, flows: list[Flow]):
        self.estate, self.flows = estate, flows

    def into(self, names) -> list[Flow]:
        """Flows some of these nodes accept."""
        names = set(names)
        return [f for f in self.flows if f.to & names]

    def source_ranges(self, flow: Flow) -> list[tuple[int, int]]:
        return _source_ranges(self.estate, flow)

    def allows(self, src: str, dst: str, proto: str, port: int, segment: str) -> Flow | None:
        """The flow that lets node src reach node dst's address on segment, if any, by
        address as the rendered rules match."""
        addr = self.estate.address(src, segment)
        if addr is None:
            return None
        a = int(addr)
        for f in self.flows:
            if f.segment == segment and dst in f.to and f.has_port(proto, port) and \
                    any(lo <= a <= hi for lo, hi in self.source_ranges(f)):
                return f
        return None

    def ports(self) -> list[tuple[str, int, str]]:
        """(proto, port, segment) to probe: each flow's ports (a range by its ends and
        middle), so every designed port is tried between every pair of nodes."""
        out: dict[tuple[str, int, str], None] = {}
        for f in self.flows:
            lo, hi = f.ports
            for p in dict.fromkeys((lo, (lo + hi) // 2, hi)):
                out[(f.proto, p, f.segment)] = None
        return list(out)


# The names of the default flows: a spec flow with one of them replaces that default.
DEFAULT_NAMES = frozenset(("ssh", "node-exporter", "dcgm-exporter", "slurm-exporter",
                           "kube-state-metrics", "prometheus", "alertmanager", "slurmctld",
                           "slurmd",
                           "srun", "slurmdbd", "slurmrestd", "nfs", "kube-apiserver",
                           "kubelet", "etcd", "calico-typha", "calico-vxlan", "calico-bgp",
                           "job-tcp", "job-udp", "job-launcher"))


@lru_cache(maxsize=8)
def matrix(estate: Estate) -> Matrix:
    defaults = default_flows(estate)
    extra = [_spec_flow(estate, i, f) for i, f in enumerate(estate.spec.firewall.flows)]
    names = {f.name for f in extra}
    return Matrix(estate, [f for f in defaults if f.name not in names] + extra)


def flow(estate: Estate, name: str) -> Flow | None:
    """The matrix's (first) flow of that name, derived alone: a spec flow of the name
    replaces the default (as in matrix), and a default is derived from its own family only. The Slurm
    and Kubernetes renderers need one flow each (srun's range, the bridge to slurmrestd);
    the whole matrix of a 10,000-node estate is 0.03 s they leave to the network renderer
    and the validators (tests/unit/test_flows.py holds this to matrix())."""
    given = [(i, f) for i, f in enumerate(estate.spec.firewall.flows) if f.name == name]
    if given:
        return _spec_flow(estate, *given[0])
    family = _FAMILY.get(name)
    found = matrix(estate).flows if family is None else _kept(family(estate))
    return next((f for f in found if f.name == name), None)


def srun_ports(estate: Estate) -> tuple[int, int]:
    """slurm.conf's SrunPortRange: exactly the range the firewall opens for srun."""
    srun = flow(estate, "srun")
    lo, hi = srun.ports if srun else estate.spec.firewall.srun_ports
    return lo, hi


# --- the defaults, from roles ---------------------------------------------------------------

def _hosts(estate: Estate, names) -> frozenset[str]:
    return frozenset(n for n in names if n in estate.nodes)


@lru_cache(maxsize=64)   # several flows ask for the same nodes; each set is built once
def _role(estate: Estate, *roles: str) -> frozenset[str]:
    return frozenset(estate.hosts_where(lambda g: any(r in g.roles for r in roles)))


@lru_cache(maxsize=64)
def _plane(estate: Estate, plane: str) -> frozenset[str]:
    return frozenset(estate.plane_hosts(plane))


def management(estate: Estate) -> str:
    for seg in estate.spec.segments:
        if seg.purpose == "management":
            return seg.name
    return estate.spec.slurm.address_segment


def admin_cidrs(estate: Estate) -> tuple[str, ...]:
    """firewall.admin, or the management segment's reserved block (gateways and admin
    hosts; the lab's provisioner is the bridge's first address)."""
    given = estate.spec.firewall.admin
    if given is not None:
        return tuple(str(c) for c in given)
    seg = next((s for s in estate.spec.segments if s.name == management(estate)), None)
    if seg is None or not seg.reserved:
        return ()
    first = int(seg.cidr.network_address) + 1
    return (f"{IPv4Address(first)}-{IPv4Address(first + seg.reserved - 1)}",)


def default_flows(estate: Estate) -> list[Flow]:
    return _kept(_access(estate) + _slurm(estate) + _jobs(estate) + _storage(estate)
                 + _kubernetes(estate))


def _kept(flows: list[Flow]) -> list[Flow]:
    """A default flow with no target, or nothing to allow, is not in the matrix."""
    return [f for f in flows if f.to and (f.sources or f.cidrs)]


def designed_port(name: str) -> tuple[str, tuple[int, int]]:
    """(protocol, port range) a default flow is designed with (services.PORTS)."""
    port = PORT_RANGES[name] if name in PORT_RANGES else (PORTS[name],) * 2
    return PROTOCOLS.get(name, "tcp"), port


def _flow(name, to, segment, sources, reason, path, port=None, proto="tcp", cidrs=(),
          vips=()):
    if port is None:
        port = designed_port(name)[1]
    lo, hi = port
    return Flow(name, PROTOCOLS.get(name, proto), (lo, hi), frozenset(to), segment,
                frozenset(sources), tuple(cidrs), reason, path, tuple(vips))


def _access(estate: Estate) -> list[Flow]:
    every, mgmt = frozenset(estate.nodes), management(estate)
    return [_flow("ssh", every, mgmt, (), "admin hosts and the provisioner log in and "
                  "provision over ssh", ("firewall", "admin"), cidrs=admin_cidrs(estate))
            ] + _telemetry(estate)


def _telemetry(estate: Estate) -> list[Flow]:
    """The exporters admit the monitoring host (spec.monitoring) and the scrapers outside
    the estate (firewall.monitoring), nobody else; the admin hosts reach Prometheus, and
    Alertmanager beside it, which Prometheus on the same host sends its alerts to."""
    mon, fw = estate.spec.monitoring, estate.spec.firewall
    cidrs = tuple(str(c) for c in fw.monitoring)
    if mon is None and not cidrs:
        return []
    seg = mon.segment if mon else management(estate)
    scraper = _hosts(estate, [mon.host]) if mon else frozenset()
    path = ("monitoring",) if mon else ("firewall", "monitoring")

    def scrape(name, to, what):
        return _flow(name, to, seg, scraper, f"the monitoring host scrapes {what}", path,
                     cidrs=cidrs)
    # the DCGM exporter runs on the host network of every Kubernetes GPU worker
    # (estate.render.gpu_addons) and, where the spec monitors, of every Slurm GPU worker
    # (estate.render.dcgm_exporter); without a scraper nothing may reach it
    out = [scrape("node-exporter", frozenset(estate.nodes), "every node's exporter"),
           scrape("dcgm-exporter", _gpu_workers(estate) | _slurm_gpu_workers(estate),
                  "the GPU metrics of the GPU workers (on Slurm, with each GPU's job)")]
    if mon is None:   # outside scrapers only: the exporters Estate runs without Prometheus
        return out
    out += [scrape("slurm-exporter", _hosts(estate, estate.spec.slurm.controllers),
                   "the Slurm exporter on the controllers (jobs, nodes, GPUs by account)"),
            scrape("kube-state-metrics", _control_planes(estate), "kube-state-metrics "
                   "(Deployments and containers) on the control planes' host network"),
            _flow("prometheus", scraper, seg, scraper, "the admin hosts reach Prometheus's "
                  "UI and API; it scrapes itself (its rule evaluation failures)", path,
                  cidrs=admin_cidrs(estate)),
            _flow("alertmanager", scraper, seg, scraper, "Prometheus sends its alerts to "
                  "Alertmanager; the admin hosts reach its UI and API (amtool, silences)",
                  path, cidrs=admin_cidrs(estate))]
    return out


def _control_planes(estate: Estate) -> frozenset[str]:
    k8s = estate.spec.kubernetes
    return _hosts(estate, k8s.control_plane) if k8s else frozenset()


def _gpu_workers(estate: Estate) -> frozenset[str]:
    if not estate.spec.kubernetes:
        return frozenset()
    from estate.model import kubernetes as k8s   # it reads this module's neighbours
    return frozenset(n.name for n in k8s.plane_nodes(estate) if n.is_gpu_worker)


def _slurm_gpu_workers(estate: Estate) -> frozenset[str]:
    """Where the DCGM exporter runs on the Slurm plane: the GPU workers, only where the
    spec monitors (its job mapping and unit are rendered only then)."""
    if estate.spec.monitoring is None:
        return frozenset()
    return _hosts(estate, gpu_workers(estate))


def _slurm(estate: Estate) -> list[Flow]:
    slurm = estate.spec.slurm
    seg, nodes = slurm.address_segment, _plane(estate, "slurm")
    ctl = _hosts(estate, slurm.controllers)
    workers = _role(estate, "slurm_worker")
    rest_hosts = _role(estate, "slurmrestd")
    out = [
        _flow("slurmctld", ctl, seg, nodes, "Slurm nodes reach their controller: slurmd "
              "registers, clients and slurmrestd submit, the backup takes over",
              ("slurm", "controllers")),
        _flow("slurmd", workers, seg, nodes, "slurmctld drives slurmd; srun launches steps "
              "on it, and slurmd forwards messages to slurmd along the tree",
              ("nodes",)),
        _flow("srun", nodes, seg, nodes, "srun listens in SrunPortRange for slurmstepd's I/O "
              "and slurmctld's messages, on any Slurm node that runs it",
              ("firewall", "srun_ports"), port=estate.spec.firewall.srun_ports),
    ]
    if slurm.accounting:
        out.append(_flow("slurmdbd", _hosts(estate, [slurm.accounting.host]), seg,
                         ctl | _role(estate, "slurm_login") | rest_hosts,
                         "slurmctld records jobs; sacct and sacctmgr on login nodes and "
                         "slurmrestd query it", ("slurm", "accounting"),
                         port=(slurm.accounting.port,) * 2))
    rest = slurm.slurmrestd
    if rest:
        out.append(_flow("slurmrestd", rest_hosts, rest.segment, _bridge_nodes(estate),
                         "the bridge: Kubernetes nodes of tenants granted slurmrestd (pods "
                         "leave masqueraded as their node), and the admin hosts",
                         ("slurm", "slurmrestd"), port=(rest.port,) * 2,
                         cidrs=admin_cidrs(estate)))
    return out


def _jobs(estate: Estate) -> list[Flow]:
    """The tasks of a job that spans nodes talk to each other on ports nobody can pin
    (NCCL's bootstrap and sockets, Open MPI's TCP transport, torchrun's store): every port
    a job can bind (1024 up), or firewall.jobs.ports, between the workers, on each fabric
    they have and on the Slurm address segment. The login nodes accept the workers' calls
    back to a launcher that runs there (mpirun under salloc), TCP on the ephemeral ports
    only; nothing else reaches a job port (docs/jobs.md)."""
    workers, path = jobs.workers(estate), ("firewall", "jobs")
    port = jobs.ports(estate)
    out = []
    for seg in jobs.fabrics(estate) + (estate.spec.slurm.address_segment,):
        on = frozenset(n for n in workers if estate.address(n, seg) is not None)
        for proto in ("tcp", "udp"):
            out.append(_flow(f"job-{proto}", on, seg, on, f"the tasks of a job talk to "
                             f"each other ({proto}): NCCL, Open MPI, torchrun, Gloo, Ray",
                             path, port=port, proto=proto))
    out.append(_flow("job-launcher", jobs.logins(estate), estate.spec.slurm.address_segment,
                     workers, "a job's tasks call back to its launcher on a login node "
                     "(mpirun under salloc: Open MPI's out-of-band channel)", path,
                     port=jobs.launcher_ports(estate)))
    return out


def _bridge_nodes(estate: Estate) -> frozenset[str]:
    k8s = estate.spec.kubernetes
    if not k8s or not any(t.bridge for t in k8s.tenants):
        return frozenset()
    return _plane(estate, "kubernetes")


def _minters(estate: Estate) -> frozenset[str]:
    """The Slurm controllers, where a tenant has the bridge: their minter writes each
    tenant's token into its namespace (estate.model.bridge)."""
    k8s = estate.spec.kubernetes
    if not k8s or not any(t.bridge for t in k8s.tenants):
        return frozenset()
    return _hosts(estate, estate.spec.slurm.controllers)


def _storage(estate: Estate) -> list[Flow]:
    clients = export_clients(estate)   # the mounts' clients: the same hosts the exports name
    return [_flow("nfs", _hosts(estate, [export.server]), export.segment,
                  clients.get(export.name, ()), f"the mount clients of export {export.name}",
                  ("storage", "exports", i))
            for i, export in enumerate(estate.spec.storage.exports)]


def _kubernetes(estate: Estate) -> list[Flow]:
    k8s = estate.spec.kubernetes
    if not k8s:
        return []
    seg, nodes = k8s.api_segment, _plane(estate, "kubernetes")
    cp = _hosts(estate, k8s.control_plane)
    path = ("kubernetes", "control_plane")
    return [
        # Pods on a control plane reach its API (the kubernetes Service's endpoint) from
        # their pod addresses: locally delivered, that traffic is never masqueraded.
        # ... and through the API VIP, which kube-vip moves between the control planes
        _flow("kube-apiserver", cp, seg, nodes | _minters(estate), "kubelets, the admins, "
              "pods (CoreDNS, Calico's controllers) and the bridge's token minter on the "
              "Slurm controllers reach the API", path,
              cidrs=admin_cidrs(estate) + (str(k8s.pod_cidr),),
              vips=(str(k8s.api_vip),) if k8s.api_vip else ()),
        _flow("kubelet", nodes, seg, cp, "the API server reaches kubelets (logs, exec, "
              "metrics)", path),
        # stacked etcd: 2379 (clients: the API servers), 2380 (peers: the other members)
        _flow("etcd", cp, seg, cp, "etcd's clients and peers are the control planes", path),
    ] + _cni(estate, seg, nodes)


def _cni(estate: Estate, seg: str, nodes: frozenset[str]) -> list[Flow]:
    """Calico between Kubernetes nodes only: Felix to Typha, and the encapsulation's port
    (VXLAN) or BGP (no encapsulation: routes are learnt from the other nodes' BIRDs)."""
    encap = cni.encapsulation(estate)
    path = ("kubernetes", "cni", "encapsulation")
    why = {"calico-typha": "every node's Felix reads the datastore through Typha, which the "
                           "Calico operator runs on some Kubernetes nodes",
           "calico-vxlan": "the pod network's VXLAN overlay between Kubernetes nodes",
           "calico-bgp": "calico-node peers over BGP to learn the other nodes' pod routes"}
    return [_flow(name, nodes, seg, nodes, why[name], path)
            for name in cni.required_flows(encap)]


# the family that derives each default flow flow() is asked for alone
_FAMILY = {"slurmctld": _slurm, "slurmd": _slurm, "srun": _slurm, "slurmdbd": _slurm,
           "slurmrestd": _slurm}


def _parse(estate: Estate, expr: str | None) -> set[str]:
    try:
        return set(_hosts(estate, Hostlist.parse(expr or "")))
    except HostlistError:
        return set()   # nodes.bad_hostlist reports it


def _spec_flow(estate: Estate, i: int, f) -> Flow:
    sources = _parse(estate, f.from_hosts) | _role(estate, *f.from_roles)
    return Flow(f.name, f.proto, (f.port, f.port_end or f.port), frozenset(_parse(estate, f.to)),
                f.segment, frozenset(sources), tuple(str(c) for c in f.from_cidrs), f.reason,
                ("firewall", "flows", i))


# --- addresses ------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _source_ranges(estate: Estate, flow: Flow) -> list[tuple[int, int]]:
    """The flow's sources as merged address ranges (consecutive node addresses become one
    range: a 10,000-node group is one), plus its CIDRs. Nodes without an address on the
    flow's segment have none to allow (flows.required_cut reports a needed one)."""
    nodes = _node_spans(estate, flow.segment, flow.sources)
    return merge_ranges(list(nodes) + [_cidr_span(c) for c in flow.cidrs])


@lru_cache(maxsize=256)   # flows share source sets (every Slurm node, the controllers)
def _node_spans(estate: Estate, segment: str, sources: frozenset[str]) -> tuple:
    first = {gi: b.first for (gi, seg), b in estate._block_index.items() if seg == segment}
    ranges = estate.address_ranges(sources, first)
    return tuple(merge_ranges(s for spans in ranges.values() for s in spans))


def _cidr_span(text: str) -> tuple[int, int]:
    if "-" in text:
        lo, hi = text.split("-")
        return int(IPv4Address(lo)), int(IPv4Address(hi))
    net = IPv4Network(text)
    return int(net.network_address), int(net.broadcast_address)


def dotted(n: int) -> str:
    return f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def range_text(lo: int, hi: int) -> str:
    return dotted(lo) if lo == hi else f"{dotted(lo)}-{dotted(hi)}"
