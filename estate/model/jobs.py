"""Job traffic: what the tasks of a job that spans nodes need from the network (docs/jobs.md).

One derivation, read by the flow matrix (the job flows), the nftables renderer (the
untracked fabric), the TaskProlog and Open MPI's parameters (estate.render.jobs) and the
validators (estate.check.jobs):

- where jobs talk: the fabric segments the workers have addresses on, and the Slurm
  address segment (jobs' sockets bind by hostname, and torchrun's MASTER_ADDR is one);
- which ports: every port, or firewall.jobs.ports, split between the launchers;
- which NIC of a node class is on which segment (node_classes[].nics[].segments).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from estate.spec.resolved import Estate

# A job's tasks run as its user, who cannot bind a port below 1024
# (net.ipv4.ip_unprivileged_port_start): every port a job can listen on. Below it stay
# closed between workers what root alone serves there (ssh).
UNPRIVILEGED = (1024, 65535)
# Linux's default net.ipv4.ip_local_port_range: where a listener on port 0 lands (mpirun's
# out-of-band port, which the workers call back to on a login node).
EPHEMERAL = (32768, 60999)
# torchrun's default MASTER_PORT (torch.distributed.run --master-port)
TORCHRUN_PORT = 29500
# Open MPI's out-of-band channel (the daemons and mpirun): one listener per orted/prted and
# per mpirun. Narrowed, it gets this many ports at the range's start, after MASTER_PORT:
# room for that many concurrent jobs' daemons on one node.
OOB_PORTS = 16
# The kernel's default net.netfilter.nf_conntrack_max on a machine with 4 GiB of memory
# or more (nf_conntrack_htable_size: 262144 buckets, one entry each).
CONNTRACK_MAX = 262144
# Connections an all-to-all opens between two ranks on different nodes: NCCL's socket
# transport opens one per channel and direction; 2 is the least (one channel each way).
CONNECTIONS_PER_PAIR = 2


@lru_cache(maxsize=8)
def workers(estate: Estate) -> frozenset[str]:
    """The nodes that run jobs: the Slurm workers."""
    return frozenset(n for n in estate.role_hosts("slurm_worker") if n in estate.nodes)


def logins(estate: Estate) -> frozenset[str]:
    return frozenset(n for n in estate.role_hosts("slurm_login") if n in estate.nodes)


@lru_cache(maxsize=8)
def fabrics(estate: Estate) -> tuple[str, ...]:
    """The fabric segments some worker has an address on."""
    ws = workers(estate)
    return tuple(s.name for s in estate.spec.segments if s.purpose == "fabric"
                 and any(estate.address(n, s.name) is not None for n in ws))


def ports(estate: Estate) -> tuple[int, int]:
    """The job ports between workers: firewall.jobs.ports, or every unprivileged port."""
    given = estate.spec.firewall.jobs.ports
    return (given[0], given[1]) if given else UNPRIVILEGED


def launcher_ports(estate: Estate) -> tuple[int, int]:
    """The ports a launcher on a login node listens on: firewall.jobs.ports, or the
    ephemeral range (its listener binds port 0)."""
    given = estate.spec.firewall.jobs.ports
    return (given[0], given[1]) if given else EPHEMERAL


def covers_ephemeral(ports: tuple[int, int]) -> bool:
    """Whether a range holds every port a connection's own end may have: the replies to
    it are then job traffic by their destination port too."""
    return ports[0] <= EPHEMERAL[0] and EPHEMERAL[1] <= ports[1]


def narrowed(estate: Estate) -> bool:
    return estate.spec.firewall.jobs.ports is not None


@dataclass(frozen=True)
class Split:
    """A narrowed range, cut between the launchers: torchrun's MASTER_PORT first, then
    Open MPI's out-of-band ports, then its TCP transport (one listener per rank)."""
    master_port: int
    oob: tuple[int, int]
    btl_min: int
    btl_range: int      # btl_tcp_port_range_v4: how many ports from btl_min


