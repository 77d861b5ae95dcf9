"""`estate diff`: what a spec change does, before it is applied.

Both sides are rendered (the old spec, or the tree last applied: a directory with
MANIFEST.json), and compared artifact by artifact. A changed Slurm file (slurm.conf,
gres.conf, topology.conf, cgroup.conf) is read key by key: each changed key's class comes
from the update policy of the spec's Slurm release (estate.model.update_policy, taken from
SchedMD's manuals), and becomes an action on each node by what runs there (per_node:
CTLD_PART and SLURMD_PART).
Every other artifact's change needs the action of estate.model.update_policy
ARTIFACT_ACTIONS on the nodes that install it.

The work grows with the change, not with the estate: lines equal on both sides are set
aside with set operations before anything is parsed, so a 10,000-node slurm.conf with one
changed node group parses that group's lines only (bench/bench_diff.py). The two renders
run on two cores (estate.fork) and the spec validators do not run: `estate check` does
that, and `estate apply` refuses a spec with errors.
"""
from __future__ import annotations

import difflib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from estate.model import update_policy as up
from estate.model.slurm_files import CONFS, Conf, fields as _fields, lines as _lines, \
    records as _records
from estate.model.update_policy import CTLD_PART, SLURMD_PART
from estate.operate.diff.order import KEEP_UP, Step, apply_order
from estate.operate.diff.sides import NONE, File, Roles, Side, both_sides, new_side_split, \
    read_tree
from estate.spec.hostlist import Hostlist, HostlistError, hostlist_of


# --- what changed ----------------------------------------------------------------------

@dataclass
class Effect:
    """One reason a node needs something: a Slurm class (cls) on the nodes of scope (None:
    every Slurm node), or a direct action on scope's nodes."""
    artifact: str
    key: str
    why: str
    cls: str | None = None
    action: str | None = None
    scope: Hostlist | None = None
    service: str = ""

    def label(self) -> str:
        name = self.artifact.rsplit("/", 1)[-1]
        key = self.key[len(name) + 1:] if self.key.startswith(name + ":") else self.key
        return f"{name} {key}"


@dataclass
class Change:
    path: str
    status: str                    # changed | added | removed
    consumers: Hostlist
    old: File | None
    new: File | None
    effects: list[Effect] = field(default_factory=list)

    def unified(self, context: int = 3) -> str:
        a = self.old.bytes().decode(errors="replace") if self.old else ""
        b = self.new.bytes().decode(errors="replace") if self.new else ""
        return unified_diff(a, b, f"a/{self.path}", f"b/{self.path}", context)


def unified_diff(a: str, b: str, name_a: str, name_b: str, context: int = 3) -> str:
    """difflib's unified diff of what lies between the common first and last lines: a
    10,000-line hosts file with one changed group is compared on that group's lines."""
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    head = 0
    while head < min(len(la), len(lb)) and la[head] == lb[head]:
        head += 1
    tail = 0
    while tail < min(len(la), len(lb)) - head and la[-1 - tail] == lb[-1 - tail]:
        tail += 1
    start = max(0, head - context)
    ea, eb = len(la) - max(0, tail - context), len(lb) - max(0, tail - context)
    out = list(difflib.unified_diff(la[start:ea], lb[start:eb], name_a, name_b, n=context))
    hunk = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")

    def shift(line: str) -> str:
        m = hunk.match(line)
        if not m:
            return line if line.endswith("\n") else line + "\n"
        return (f"@@ -{int(m.group(1)) + start}{m.group(2) or ''} "
                f"+{int(m.group(3)) + start}{m.group(4) or ''} @@\n")
    return "".join(map(shift, out))


def changes(old: Side, new: Side) -> list[Change]:
    out = []
    for path in sorted(set(old.files) | set(new.files)):
        a, b = old.files.get(path), new.files.get(path)
        if a and b:
            # a manifest's side has hashes and reads a file only where they differ; two
            # rendered sides compare bytes (memcmp, no hashing of 3.6 MB twice)
            if a.content is None or b.content is None:
                same = a.digest() == b.digest()
            else:
                same = a.content == b.content
            if same and (a.mode, a.owner) == (b.mode, b.owner):
                continue
            status = "changed"
        else:
            status = "added" if b else "removed"
        consumers = union(x.consumers for x in (a, b) if x)
        out.append(Change(path, status, consumers, a, b))
    return out


