"""The order `estate apply` follows for a diff's actions: every node's files, then the
actions by ORDER, the workers that restart in batches that keep each partition up
(KEEP_UP). The Pulumi program orders its node steps by the same batches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from estate.spec.hostlist import Hostlist, hostlist_of


class NodeRow(Protocol):
    """A row of the diff's per-node table (estate.operate.diff.logic.NodeRow)."""
    hosts: Hostlist
    action: str

KEEP_UP = 0.75   # the share of each partition's nodes kept up while workers restart
# What runs when, after the files are installed everywhere: controllers before workers,
# the one cluster-wide reconfigure before the workers that restart (their slurmd then
# reads the new configuration from slurmctld), Kubernetes last.
ORDER = ("file", "restart_service", "restart_slurmctld", "reconfigure", "restart_slurmd",
         "drain_restart", "k8s_rollout", "node_rejoin")
BATCHED = ("restart_slurmd", "drain_restart")


@dataclass
class Step:
    action: str
    hosts: Hostlist
    batch: int = 0     # 1, 2, ... for workers restarted in batches


def apply_order(rows: Sequence[NodeRow], partitions: dict[str, Hostlist],
                keep_up: float = KEEP_UP) -> list[Step]:
    """The order `estate apply` should follow: every node's files; then by ORDER, with
    the workers that restart or drain in batches, each batch holding at most
    1 - keep_up of any partition's nodes (at least one node: a partition of one goes
    down for its restart). A node is placed in the first batch with room in all its
    partitions, so batches stay few (four at 0.75)."""
    by = {a: [n for row in rows if row.action == a for n in row.hosts.names()] for a in ORDER}
    out = []
    for action in ORDER:
        names = by[action]
        if not names:
            continue
        if action not in BATCHED:
            out.append(Step(action, hostlist_of(names)))
            continue
        for i, batch in enumerate(batches(names, partitions, keep_up), 1):
            out.append(Step(action, hostlist_of(batch), i))
    return out


def batches(names: list[str], partitions: dict[str, Hostlist],
            keep_up: float) -> list[list[str]]:
    budget = {p: max(1, int(len(hl) * (1 - keep_up))) for p, hl in partitions.items()}
    member: dict[str, list[str]] = {}
    wanted = set(names)
    for p, hl in partitions.items():
        for n in hl.names():
            if n in wanted:
                member.setdefault(n, []).append(p)
    out: list[list[str]] = []
    used: list[dict[str, int]] = []
    for n in names:
        parts = member.get(n, ())
        for batch, count in zip(out, used):
            if all(count.get(p, 0) < budget[p] for p in parts):
                break
        else:
            batch, count = [], {}
            out.append(batch)
            used.append(count)
        batch.append(n)
        for p in parts:
            count[p] = count.get(p, 0) + 1
    return out
