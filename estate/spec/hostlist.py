"""Slurm-compatible hostlists, kept as ranges.

A hostlist is a sequence of ranges ``prefix + [lo..hi] zero-padded to width``.
Expansion and compression follow Slurm's ``src/common/hostlist.c`` so that a
string we write in slurm.conf reads back identically from ``scontrol show
hostlist``. Work stays on ranges; ``expand`` is only called where a per-node
fact is needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Iterator

from estate.spec.bounds import MAX_HOSTS_PER_EXPRESSION

_TRAILING_DIGITS = re.compile(r"^(.*?)([0-9]+)$")


class HostlistError(ValueError):
    """A hostlist expression that Slurm would also reject."""


@dataclass(frozen=True, slots=True)
class Range:
    prefix: str
    lo: int = 0
    hi: int = 0
    width: int = 0
    single: bool = False  # a name without a numeric suffix: prefix is the whole name

    def __len__(self) -> int:
        return 1 if self.single else self.hi - self.lo + 1

    def __iter__(self) -> Iterator[str]:
        return iter(_range_names(self))

    def numstr(self) -> str:
        if self.lo == self.hi:
            return f"{self.lo:0{self.width}d}"
        return f"{self.lo:0{self.width}d}-{self.hi:0{self.width}d}"


# Expanded ranges, shared by every hostlist that names them (a node group, its partitions,
# mounts and flows name the same range: at 10,000 nodes 70,000 names were expanded, 20,000
# of them distinct). Bounded by the names held, not by entries: a long-lived process (the
# Pulumi host, a test run, the fuzz tier) checks many specs.
_EXPANDED: dict[Range, tuple[str, ...]] = {}
_EXPANDED_MAX_NAMES = MAX_HOSTS_PER_EXPRESSION
_expanded_names = 0


def _range_names(r: Range) -> tuple[str, ...]:
    global _expanded_names
    names = _EXPANDED.get(r)
    if names is None:
        if r.single:
            return (r.prefix,)
        # %-formatting in a comprehension: 2.5x a generator of f-strings
        pattern = f"{r.prefix.replace('%', '%%')}%0{r.width}d"
        names = tuple([pattern % n for n in range(r.lo, r.hi + 1)])
        if _expanded_names + len(names) > _EXPANDED_MAX_NAMES:
            _EXPANDED.clear()
            _expanded_names = 0
        _EXPANDED[r] = names
        _expanded_names += len(names)
    return names


# Slurm's hostlist_create separates terms with commas, spaces and tabs.
_SEPARATORS = ",\t "
_NUMBER = re.compile(r"[0-9]+")
MAX_RANGE = 64 * 1024  # hosts in one bracket range; Slurm rejects larger ones


def _split_top_level(expr: str) -> list[str]:
    """Split on separators that are not inside brackets.

    Stricter than Slurm on purpose: stray or nested brackets are an error here,
    where Slurm would take them as part of a host name.
    """
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
        elif ch in _SEPARATORS and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    parts.append(expr[start:])
    return [p for p in parts if p]


def _parse_bracket(body: str, whole: str) -> list[tuple[int, int, int]]:
    """'1-3,07' -> [(1, 3, 1), (7, 7, 2)]: the width is the length of the low bound."""
    out = []
    for item in body.split(","):
        lo_s, dash, hi_s = item.partition("-")
        if not _NUMBER.fullmatch(lo_s) or (dash and not _NUMBER.fullmatch(hi_s)):
            raise HostlistError(f"bad range {item!r} in {whole!r}"
                                + (": the range has no high bound" if dash and not hi_s else ""))
        lo, hi = int(lo_s), int(hi_s or lo_s)
        if hi < lo:
            raise HostlistError(f"descending range {item!r} in {whole!r}")
        if hi - lo + 1 > MAX_RANGE:
            raise HostlistError(f"range {item!r} in {whole!r} has more than {MAX_RANGE} hosts")
        out.append((lo, hi, len(lo_s)))
    return out


def _term_size(term: str) -> int:
    """How many names a term expands to, from its bracket sizes alone (nothing expanded)."""
    size, rest = 1, term
    while (open_at := rest.find("[")) >= 0:
        close_at = rest.find("]", open_at)
        if close_at < 0:
            raise HostlistError(f"unbalanced '[' in {term!r}")
        size *= sum(hi - lo + 1 for lo, hi, _ in _parse_bracket(rest[open_at + 1:close_at],
                                                                  term))
        rest = rest[close_at + 1:]
    return size


def measure(expr: str) -> tuple[int, int]:
    """(hosts, ranges) an expression parses into, from its brackets alone: nothing is
    built, so a limit can be checked before the work it bounds. (0, 0) if it does not parse."""
    hosts = ranges = 0
    try:
        for term in _split_top_level(expr.strip()):
            hosts += _term_size(term)
            open_at = term.rfind("[")
            if open_at < 0:
                ranges += 1
                continue
            items = term[open_at + 1:].rstrip("]").count(",") + 1
            ranges += items * (_term_size(term[:open_at]) if "[" in term[:open_at] else 1)
    except HostlistError:
        return 0, 0
    if hosts > MAX_HOSTS_PER_EXPRESSION:   # parse refuses it: nodes.bad_hostlist says so
        return 0, 0
    return hosts, ranges


def _parse_term(term: str) -> list[Range]:
    """One separator-free term. As in Slurm, the last bracket group holds the ranges
    and must end the term ('n[1-2]x' is an error); earlier groups expand into
    prefixes ('rack[1-2]-n[1-4]')."""
    open_at = term.rfind("[")
    if open_at < 0:
        return [_single(term)]
    close_at = term.index("]", open_at)
    if close_at != len(term) - 1:
        raise HostlistError(f"text after the last ']' in {term!r}: Slurm allows text only "
                            f"between bracket groups, e.g. rack[1-2]-n[1-4]")
    ranges = _parse_bracket(term[open_at + 1:close_at], term)
    return [Range(prefix, lo, hi, w) for prefix in _prefixes(term[:open_at], term)
            for lo, hi, w in ranges]


def _prefixes(prefix: str, whole: str) -> list[str]:
    """Expand bracket groups inside a prefix in Slurm's order: its last group is
    the outer loop (a[1-2]b[3-4]c[5-6] gives a1b3c5, a1b3c6, a2b3c5, ...)."""
    open_at = prefix.rfind("[")
    if open_at < 0:
        return [prefix]
    close_at = prefix.index("]", open_at)
    head, tail = prefix[:open_at], prefix[close_at + 1:]
    return [p for lo, hi, w in _parse_bracket(prefix[open_at + 1:close_at], whole)
            for n in range(lo, hi + 1) for p in _prefixes(f"{head}{n:0{w}d}{tail}", whole)]


def _single(name: str) -> Range:
    m = _TRAILING_DIGITS.match(name)
    if not m:
        return Range(name, single=True)
    digits = m.group(2)
    return Range(m.group(1), int(digits), int(digits), len(digits))


def _padding(n: int, width: int) -> int:
    return max(width - len(str(n)), 0)


def _width_equiv(a: Range, b: Range) -> bool:
    """Slurm's _width_equiv: widths are compatible if formatting both numbers with
    either width changes the zero padding of at most one of them (9 and 10 join;
    8 and 09 do not)."""
    if a.width == b.width:
        return True
    return (_padding(a.lo, a.width) == _padding(a.lo, b.width)
            or _padding(b.lo, b.width) == _padding(b.lo, a.width))


def _joinable(a: Range, b: Range) -> bool:
    """b directly continues a (same prefix, compatible widths, next number)."""
    return (not a.single and not b.single and a.prefix == b.prefix
            and b.lo == a.hi + 1 and _width_equiv(a, b))


def _range_has(r: Range, name: str) -> bool:
    if r.single:
        return r.prefix == name
    digits = name[len(r.prefix):]
    if not name.startswith(r.prefix) or not digits.isdigit():
        return False
    n = int(digits)
    # the exact string Slurm would produce for n, padding included
    return r.lo <= n <= r.hi and len(digits) == max(r.width, len(str(n)))


class Hostlist:
    """An ordered list of host ranges, with Slurm's string forms."""

    __slots__ = ("_ranges", "_names")

    def __init__(self, ranges: Iterable[Range] = ()):
        merged: list[Range] = []
        for r in ranges:
            if merged and _joinable(merged[-1], r):
                last = merged[-1]
                merged[-1] = Range(last.prefix, last.lo, r.hi, last.width)
            else:
                merged.append(r)
        self._ranges = tuple(merged)
        self._names: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, expr: str) -> "Hostlist":
        expr = expr.strip()
        if not expr:
            return cls()
        terms = _split_top_level(expr)
        total = sum(_term_size(t) for t in terms)
        if total > MAX_HOSTS_PER_EXPRESSION:
            raise HostlistError(f"{expr[:60]!r} expands to {total} hosts, more than the limit "
                                f"of {MAX_HOSTS_PER_EXPRESSION} (MAX_HOSTS_PER_EXPRESSION)")
        ranges: list[Range] = []
        for term in terms:
            ranges.extend(_parse_term(term))
        return cls(ranges)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> "Hostlist":
        return cls(_single(n) for n in names)

    @property
    def ranges(self) -> tuple[Range, ...]:
        return self._ranges

    def __len__(self) -> int:
        return sum(len(r) for r in self._ranges)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> tuple[str, ...]:
        """The names in order, expanded once: a rack's hostlist is walked by the resolved
        nodes, the hosts file and every artifact that targets it."""
        if self._names is None:
            ranges = self._ranges
            self._names = (_range_names(ranges[0]) if len(ranges) == 1 else
                           tuple(chain.from_iterable(map(_range_names, ranges))))
        return self._names

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __reduce__(self):
        """Pickled as its ranges: the names are a cache, expanded again where they are
        read (a forked check's result carries 58 artifacts' consumers; with their names,
        10,000 strings, pickling them cost 1.4 ms and unpickling 1.0 ms on its path)."""
        return (Hostlist, (self._ranges,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hostlist) and self._ranges == other._ranges

    def __hash__(self) -> int:
        return hash(self._ranges)

    def __repr__(self) -> str:
        return f"Hostlist({str(self)!r})"

    def __contains__(self, name: object) -> bool:
        """Membership by range arithmetic: no expansion, cheap on 10,000 nodes."""
        return isinstance(name, str) and any(_range_has(r, name) for r in self._ranges)

    def expand(self) -> list[str]:
        return list(self.names())

    def sorted(self) -> "Hostlist":
        """Sorted and de-duplicated, like Slurm's hostlist_uniq."""
        singles = sorted({r.prefix for r in self._ranges if r.single})
        numbered: dict[tuple[str, int], set[int]] = {}
        for r in self._ranges:
            if not r.single:
                numbered.setdefault((r.prefix, r.width), set()).update(range(r.lo, r.hi + 1))
        out = [Range(s, single=True) for s in singles]
        for (prefix, width), nums in sorted(numbered.items()):
            out.extend(Range(prefix, n, n, width) for n in sorted(nums))
        return Hostlist(out)

    def __str__(self) -> str:
        """Slurm's ranged string: consecutive ranges sharing a prefix share brackets."""
        parts: list[str] = []
        rs = self._ranges
        i = 0
        while i < len(rs):
            r = rs[i]
            if r.single:
                parts.append(r.prefix)
                i += 1
                continue
            j = i + 1
            while j < len(rs) and not rs[j].single and rs[j].prefix == r.prefix:
                j += 1
            group = rs[i:j]
            if len(group) == 1 and r.lo == r.hi:
                parts.append(f"{r.prefix}{r.numstr()}")
            else:
                parts.append(f"{r.prefix}[{','.join(g.numstr() for g in group)}]")
            i = j
        return ",".join(parts)


def expand(expr: str) -> list[str]:
    return Hostlist.parse(expr).expand()


def compress(names: Iterable[str]) -> str:
    return str(Hostlist.from_names(names))


_NAME = re.compile(r"^([^\n]*?)([0-9]*)$", re.M)


def hostlist_of(names) -> Hostlist:
    """Hostlist.from_names for many names (a 10,000-node row of the report): one regex
    over the joined names splits them, runs of one prefix and width become one range,
    and Hostlist joins the rest as from_names would (10,000 Range objects took 25 ms)."""
    names = list(names)
    if len(names) < 64:
        return Hostlist.from_names(names)
    ranges: list[Range] = []
    prefix, lo, hi, width = None, 0, -2, 0
    for p, digits in _NAME.findall("\n".join(names)):
        if not p and not digits:
            continue   # findall's empty match at a line's end
        if not digits:
            if prefix is not None:
                ranges.append(Range(prefix, lo, hi, width))
                prefix = None
            ranges.append(Range(p, single=True))
            continue
        n = int(digits)
        if p == prefix and n == hi + 1 and len(digits) == width:
            hi = n
            continue
        if prefix is not None:
            ranges.append(Range(prefix, lo, hi, width))
        prefix, lo, hi, width = p, n, n, len(digits)
    if prefix is not None:
        ranges.append(Range(prefix, lo, hi, width))
    return Hostlist(ranges)
