"""Exact sets of host names kept as integer intervals.

``HostSet`` answers "which names are in both / in one but not the other" on
intervals, so a 10,000-node group costs one interval, not 10,000 strings.
Names compare as strings, as Slurm compares them: ``gpu0[1-9]`` and
``gpu[01-09]`` are the same nine hosts, ``gpu1`` and ``gpu001`` are not.
Validators, the renderers and the capacity model all use it.
"""
from __future__ import annotations

import heapq
import re
from typing import Iterable, Iterator

from estate.spec.hostlist import Hostlist, Range

_DIGITS = re.compile(r"\d*$")

Key = tuple[str, int]          # (name without trailing digits, number of trailing digits)
Intervals = list[tuple[int, int]]


def _canonical(r: Range) -> Iterator[tuple[Key, int, int]]:
    """A Range as (key, lo, hi) pieces in which every value has the same digit count."""
    if r.single:
        yield (r.prefix, 0), 0, 0
        return
    head = _DIGITS.search(r.prefix).group()       # digits at the end of the prefix
    stem = r.prefix[: len(r.prefix) - len(head)]
    base = int(head) if head else 0
    lo, k = r.lo, max(r.width, len(str(r.lo)))
    while lo <= r.hi:
        hi = min(r.hi, 10 ** k - 1)               # numbers printed with exactly k digits
        shift = base * 10 ** k
        yield (stem, len(head) + k), shift + lo, shift + hi
        lo, k = hi + 1, k + 1


def _merge(ivs: Iterable[tuple[int, int]]) -> Intervals:
    out: Intervals = []
    for lo, hi in sorted(ivs):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _subtract(a: Intervals, b: Intervals) -> Intervals:
    out, j = [], 0
    for lo, hi in a:
        while j < len(b) and b[j][1] < lo:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= hi:
            if b[k][0] > lo:
                out.append((lo, b[k][0] - 1))
            lo = max(lo, b[k][1] + 1)
            k += 1
        if lo <= hi:
            out.append((lo, hi))
    return out


class HostSet:
    """A set of host names kept as intervals per (stem, digit count)."""

    __slots__ = ("_iv",)

    def __init__(self, iv: dict[Key, Intervals] | None = None):
        self._iv = {k: v for k, v in (iv or {}).items() if v}

    @classmethod
    def of(cls, hosts: Hostlist | Iterable[Range]) -> "HostSet":
        pieces: dict[Key, list[tuple[int, int]]] = {}
        ranges: Iterable[Range] = hosts.ranges if isinstance(hosts, Hostlist) else hosts
        for r in ranges:
            for key, lo, hi in _canonical(r):
                pieces.setdefault(key, []).append((lo, hi))
        return cls({k: _merge(v) for k, v in pieces.items()})

    @classmethod
    def names(cls, names: Iterable[str]) -> "HostSet":
        return cls.of(Hostlist.from_names(names))

    def __and__(self, other: "HostSet") -> "HostSet":
        return HostSet({k: _intersect(v, other._iv[k]) for k, v in self._iv.items()
                        if k in other._iv})

    def __sub__(self, other: "HostSet") -> "HostSet":
        return HostSet({k: _subtract(v, other._iv[k]) if k in other._iv else v
                        for k, v in self._iv.items()})

    def __or__(self, other: "HostSet") -> "HostSet":
        keys = self._iv.keys() | other._iv.keys()
        return HostSet({k: _merge(self._iv.get(k, []) + other._iv.get(k, [])) for k in keys})

    def __len__(self) -> int:
        return sum(hi - lo + 1 for v in self._iv.values() for lo, hi in v)

    def __bool__(self) -> bool:
        return bool(self._iv)

    def __contains__(self, name: str) -> bool:
        return bool(HostSet.names([name]) & self)

    def hostlist(self) -> Hostlist:
        ranges = []
        for (stem, digits), ivs in sorted(self._iv.items()):
            for lo, hi in ivs:
                ranges.append(Range(stem, single=True) if digits == 0
                              else Range(stem, lo, hi, digits))
        return Hostlist(ranges)

    def head(self, n: int) -> tuple[Hostlist, bool]:
        """The first n ranges of hostlist() and whether more follow, without building
        the rest (for messages about sets of 100,000 ranges)."""
        ranges: list[Range] = []
        for (stem, digits), ivs in sorted(self._iv.items()):
            for lo, hi in ivs:
                if len(ranges) == n:
                    return Hostlist(ranges), True
                ranges.append(Range(stem, single=True) if digits == 0
                              else Range(stem, lo, hi, digits))
        return Hostlist(ranges), False

    def __str__(self) -> str:
        return str(self.hostlist())


def union(sets: Iterable[HostSet]) -> HostSet:
    pieces: dict[Key, list[tuple[int, int]]] = {}
    for s in sets:
        for k, v in s._iv.items():
            pieces.setdefault(k, []).extend(v)
    return HostSet({k: _merge(v) for k, v in pieces.items()})


def overlapping(sets: list[HostSet]) -> dict[int, list[int]]:
    """For every set that shares a host with an earlier one: its index -> the earlier
    indices, ascending. One sort and sweep over all intervals (n log n plus the pairs
    found), where comparing every set with every earlier one is quadratic."""
    by_key: dict[Key, list[tuple[int, int, int]]] = {}
    for i, s in enumerate(sets):
        for key, ivs in s._iv.items():
            by_key.setdefault(key, []).extend((lo, hi, i) for lo, hi in ivs)
    pairs: dict[int, set[int]] = {}
    for spans in by_key.values():
        if len(spans) < 2:
            continue
        spans.sort()
        active: list[tuple[int, int]] = []     # heap of (hi, set index)
        for lo, hi, i in spans:
            while active and active[0][0] < lo:
                heapq.heappop(active)
            for _, j in active:                 # every one left overlaps [lo, hi]
                if j != i:
                    pairs.setdefault(max(i, j), set()).add(min(i, j))
            heapq.heappush(active, (hi, i))
    return {i: sorted(js) for i, js in pairs.items()}
