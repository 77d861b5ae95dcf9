"""Slurm's view of the nodes: NodeName lines (nodes grouped by identical hardware, with
their NodeAddr ranges), each partition's job defaults (memory per CPU, CPUs and memory
per GPU, time limit) and the cluster settings derived from the hardware.

slurm.conf is written from these, and verify compares what slurmctld reports with them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address

from estate.model import model
from estate.model.slurm_keys import at_least
from estate.spec.hostlist import Hostlist, Range
from estate.spec.hostset import HostSet
from estate.spec.model import Partition as PartitionSpec
from estate.spec.resolved import Estate


# topology/block (BlockName lines in topology.conf) came in Slurm 23.11 (RELEASE_NOTES).
BLOCK_TOPOLOGY = (23, 11)


def block_topology(estate: Estate) -> bool:
    """Whether topology.conf holds the spec's blocks (topology/block) rather than its
    switch tree: the spec declares blocks and its Slurm reads them. Before 25.05 a cluster
    has one topology plugin, so blocks win over switches there."""
    slurm = estate.spec.slurm
    return bool(estate.spec.topology.blocks) and at_least(slurm.version, BLOCK_TOPOLOGY)


@dataclass(frozen=True)
class GresKind:
    """One gpu item of a NodeName line's Gres=: whole GPUs of one model, or the MIG devices
    of one profile on GPUs of one model; untyped Gres is one kind without a type."""
    type: str | None    # the GRES type: the GPU model, a MIG profile (1g.10gb), or none
    count: int          # GRES units: GPUs, or MIG devices
    first: int          # its first physical GPU (device file index)
    gpus: int           # the physical GPUs it is on
    mig: bool = False


def gres_type_id(name: str) -> int:
    """The number slurmctld knows a GRES type by: gres_build_id() of src/interfaces/gres.c
    (src/common/gres.c in 22.05; the same code in 22.05 and 24.11), each byte shifted into
    byte lane i mod 4 of a 32-bit sum. Jobs find their type on nodes by this number
    (gres_find_job_by_key, select/cons_tres) and gres_add_type() adds a node's counts of
    types with one number together: names with the same number are one type. Bytes are C
    chars (signed on x86_64)."""
    out = 0
    for i, byte in enumerate(name.encode()):
        char = byte - 256 if byte > 127 else byte
        out = (out + (char << (8 * (i % 4)))) & 0xFFFFFFFF
    return out


def gres_kinds(group) -> tuple[GresKind, ...]:
    """A Slurm worker group's Gres items, GPU kinds in spec order on consecutive device
    files. A Gres count override applies to a class of one whole-GPU kind (for others
    slurm.gres_mismatch refuses a count other than the class's)."""
    kinds, count = group.gpu_kinds, group.gres_count
    if not count:
        return ()
    if len(kinds) == 1 and not kinds[0].mig_profiles:
        typed = kinds[0].model if group.spec.slurm.gres_typed else None
        return (GresKind(typed, count, 0, count),)
    out, first = [], 0
    for k in kinds:
        if k.mig_profiles:
            out += [GresKind(p, n * k.count, first, k.count, True)
                    for p, n in k.mig_profiles.items()]
        else:
            out.append(GresKind(k.model, k.count, first, k.count))
        first += k.count
    if not group.spec.slurm.gres_typed:     # jobs ask for gpu:N of any kind
        return (GresKind(None, sum(g.count for g in out), 0, first, any(g.mig for g in out)),)
    return tuple(out)


@dataclass
class NodeLine:
    """One NodeName line: nodes with identical hardware, in spec order."""
    names: list[Range]
    addrs: list[Range]
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory: int
    gres: str | None
    kinds: tuple[GresKind, ...]
    gres_count: int            # GRES gpu units of all kinds: GPUs and MIG devices
    features: tuple[str, ...]
    weight: int
    core_spec_count: int | None = None
    mem_spec_limit: int | None = None
    shards: int = 0            # GRES shard on each node: shards_per_gpu x its GPUs
    state: str = "UNKNOWN"     # State=: UNKNOWN, CLOUD (powered on demand) or FUTURE

    @property
    def hostlist(self) -> Hostlist:
        return Hostlist(self.names)

    @property
    def gres_model(self) -> str | None:
        """The GRES type of a line with one kind (None: untyped, or several kinds)."""
        return self.kinds[0].type if len(self.kinds) == 1 else None

    @property
    def job_cpus(self) -> int:
        """CPUs jobs may get: CoreSpecCount's cores (with their threads) are the system's."""
        return self.cpus - (self.core_spec_count or 0) * self.threads_per_core

    @property
    def job_memory(self) -> int:
        """Memory (MB) jobs may get: RealMemory less MemSpecLimit."""
        return self.real_memory - (self.mem_spec_limit or 0)

    @property
    def addr_list(self) -> Hostlist:
        return Hostlist(self.addrs)


def address_ranges(first: int, count: int) -> list[Range]:
    """A block of consecutive IPv4 addresses as hostlist ranges, one per /24."""
    out, n, end = [], first, first + count
    while n < end:
        chunk_end = min(end, (n | 0xFF) + 1)
        prefix = str(IPv4Address(n)).rsplit(".", 1)[0] + "."
        out.append(Range(prefix, n & 0xFF, (chunk_end - 1) & 0xFF, 1))
        n = chunk_end
    return out


@lru_cache(maxsize=8)   # the validators, slurm.conf and the plugin settings all read it
def node_lines(estate: Estate) -> tuple[NodeLine, ...]:
    seg = estate.spec.slurm.address_segment
    blocks = {(b.group, b.segment): b for b in estate.address_blocks}
    lines: dict[tuple, NodeLine] = {}
    for g in model(estate).groups:
        cls = g.cls
        if not g.slurm_compute or cls is None or not g.hosts:
            continue
        kinds = gres_kinds(g)
        count = sum(k.count for k in kinds)
        block = blocks.get((g.index, seg))
        # groups with and without an address never share a line: NodeAddr must list
        # one address per name or none
        ns = g.spec.slurm
        shards = (ns.shards_per_gpu or 0) * g.gres_count
        key = (cls.sockets, cls.cores_per_socket, cls.threads_per_core, g.real_memory,
               kinds, count, tuple(ns.features), ns.weight, ns.core_spec_count,
               ns.mem_spec_limit_mb, shards, ns.state.upper(), block is None)
        line = lines.get(key)
        if line is None:
            line = lines[key] = NodeLine(
                [], [], cls.cpus, cls.sockets, cls.cores_per_socket, cls.threads_per_core,
                key[3], gres_text(kinds, shards), kinds, count,
                key[6], key[7], key[8], key[9], shards, key[11])
        line.names.extend(g.hosts.ranges)
        if block:
            line.addrs.extend(address_ranges(block.first, block.count))
    return tuple(lines.values())


def gpu_workers(estate: Estate) -> frozenset[str]:
    """The Slurm workers with GPUs (a Gres line): where Estate's Prolog and Epilog keep the
    DCGM exporter's job mapping and, with monitoring, the exporter runs."""
    return frozenset(n for line in node_lines(estate) if line.gres_count
                     for n in line.hostlist.names())


def gres_text(kinds: tuple[GresKind, ...], shards: int) -> str | None:
    """A NodeName line's Gres=: gpu[:type]:N for each kind, then shard:M."""
    if not kinds:
        return None
    gpu = ",".join(f"gpu:{k.type}:{k.count}" if k.type else f"gpu:{k.count}" for k in kinds)
    return gpu + (f",shard:{shards}" if shards else "")


@dataclass(frozen=True)
class GresFile:
    """One gres.conf line of a NodeName line's GPUs: device files and the cores near them."""
    first: int                 # first GPU index
    count: int
    cores: tuple[int, int] | None
    type: str | None = None    # the kind's GRES type (Type=)


def kind_affinity(kind: GresKind, sockets: int, cps: int) -> list[GresFile]:
    """One kind's GPUs split evenly over the sockets, each share bound to its socket's
    cores (Cores=, Slurm's core indices): a job's CPUs then sit next to its GPUs. A count
    the sockets do not divide, or one socket, gets one line without Cores=."""
    n, first = kind.count, kind.first
    if sockets < 2 or n % sockets:
        return [GresFile(first, n, None, kind.type)]
    per = n // sockets
    return [GresFile(first + s * per, per, (s * cps, (s + 1) * cps - 1), kind.type)
            for s in range(sockets)]


def gpu_affinity(line: NodeLine) -> list[GresFile]:
    """gres.conf's lines for a NodeName line's whole GPUs, kind by kind (each kind split
    over the sockets on its own: Estate's convention for where a node's kinds sit). MIG
    devices have none: AutoDetect=nvml describes them (slurm.mig_needs_nvml)."""
    return [f for k in line.kinds if not k.mig
            for f in kind_affinity(k, line.sockets, line.cores_per_socket)]


def def_mem_per_cpu(estate: Estate, lines: Sequence[NodeLine]) -> dict[str, int]:
    """Partition -> DefMemPerCPU: the smallest memory per CPU jobs may get among its nodes.

    With CR_Core_Memory and no default, a job is given all of a node's memory, so
    two 1-GPU jobs could never share a 2-GPU node (measured on real slurmctld).
    """
    sets = [(HostSet.of(line.names), line.job_memory // max(line.job_cpus, 1))
            for line in lines]
    out = {}
    for part in model(estate).partitions:
        per_cpu = [mem for hosts, mem in sets if hosts & part.members]
        if per_cpu:
            out[part.name] = min(per_cpu)
    return out


def partition_lines(estate: Estate, lines: Sequence[NodeLine]) -> dict[str, list[NodeLine]]:
    """Partition -> the NodeName lines with a node in it."""
    sets = [(HostSet.of(line.names), line) for line in lines]
    return {p.name: [line for hosts, line in sets if hosts & p.members]
            for p in model(estate).partitions}


def def_per_gpu(estate: Estate, lines: Sequence[NodeLine]) -> dict[str, tuple[int, int]]:
    """Partition -> (DefCpuPerGPU, DefMemPerGPU): the CPUs and RealMemory of its nodes
    divided by their GPUs, where every node of the partition has the same shape.

    Without them a `--gres=gpu:1` job gets one CPU and DefMemPerCPU of memory (on a
    224-CPU, 8-GPU node: 1 CPU where 28 are its share). Partitions mixing shapes get
    none (no one share fits all); the spec's def_cpu_per_gpu/def_mem_per_gpu_mb win."""
    out = {}
    for part, plines in partition_lines(estate, lines).items():
        shapes = {(ln.job_cpus, ln.job_memory, ln.gres_count) for ln in plines}
        if len(shapes) == 1:
            cpus, mem, gpus = next(iter(shapes))
            if gpus:
                out[part] = (cpus // gpus, mem // gpus)
    for p in estate.spec.slurm.partitions:
        derived = out.get(p.name, (None, None))
        cpu = p.def_cpu_per_gpu or derived[0]
        mem = p.def_mem_per_gpu_mb or derived[1]
        if cpu or mem:
            out[p.name] = (cpu, mem)
    return out


DEFAULT_TIME_CAP = 3600  # seconds: a job that names no limit gets at most 1 hour


def default_time(part: PartitionSpec) -> str:
    """DefaultTime: the spec's, else max_time capped at one hour."""
    if part.default_time:
        return part.default_time
    limit = time_seconds(part.max_time)
    return part.max_time if limit is not None and limit <= DEFAULT_TIME_CAP else "01:00:00"


def time_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds (None: unlimited, or not a time). Formats as sbatch
    --time reads them: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    text = text.strip().upper()
    if text in ("UNLIMITED", "INFINITE", "-1"):
        return None
    days, _, rest = text.rpartition("-")
    try:
        parts = [int(p) for p in rest.split(":")]
        if days:
            h, m, s = (parts + [0, 0])[:3]
            return ((int(days) * 24 + h) * 60 + m) * 60 + s
    except ValueError:
        return None
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) > 1 else 0)


def infiniband(estate: Estate) -> bool:
    """True when a Slurm compute node has an InfiniBand NIC."""
    return any(g.cls and g.slurm_compute and any(n.kind == "infiniband" for n in g.cls.nics)
               for g in model(estate).groups)


def propagate_except(estate: Estate) -> list[str]:
    """PropagateResourceLimitsExcept: the spec's, else MEMLOCK on an InfiniBand fabric.

    slurmd propagates the submitting shell's limits to the job; a login shell's
    RLIMIT_MEMLOCK (often 64 KiB) makes RDMA memory registration fail in every job,
    so on InfiniBand the job keeps the compute node's own (unlimited) limit."""
    own = estate.spec.slurm.propagate_resource_limits_except
    if own is not None:
        return list(own)
    return ["MEMLOCK"] if infiniband(estate) else []


def weights(table: dict[str, float]) -> str:
    """TRESBillingWeights/PriorityWeightTRES text, CPU=1,GRES/gpu=2 (%g: no float noise)."""
    return ",".join(f"{k}={v:g}" for k, v in table.items())


def state_mount(estate: Estate):
    """The storage mount that holds StateSaveLocation on every controller (the state dir
    is the mount point or lies inside it), if the spec has one: what lets a backup
    controller take over with the primary's jobs (slurm.conf(5), StateSaveLocation)."""
    state = estate.spec.slurm.state_dir
    controllers = set(estate.spec.slurm.controllers)
    for m in estate.spec.storage.mounts:
        if state != m.path and not state.startswith(m.path.rstrip("/") + "/"):
            continue
        try:
            clients = set(Hostlist.parse(m.clients))
        except ValueError:
            continue    # storage validators report the hostlist
        if controllers <= clients:
            return m
    return None


def suspend_excluded(lines: Sequence[NodeLine]) -> Hostlist:
    """SuspendExcNodes: every node but the cloud ones, which power saving alone may touch
    (SuspendTime would otherwise power down any idle node)."""
    return Hostlist([r for ln in lines if ln.state != "CLOUD" for r in ln.names])