def split(estate: Estate) -> Split | None:
    """None where job traffic is not narrowed (every launcher takes what the kernel gives)."""
    if not narrowed(estate):
        return None
    lo, hi = ports(estate)
    oob = (lo + 1, lo + OOB_PORTS)
    return Split(lo, oob, oob[1] + 1, max(0, hi - oob[1]))


def ranks_per_node(estate: Estate) -> int:
    """The most ranks a job puts on one node: one per CPU of the largest worker class
    (Open MPI's default slots, Slurm's default task count)."""
    return max((_cpus(estate, n) for n in workers(estate)), default=1)


def _cpus(estate: Estate, name: str) -> int:
    cls = estate.node_class(estate.group_of(name))
    return cls.cpus if cls else 1


def ports_needed(estate: Estate) -> int:
    """A narrowed range's least size: MASTER_PORT, Open MPI's out-of-band ports, and one
    transport listener per rank of the fullest node."""
    return 1 + OOB_PORTS + ranks_per_node(estate)


# --- interfaces -------------------------------------------------------------------------

@dataclass(frozen=True)
class ClassNetwork:
    """The jobs' network environment of one node class."""
    socket_if: str | None       # the NIC jobs' sockets use: on the fabric, else the address segment
    hcas: tuple[str, ...]       # InfiniBand HCAs (mlx5_0)
    btl_cidrs: tuple[str, ...]  # Open MPI's TCP transport: the fabric, else the address segment
    oob_cidrs: tuple[str, ...]  # Open MPI's out-of-band channel: the address segment


def nic_on(cls, segment: str) -> str | None:
    return next((n.name for n in cls.nics if segment in n.segments), None)


@lru_cache(maxsize=64)
def class_network(estate: Estate, class_name: str) -> ClassNetwork:
    cls = next(c for c in estate.spec.node_classes if c.name == class_name)
    seg = estate.spec.slurm.address_segment
    fabric = [f for f in fabrics(estate) if _class_on(estate, class_name, f)]
    nic = next((n for n in (nic_on(cls, f) for f in fabric) if n), None) or nic_on(cls, seg)
    hcas = tuple(n.hca for n in cls.nics if n.kind == "infiniband" and n.hca)
    cidr = {s.name: str(s.cidr) for s in estate.spec.segments}
    btl = tuple(cidr[f] for f in fabric) or ((cidr[seg],) if seg in cidr else ())
    return ClassNetwork(nic, hcas, btl, (cidr[seg],) if seg in cidr else ())


def _class_on(estate: Estate, class_name: str, segment: str) -> bool:
    return any(g.node_class == class_name and segment in g.addresses and "slurm_worker" in g.roles
               for g in estate.spec.nodes)


def worker_classes(estate: Estate) -> list[str]:
    """The node classes of the Slurm workers, in spec order."""
    used = {g.node_class for g in estate.spec.nodes if "slurm_worker" in g.roles}
    return [c.name for c in estate.spec.node_classes if c.name in used]


# --- connection tracking ----------------------------------------------------------------

def gpus_per_node(estate: Estate) -> int:
    counts = [cls.gpu_count for n in workers(estate)
              if (cls := estate.node_class(estate.group_of(n))) and cls.gpu_kinds]
    return max(counts, default=1)


def conntrack_estimate(estate: Estate, nodes: int) -> int:
    """Conntrack entries one node holds during an all-to-all across `nodes` nodes, where
    job traffic is tracked: each of its G ranks (one per GPU, one for a CPU-only node)
    connects to every rank of the other nodes, and is connected to by them, with
    CONNECTIONS_PER_PAIR connections a pair: G x G x (nodes - 1) x CONNECTIONS_PER_PAIR."""
    g = gpus_per_node(estate)
    return g * g * max(0, nodes - 1) * CONNECTIONS_PER_PAIR