def union(lists) -> Hostlist:
    """The hosts of several hostlists, each once (in first-seen order)."""
    lists = [hl for hl in lists if hl]
    if len(lists) <= 1 or all(hl == lists[0] for hl in lists):
        return lists[0] if lists else NONE
    return hostlist_of(dict.fromkeys(n for hl in lists for n in hl.names()))


# --- Slurm files, key by key: estate.model.slurm_files ----------------------------------

def conf_effects(change: Change, version: str) -> list[Effect]:
    """The effects of one Slurm file's change: only the lines that differ are parsed."""
    conf = CONFS[change.path]
    a = _lines(change.old.bytes()) if change.old else []
    b = _lines(change.new.bytes()) if change.new else []
    sa, sb = set(a), set(b)
    removed, added = [l for l in a if l not in sb], [l for l in b if l not in sa]
    if not removed and not added:   # comments or file mode only: a reinstall
        return [Effect(change.path, "(comments)", "only comments or the mode changed: "
                       "installed again, nothing restarts", action="file",
                       scope=change.consumers)]
    ids: dict[tuple, int] = {}   # a line's fields -> one number, shared by both sides
    old_rec, old_nodes, old_plain = _records(removed, conf, ids)
    new_rec, new_nodes, new_plain = _records(added, conf, ids)
    fields_of = list(ids)
    out = []
    for key in sorted(set(old_plain) | set(new_plain), key=str.lower):
        if old_plain.get(key) != new_plain.get(key):
            out.append(_classified(change.path, conf.prefix + key, version, None))
    for (kind, ident) in sorted(set(old_rec) | set(new_rec)):
        out += _record_effects(change.path, conf, kind, ident, old_rec.get((kind, ident)),
                               new_rec.get((kind, ident)), version)
    for kind in sorted(conf.per_node):
        out += _node_effects(change.path, conf, kind, old_nodes.get(kind),
                             new_nodes.get(kind), version, fields_of)
    # lines regrouped (a NodeName line split in two), every node's values the same
    return out or [Effect(change.path, "(regrouped)", "the same values on other lines: "
                          "installed again, nothing restarts", action="file",
                          scope=change.consumers)]


def _record_effects(path, conf, kind, ident, old, new, version) -> list[Effect]:
    """A partition, node set or switch line: its fields that differ, or the line added
    or removed (the line kind's own rule)."""
    if old is None or new is None:
        e = _classified(path, conf.line_key(kind), version, None)
        e.key = f"{'+' if old is None else '-'}{kind} {ident}"
        return [e]
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return [_classified(path, conf.key(kind, k), version, None, ident) for k in keys]


def _node_effects(path, conf, kind, old: dict | None, new: dict | None, version,
                  fields_of: list[tuple]) -> list[Effect]:
    """Nodes whose lines changed, grouped by what changed for them: one effect per key
    over all the nodes it changed for; nodes that only moved to another line (a group's
    line split in two) are left out. Records are (fields numbers, address), so the nodes
    that differ are found by one set operation on the two dicts' items at C speed, and
    only they are visited: the work in Python grows with the change."""
    old, new = old or {}, new or {}
    changed = sorted({n for n, _ in old.items() ^ new.items()}, key=_natural)

    def fields(r):
        return r and (tuple(fields_of[f] for f in r[0]), r[1])
    olds = {n: fields(old.get(n)) for n in changed}
    news = {n: fields(new.get(n)) for n in changed}
    groups: dict[tuple, list[str]] = {}
    for name in changed:
        o, n = olds.get(name), news.get(name)
        groups.setdefault((o and o[0], n and n[0], (o or n)[1] != (n or o)[1],
                           o is None, n is None), []).append(name)
    out: list[Effect] = []
    by_key: dict[tuple, list[str]] = {}
    for (fo, fn, addr, added, removed), names in groups.items():
        if added or removed:
            by_key.setdefault(("+" if added else "-", ""), []).extend(names)
            continue
        if kind == "node":   # one line each
            a, b = dict(fo[0]), dict(fn[0])
            keys = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
        else:   # gres: the keys whose values differ between the lines that differ
            only_a, only_b = set(fo) - set(fn), set(fn) - set(fo)
            every = sorted({k for line in only_a | only_b for k, _ in line})
            keys = [k for k in every if _values(only_a, k) != _values(only_b, k)] or every
        keys += ["NodeAddr"] if addr else []
        for k in keys:
            by_key.setdefault(("", k), []).extend(names)
    line_key = conf.line_key(kind)
    for (sign, key), names in sorted(by_key.items()):
        scope = hostlist_of(names)
        if sign:
            e = _classified(path, line_key, version, None if kind == "node" else scope)
            e.key = f"{sign}{kind} {scope}"
            out.append(e)
            if kind == "node":   # the nodes themselves: slurmd started there, or drained away
                out.append(Effect(path, e.key, "a new node: install its files, start slurmd"
                                  if sign == "+" else "leaves the cluster: drain it, then "
                                  "stop slurmd", action="restart_slurmd" if sign == "+"
                                  else "drain_restart", scope=scope))
            continue
        out.append(_classified(path, conf.key(kind, key), version, scope))
    return out


