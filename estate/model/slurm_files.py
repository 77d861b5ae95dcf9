"""Estate's own Slurm files read back key by key (slurm.conf, gres.conf, topology.conf,
cgroup.conf), and what of them a worker's slurmd must restart for.

Two readers share it: `estate diff` (estate.operate.diff.logic: the lines that differ between two trees,
each key classed by the release's update policy) and the render's slurmd restart facts
(slurmd_restart_facts: per worker, the settings whose change its slurmd restarts for). A
configless worker installs none of these files: it fetches them from slurmctld, so without
the facts a restart-class change (a node's cores on 22.05, a new node) changed nothing the
worker consumes, and neither `estate apply` nor the Pulumi program restarted its slurmd
where `estate diff` said it must.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat

from estate.model import update_policy as up
from estate.spec.hostlist import Hostlist, HostlistError, hostlist_of


@dataclass(frozen=True)
class Conf:
    """How to read one Slurm file: its policy key prefix, the line kinds that make records
    (first key, lowercase -> kind) and which kinds name nodes (NodeName hostlists)."""
    prefix: str
    records: dict
    per_node: frozenset = frozenset()

    def key(self, kind: str, field: str) -> str:
        """A record's field as the update policy names it: node:RealMemory,
        gres.conf:File."""
        return f"{kind}:{field}" if not self.prefix else self.prefix + field

    def line_key(self, kind: str) -> str:
        """A whole line of the kind, added or removed: node, gres.conf:NodeName."""
        return kind if not self.prefix else self.prefix + next(
            k for k, v in self.records.items() if v == kind)


CONFS = {
    "slurm/slurm.conf": Conf("", {"nodename": "node", "partitionname": "partition",
                                  "nodeset": "nodeset"}, frozenset({"node"})),
    "slurm/gres.conf": Conf("gres.conf:", {"nodename": "gres"}, frozenset({"gres"})),
    "slurm/topology.conf": Conf("topology.conf:", {"switchname": "switch",
                                                   "blockname": "block"}),
    "slurm/cgroup.conf": Conf("cgroup.conf:", {}),
}


def lines(data: bytes) -> list[str]:
    return [l.strip() for l in data.decode(errors="replace").splitlines()
            if l.strip() and not l.lstrip().startswith("#")]


def fields(line: str) -> list[tuple[str, str]]:
    pairs = (t.partition("=") for t in line.split())
    return [(key, value) for key, _, value in pairs]


def classified(lines: list[str], conf: Conf, plain: dict[str, list[str]]):
    """(kind, fields) of each line that names a record (NodeName, PartitionName, ...);
    plain `Key=Value` lines go into `plain` as key -> values."""
    for line in lines:
        fs = fields(line)
        kind = conf.records.get(fs[0][0].lower())
        if kind is None:
            key, _, value = line.partition("=")
            plain.setdefault(key.strip(), []).append(value.strip())
        else:
            yield kind, fs


def records(lines: list[str], conf: Conf, ids: dict):
    """Records by (kind, id) -> fields; per-node kinds as kind -> {node: (fields, address)}
    where fields is the line's, shared by its nodes (a changed 10,000-node NodeName line
    is one tuple and a dict built at C speed, not 10,000 dicts); plain `Key=Value` lines
    as key -> values."""
    records: dict[tuple[str, str], dict] = {}
    nodes: dict[str, list[tuple]] = {}
    plain: dict[str, list[str]] = {}
    for kind, fs in classified(lines, conf, plain):
        ident, rest = fs[0][1], fs[1:]
        if kind not in conf.per_node:
            records[(kind, ident)] = dict(rest)
            continue
        try:
            names = Hostlist.parse(ident).names()
        except HostlistError:
            names = (ident,)
        addr = [v for k, v in rest if k == "NodeAddr"]
        shared = tuple(sorted((k, v) for k, v in rest if k != "NodeAddr"))
        addrs = addresses(addr[0]) if addr else repeat("", len(names))
        nodes.setdefault(kind, []).append((names, ids.setdefault(shared, len(ids)), addrs))
    return records, {kind: per_node(kind, lines) for kind, lines in nodes.items()}, plain


def per_node(kind: str, lines: list[tuple]) -> dict[str, tuple]:
    """node -> (the numbers of its lines' fields, its address), built with dict.update
    over zips (C speed). gres names a node on several lines (one per socket, with the
    same hostlist): lines with the same nodes are taken together; only nodes named on
    lines that overlap otherwise take the slow path."""
    out: dict[str, tuple] = {}
    if kind == "node":
        for names, fid, addrs in lines:
            out.update(zip(names, zip(repeat((fid,)), addrs)))
        return out
    together: dict[tuple, tuple] = {}
    for names, fid, _ in lines:
        together[names] = together.get(names, ()) + (fid,)
    for names, fids in together.items():
        out.update(zip(names, repeat((fids, ""))))
    if len(out) == sum(len(names) for names in together):
        return out
    out = {}
    for names, fid, _ in lines:
        for name in names:
            held = out.get(name)
            out[name] = ((held[0] + (fid,)) if held else (fid,), "")
    return out


def addresses(text: str) -> tuple[str, ...]:
    """NodeAddr's list, which Estate writes ranged as hostlists are (10.0.0.[1-4])."""
    try:
        return Hostlist.parse(text).names()
    except HostlistError:
        return tuple(text.split(","))


# --- what a worker's slurmd restarts for -------------------------------------------------

RESTARTS = frozenset({"restart_slurmd", "drain_restart"})   # slurmd's part of a class


@lru_cache(maxsize=4096)
def restarts_slurmd(version: str, key: str) -> bool:
    """Whether a change of `key` restarts slurmd (estate diff's rule: an unclassified key
    restarts every daemon)."""
    p = up.policy(version, key)
    return up.SLURMD_PART[p.cls if p else "restart_all"] in RESTARTS


def slurmd_restart_facts(files: dict[str, bytes], version: str, workers: Hostlist
                         ) -> list[tuple[Hostlist, bytes]]:
    """The workers grouped by the settings of `files` (path -> the bytes rendered) whose
    change restarts their slurmd for Slurm `version`, each group with those settings as
    text: a worker that consumes the text restarts slurmd exactly when one of them
    changes, as estate diff classes the change. Read line by line, not node by node: a
    NodeName line's hostlist is taken whole (2 ms, not 20, at 10,000 nodes)."""
    common: list[str] = []
    per_line: dict[str, list[str]] = {}      # a NodeName hostlist as written -> its facts
    node_idents: list[str] = []
    for path, conf in CONFS.items():
        if path in files:
            _facts_of(path, conf, lines(files[path]), version, common, per_line, node_idents)
    units = _units(per_line, node_idents, workers)
    groups: dict[tuple, list[Hostlist]] = {}
    for unit, hosts in units:
        groups.setdefault(tuple(dict.fromkeys(per_line.get(unit, ()))), []).append(hosts)
    return [(Hostlist([r for h in lists for r in h.ranges]), _text(version, common, list(mine)))
            for mine, lists in groups.items()]


def _units(per_line: dict, node_idents: list[str], workers: Hostlist):
    """(key into per_line, its hosts): the NodeName lines' hostlists where every line of
    per_line names one of them and they are the workers; else each worker by name (a gres
    line that splits a node line's hosts)."""
    if set(per_line) <= set(node_idents):
        units = [(i, Hostlist.parse(i)) for i in node_idents]
        if sum(len(h) for _, h in units) == len(workers):
            return units
    on: dict[str, list[str]] = {}
    for ident in per_line:
        for name in Hostlist.parse(ident).names():
            on.setdefault(name, []).append(ident)
    groups: dict[tuple, list[str]] = {}
    for name in workers.names():
        groups.setdefault(tuple(on.get(name, ())), []).append(name)
    for idents, names in groups.items():   # a name's facts: its lines' together
        per_line["\0".join(idents)] = [f for i in idents for f in per_line[i]]
    return [("\0".join(idents), hostlist_of(names)) for idents, names in groups.items()]


def _facts_of(path: str, conf: Conf, text: list[str], version: str, common: list[str],
              per_line: dict[str, list[str]], node_idents: list[str]) -> None:
    plain: dict[str, list[str]] = {}
    recs: dict[tuple[str, str], dict] = {}
    for kind, fs in classified(text, conf, plain):
        if kind not in conf.per_node:
            recs[(kind, fs[0][1])] = dict(fs[1:])
        else:
            _line_facts(path, conf, kind, fs, version, per_line)
            if kind == "node":
                node_idents.append(fs[0][1])
    common += [f"{path} {conf.prefix}{k}={'|'.join(v)}" for k, v in sorted(plain.items())
               if restarts_slurmd(version, conf.prefix + k)]
    for (kind, ident), values in sorted(recs.items()):
        common += [f"{path} {kind} {ident} {k}={v}" for k, v in sorted(values.items())
                   if restarts_slurmd(version, conf.key(kind, k))]
    # a line added or removed: a node line's rule is every node's (estate diff scopes it
    # to none: the node set, not how it is split in lines), another line's only its own
    for kind in sorted({k for k, _ in recs}):
        if restarts_slurmd(version, conf.line_key(kind)):
            idents = sorted(i for k, i in recs if k == kind)
            common.append(f"{path} {kind} lines={_digest(idents)}")
    if "node" in conf.per_node and restarts_slurmd(version, conf.line_key("node")):
        names = sorted(n for i in node_idents for n in Hostlist.parse(i).names())
        common.append(f"{path} node names={_digest(names)}")


def _line_facts(path: str, conf: Conf, kind: str, fs: list, version: str,
                per_line: dict[str, list[str]]) -> None:
    """A NodeName line's settings that restart slurmd, for its hosts (gres: a line per
    socket, the same hosts). NodeAddr is left out: it is each node's own, so it would make
    a text per node (10,000 files at 10,000 nodes), and taken a line at a time it changed
    for every node of a line split in two (one rack's memory changed: every slurmd
    restarted). estate diff still names the restart an address change needs; apply does
    not make it: a new address is a re-provisioned node."""
    mine = [f"{path} {kind} {k}={v}" for k, v in fs[1:]
            if k != "NodeAddr" and restarts_slurmd(version, conf.key(kind, k))]
    if kind != "node" and restarts_slurmd(version, conf.line_key(kind)):
        mine.append(f"{path} {kind} named")
    per_line.setdefault(fs[0][1], []).extend(mine)


def _digest(items) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def _text(version: str, common: list[str], mine: list[str]) -> bytes:
    head = (f"# Written by Estate: the settings whose change restarts slurmd on this node "
            f"(Slurm {version}'s\n# update policy, estate/model/update_policy.py). slurmd "
            "fetches its configuration from\n# slurmctld; the slurm_worker role restarts it "
            "when this file changes.\n")
    return (head + "".join(f"{l}\n" for l in common + mine)).encode()
