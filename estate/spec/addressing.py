"""Deterministic address allocation from segment CIDRs.

For each segment, explicitly given group addresses are claimed first; then
groups marked 'auto' take the lowest free addresses after the segment's
reserved block, in spec order. Work is on integer ranges, so a 10,000-node
segment costs a handful of interval operations, not 10,000 objects.
"""
from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Iterable

from estate.spec.model import Segment, Spec


_LAST_IPV4 = 2**32 - 1


@dataclass(frozen=True)
class Block:
    """Consecutive addresses of one node group on one segment."""
    group: int
    segment: str
    first: int  # integer IPv4 address
    count: int
    given: bool

    def address(self, i: int) -> IPv4Address:
        return IPv4Address(self.first + i)


@dataclass(frozen=True)
class Shortfall:
    group: int
    segment: str
    needed: int
    free: int


def host_bounds(seg: Segment) -> tuple[int, int]:
    """First and last allocatable host address (after the reserved block)."""
    net = seg.cidr
    first = int(net.network_address) + 1 + seg.reserved
    last = int(net.broadcast_address) - 1
    return first, last


def allocate(spec: Spec, sizes: list[int]) -> tuple[list[Block], list[Shortfall]]:
    """Blocks for every (group, segment) pair; shortfalls where a CIDR is exhausted."""
    segments = {s.name: s for s in spec.segments}
    blocks: list[Block] = []
    shortfalls: list[Shortfall] = []
    taken: dict[str, list[tuple[int, int]]] = {name: [] for name in segments}
    for gi, group in enumerate(spec.nodes):
        for seg_name, addr in group.addresses.items():
            if addr != "auto" and seg_name in segments:
                if int(addr) + sizes[gi] - 1 > _LAST_IPV4:   # past 255.255.255.255
                    shortfalls.append(Shortfall(gi, seg_name, sizes[gi],
                                                _LAST_IPV4 - int(addr) + 1))
                    continue
                b = Block(gi, seg_name, int(addr), sizes[gi], True)
                blocks.append(b)
                taken[seg_name].append((b.first, b.first + b.count - 1))
    cursor = {name: host_bounds(seg)[0] for name, seg in segments.items()}
    for gi, group in enumerate(spec.nodes):
        for seg_name, addr in group.addresses.items():
            if addr != "auto" or seg_name not in segments:
                continue
            start = _find_free(cursor[seg_name], sizes[gi], taken[seg_name])
            last = host_bounds(segments[seg_name])[1]
            if start + sizes[gi] - 1 > last:
                shortfalls.append(Shortfall(gi, seg_name, sizes[gi], max(0, last - start + 1)))
                continue
            blocks.append(Block(gi, seg_name, start, sizes[gi], False))
            cursor[seg_name] = start + sizes[gi]
    return blocks, shortfalls


def _find_free(start: int, count: int, taken: list[tuple[int, int]]) -> int:
    """Lowest start >= start where count addresses avoid every taken interval."""
    for lo, hi in sorted(taken):
        if start + count - 1 < lo:
            break
        if hi >= start:
            start = hi + 1
    return start


def merge_ranges(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Integer address ranges, sorted, with touching or overlapping ones joined."""
    out: list[list[int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]