def _natural(name: str) -> tuple:
    """gpu9 before gpu10, as Slurm orders a hostlist."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _values(lines, key: str) -> set[str]:
    return {v for line in lines for k, v in line if k == key}


def _classified(path: str, key: str, version: str, scope: Hostlist | None,
                ident: str = "") -> Effect:
    p = up.policy(version, key)
    label = f"{key}" + (f" ({ident})" if ident else "")
    if p is None:
        return Effect(path, label, f"unclassified for Slurm {version}: every daemon "
                      "restarted to be safe (add it to estate/model/update_policy.py)",
                      cls="restart_all", scope=scope)
    return Effect(path, label, f"{p.origin}: {p.why}", cls=p.cls, scope=scope)


def comments_only(c: Change) -> bool:
    """Whether the lines that differ are all comments (`#`, `;`: a header naming another spec
    file), so the file's readers need nothing."""
    if c.old is None or c.new is None:
        return False
    a, b = c.old.bytes().splitlines(), c.new.bytes().splitlines()
    sa, sb = set(a), set(b)
    differ = [l for l in a if l not in sb] + [l for l in b if l not in sa]
    return all(l.lstrip().startswith((b"#", b";")) for l in differ)   # ; in stunnel's


def classify(old: Side, new: Side) -> list[Change]:
    """Every changed artifact with its effects, for the new side's Slurm release."""
    found = changes(old, new)
    version = new.version or old.version
    for c in found:
        if c.path in CONFS:
            c.effects = conf_effects(c, version)
        elif comments_only(c):
            c.effects = [Effect(c.path, "(comments)", "only comments or the mode changed: "
                                "installed again, nothing restarts", action="file",
                                scope=c.consumers)]
        else:
            action, service = up.artifact_action(c.path)
            c.effects = [Effect(c.path, "(file)", f"{c.status}; installed by its consumers"
                                + (f", then {service} restarts" if service else ""),
                                action=action, scope=c.consumers, service=service)]
    if old.version and new.version and old.version != new.version:
        found.append(Change("(slurm release)", "changed", NONE, None, None, [Effect(
            "(slurm release)", f"{old.version} -> {new.version}", "a release change: the "
            "packages are upgraded and every daemon restarted (slurmdbd first)",
            cls="restart_all_drain")]))
    return found


# --- per node ----------------------------------------------------------------------------

@dataclass
class NodeRow:
    hosts: Hostlist
    action: str
    because: list[str]


