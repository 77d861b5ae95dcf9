"""Helpers shared by the spec validators: host sets per estate, paths, lookups."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable, Hashable, Iterable, Iterator, TypeVar

from estate.check.registry import Problem
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.hostset import HostSet, overlapping, union  # noqa: F401  (re-exported)
from estate.spec.load import spec_path

# --- facts about the estate, computed once per Estate --------------------------

@lru_cache(maxsize=8)
def group_sets(estate) -> list[HostSet]:
    return [HostSet.of(hl) for hl in estate.group_hosts]


def hosts_where(estate, pred: Callable) -> HostSet:
    return union(s for g, s in zip(estate.spec.nodes, group_sets(estate)) if pred(g))


@lru_cache(maxsize=8192)
def hostset(expr: str | None) -> HostSet:
    """The hosts of an expression; empty when it does not parse (nodes.bad_hostlist says so)."""
    return HostSet.of(parse_hosts(expr) or [])


@lru_cache(maxsize=8)
def all_hosts(estate) -> HostSet:
    return union(group_sets(estate))


def groups_touching(estate, hosts: HostSet) -> Iterator[tuple[int, HostSet]]:
    """(group index, the part of hosts in that group) for every group hosts touch."""
    for gi, s in enumerate(group_sets(estate)):
        part = s & hosts
        if part:
            yield gi, part


@lru_cache(maxsize=8192)
def parse_hosts(expr: str | None) -> Hostlist | None:
    """A hostlist, or None when Slurm would reject the expression (cached: several
    validators read the same expressions, and Hostlist is immutable)."""
    try:
        return Hostlist.parse(expr or "")
    except HostlistError:
        return None


def hostlist_error(expr: str | None) -> str:
    """Why an expression does not parse (for the message), or '' when it does."""
    try:
        Hostlist.parse(expr or "")
    except HostlistError as exc:
        return str(exc)
    return ""


def short(hosts: HostSet | Hostlist, limit: int = 80) -> str:
    """The hosts' string, cut to limit characters; only the ranges it can show are
    formatted (each takes a character at least)."""
    if isinstance(hosts, HostSet):
        shown, more = hosts.head(limit)
    else:
        shown, more = Hostlist(hosts.ranges[:limit]), len(hosts.ranges) > limit
    text = str(shown)
    return text if len(text) <= limit and not more else text[: limit - 3] + "..."


# --- problems ------------------------------------------------------------------

def problem(loc: tuple, message: str, hint: str = "") -> Problem:
    """A Problem whose path is built from loc, so names containing '.' still locate."""
    return Problem(spec_path(loc), message, hint, tuple(loc))


T = TypeVar("T")


def duplicates(items: Iterable[T], key: Callable[[T], Hashable]) -> Iterator[tuple[int, T, int]]:
    """(index, item, index of the first item with the same key) for every repeat."""
    first: dict = {}
    for i, item in enumerate(items):
        k = key(item)
        if k is None:
            continue
        if k in first:
            yield i, item, first[k]
        else:
            first[k] = i


def group_index(estate, name: str) -> int | None:
    """The first group holding a host name, found on ranges (no expansion)."""
    one = HostSet.names([name])
    return next((gi for gi, s in enumerate(group_sets(estate)) if s & one), None)


def group_of(estate, name: str):
    gi = group_index(estate, name)
    return None if gi is None else estate.spec.nodes[gi]
