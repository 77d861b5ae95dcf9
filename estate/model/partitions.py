"""Slurm partitions with their members, parsed once with one error policy.

A partition whose node list does not parse has no members here; the validator
nodes.bad_hostlist reports the expression at its spec path, so nobody else has to.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.hostset import HostSet
from estate.spec.model import Partition as PartitionSpec


@dataclass(frozen=True)
class Partition:
    index: int                 # into spec.slurm.partitions
    spec: PartitionSpec
    members: HostSet           # empty when the expression does not parse
    parsed: bool

    @property
    def name(self) -> str:
        return self.spec.name


def partition(index: int, spec: PartitionSpec) -> Partition:
    try:
        return Partition(index, spec, HostSet.of(Hostlist.parse(spec.nodes)), True)
    except HostlistError:
        return Partition(index, spec, HostSet.of([]), False)
