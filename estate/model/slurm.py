"""Slurm's view of the nodes: NodeName lines (nodes grouped by identical hardware, with
their NodeAddr ranges) and each partition's default memory per CPU.

slurm.conf is written from these, and verify compares what slurmctld reports with them.
"""
from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address

from estate.model import model
from estate.spec.hostlist import Hostlist, Range
from estate.spec.hostset import HostSet
from estate.spec.resolved import Estate


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
    gres_model: str | None
    gres_count: int
    features: tuple[str, ...]
    weight: int

    @property
    def hostlist(self) -> Hostlist:
        return Hostlist(self.names)

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


def node_lines(estate: Estate) -> list[NodeLine]:
    seg = estate.spec.slurm.address_segment
    blocks = {(b.group, b.segment): b for b in estate.address_blocks}
    lines: dict[tuple, NodeLine] = {}
    for g in model(estate).groups:
        cls = g.cls
        if not g.slurm_compute or cls is None or not g.hosts:
            continue
        count, gpu = g.gres_count, g.gpu_model
        key = (cls.sockets, cls.cores_per_socket, cls.threads_per_core, g.real_memory, gpu,
               count, tuple(g.spec.slurm.features), g.spec.slurm.weight)
        line = lines.get(key)
        if line is None:
            line = lines[key] = NodeLine(
                [], [], cls.cpus, cls.sockets, cls.cores_per_socket, cls.threads_per_core,
                key[3], f"gpu:{gpu}:{count}" if count else None, gpu, count,
                key[6], key[7])
        line.names.extend(g.hosts.ranges)
        block = blocks.get((g.index, seg))
        if block:
            line.addrs.extend(address_ranges(block.first, block.count))
    return list(lines.values())


def def_mem_per_cpu(estate: Estate, lines: list[NodeLine]) -> dict[str, int]:
    """Partition -> DefMemPerCPU: the smallest RealMemory/CPUs among its nodes.

    With CR_Core_Memory and no default, a job is given all of a node's memory, so
    two 1-GPU jobs could never share a 2-GPU node (measured on real slurmctld).
    """
    sets = [(HostSet.of(line.names), line.real_memory // line.cpus) for line in lines]
    out = {}
    for part in model(estate).partitions:
        per_cpu = [mem for hosts, mem in sets if hosts & part.members]
        if per_cpu:
            out[part.name] = min(per_cpu)
    return out