def per_node(found: list[Change], old: Side, new: Side) -> list[NodeRow]:
    """Nodes grouped by the strongest action they need and why. Each effect hands its
    action to sets of names (controllers, the workers in and out of its scope, the other
    nodes that install the file); a node's contributions are then grouped as tuples, so
    10,000 nodes cost dict appends, not a membership test per node and effect."""
    roles = Roles(*(union([getattr(old.roles, r), getattr(new.roles, r)])
                    for r in ("controllers", "slurmd", "login")))
    ctld_names, slurmd_names = roles.controllers.names(), roles.slurmd.names()
    daemons = set(ctld_names) | set(slurmd_names)
    contrib: dict[str, list] = {}

    def give(names, action: str, labels: tuple) -> None:
        item = (action, labels)
        for n in names:
            held = contrib.get(n)
            if held is None:
                contrib[n] = [item]
            else:
                held.append(item)

    # effects of one class over the same nodes are given once, with all their labels
    # (a changed partition's four settings are one pass over 10,000 workers, not four)
    alike: dict[tuple, list[str]] = {}
    for c in found:
        for e in c.effects:
            scope = e.scope if e.scope is not None else (c.consumers if e.action else None)
            if e.cls and SLURMD_PART[e.cls] == "reconfigure":
                scope = None   # inside or outside its nodes, a worker reconfigures
            alike.setdefault((e.cls, e.action, scope, c.consumers if e.cls else None),
                             []).append(e.label())
    for (cls, action, scope, installs), label_list in alike.items():
        labels = tuple(label_list)
        if action:
            give(scope.names(), action, labels)
            continue
        give(ctld_names, CTLD_PART[cls], labels)
        if scope is None:
            give(slurmd_names, SLURMD_PART[cls], labels)
        else:
            inside = set(scope.names())
            give([n for n in slurmd_names if n in inside], SLURMD_PART[cls], labels)
            give([n for n in slurmd_names if n not in inside], "reconfigure", labels)
        give([n for n in installs.names() if n not in daemons], "file", labels)
    groups: dict[tuple, list[str]] = {}
    for n, held_items in contrib.items():
        groups.setdefault(tuple(held_items), []).append(n)
    merged: dict[tuple, list[str]] = {}
    for items, alike_names in groups.items():
        best = up.strongest(a for a, _ in items)
        because = tuple(dict.fromkeys(w for a, ws in items if a == best for w in ws))
        merged.setdefault((best, because), []).extend(alike_names)
    # names in the order the roles' hostlists give them: ranges again, no sort
    rows = [NodeRow(hostlist_of(n), a, list(w)) for (a, w), n in merged.items()]
    return sorted(rows, key=lambda r: (-up.rank(r.action), str(r.hosts)))





def worker_batches(spec: Path, last: Path, keep_up: float = KEEP_UP,
                   warn=print, built: Side | None = None) -> list[list[str]] | None:
    """The workers that restart, in apply_order's batches, from the spec (or `built`, the
    side estate apply already rendered) against the tree last applied at `last` (`estate
    apply -o DIR`'s, or the Pulumi stack's record); None where there is none (a first
    apply restarts nothing that runs) or it cannot be read."""
    from estate.render.artifacts import MANIFEST
    if not (last / MANIFEST).is_file():
        return None
    try:
        if built is None:
            report = diff(spec, against=last, keep_up=keep_up)
        else:
            report = against_tree(built, last)
            report.keep_up = keep_up
    except (OSError, ValueError, KeyError) as exc:   # a tree an older Estate wrote, say
        warn(f"no apply order: cannot diff {spec} against {last} ({exc}); the workers run "
             "at once")
        return None
    if not (report.old.ok and report.new.ok):
        return None   # the render that follows says why
    return [list(st.hosts.names()) for st in report.steps() if st.batch]


# --- the running work --------------------------------------------------------------------

@dataclass
class Jobs:
    running: int
    touched: int
    at_risk: int     # on nodes that are drained or restarted
    error: str = ""


def running_jobs(scontrol: str, rows: list[NodeRow], found: list[Change],
                 timeout: float = 20) -> Jobs:
    """squeue (beside scontrol) on the live cluster: running jobs, those on a node or in a
    partition the change touches, and those on nodes whose slurmd restarts or drains."""
    squeue = str(Path(scontrol).with_name("squeue"))
    try:
        ping = subprocess.run([scontrol, "ping"], capture_output=True, text=True,
                              timeout=timeout)
        out = subprocess.run([squeue, "-h", "-t", "R", "-o", "%i|%P|%N"], capture_output=True,
                             text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Jobs(0, 0, 0, f"{scontrol}: {exc}")
    if out.returncode != 0:
        return Jobs(0, 0, 0, (out.stderr or ping.stderr or ping.stdout).strip()[:300])
    touched_nodes = Hostlist(r for row in rows if row.action not in ("nothing", "file")
                             for r in row.hosts.ranges)
    risky = Hostlist(r for row in rows if row.action in ("restart_slurmd", "drain_restart")
                     for r in row.hosts.ranges)
    changed_parts = {e.key.split("(")[-1].rstrip(")") for c in found for e in c.effects
                     if e.key.startswith("partition:") and "(" in e.key}
    changed_parts |= {e.key.split(" ", 1)[1] for c in found for e in c.effects
                      if e.key[:10] in ("+partition", "-partition")}
    running = touched = at_risk = 0
    for line in out.stdout.splitlines():
        if line.count("|") < 2:
            continue
        _, partition, nodes = line.split("|", 2)
        running += 1
        try:
            names = Hostlist.parse(nodes).names()
        except HostlistError:
            names = ()
        on_risky = any(n in risky for n in names)
        at_risk += on_risky
        touched += on_risky or partition in changed_parts or any(n in touched_nodes
                                                                for n in names)
    return Jobs(running, touched, at_risk)


# --- the whole report ---------------------------------------------------------------------

@dataclass
class DiffReport:
    old: Side
    new: Side
    changes: list[Change]
    nodes: list[NodeRow]
    jobs: Jobs | None = None

    keep_up: float = KEEP_UP

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def steps(self) -> list[Step]:
        return apply_order(self.nodes, {**self.old.partitions, **self.new.partitions},
                           self.keep_up)

    def as_dict(self, with_diff: bool = True) -> dict:
        return {
            "old": self.old.label, "new": self.new.label, "slurm": self.new.version,
            "artifacts": [{
                "path": c.path, "status": c.status, "consumers": str(c.consumers),
                "effects": [{"key": e.key, "class": e.cls, "action": e.action,
                             "nodes": None if e.scope is None else str(e.scope),
                             "service": e.service or None, "why": e.why} for e in c.effects],
                **({"diff": c.unified()} if with_diff and c.old is not c.new and
                   c.path != "(slurm release)" else {}),
            } for c in self.changes],
            "nodes": [{"hosts": str(r.hosts), "count": len(r.hosts), "action": r.action,
                       "says": up.SAY[r.action], "because": r.because} for r in self.nodes],
            "steps": [{"action": st.action, "says": up.SAY[st.action], "hosts": str(st.hosts),
                       "count": len(st.hosts), "batch": st.batch or None}
                      for st in self.steps()],
            "jobs": None if self.jobs is None else vars(self.jobs),
        }


def diff(old: Path, new: Path | None = None, against: Path | None = None,
         scontrol: str | None = None, keep_up: float = KEEP_UP) -> DiffReport:
    """OLD NEW (two specs), or NEW --against DIR (the last applied tree)."""
    report = _diff(old, new, against, scontrol)
    report.keep_up = keep_up
    return report


def _diff(old: Path, new: Path | None, against: Path | None, scontrol: str | None) -> DiffReport:
    if against is not None:
        return against_tree(new_side_split(new if new is not None else old), against,
                            scontrol)
    old_side, new_side = both_sides(old, new)
    return _compared(old_side, new_side, scontrol)


def against_tree(new_side: Side, against: Path, scontrol: str | None = None) -> DiffReport:
    """NEW (rendered) against the tree last applied at `against`."""
    old_side = read_tree(against)
    old_side.version = new_side.version
    old_side.roles = new_side.roles
    return _compared(old_side, new_side, scontrol)


def _compared(old_side: Side, new_side: Side, scontrol: str | None) -> DiffReport:
    if not (old_side.ok and new_side.ok):
        return DiffReport(old_side, new_side, [], [])
    found = classify(old_side, new_side)
    rows = per_node(found, old_side, new_side)
    jobs = running_jobs(scontrol, rows, found) if scontrol and found else None
    return DiffReport(old_side, new_side, found, rows, jobs)
