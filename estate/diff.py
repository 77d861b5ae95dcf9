"""`estate diff`: what a spec change does, before it is applied.

Both sides are rendered (the old spec, or the tree last applied: a directory with
MANIFEST.json), and compared artifact by artifact. A changed Slurm file (slurm.conf,
gres.conf, topology.conf, cgroup.conf) is read key by key: each changed key's class comes
from the update policy of the spec's Slurm release (estate.model.update_policy, taken from
SchedMD's manuals), and becomes an action on each node by what runs there (node_action).
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
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from estate import fork
from estate.check.findings import Finding, Severity
from estate.model import update_policy as up
from estate.spec.hostlist import Hostlist, HostlistError

NONE = Hostlist()


# --- one side: a rendered estate ---------------------------------------------------------

@dataclass
class File:
    content: bytes | None          # None: not read yet (a manifest's file, read on demand)
    consumers: Hostlist
    mode: str = "0644"
    owner: str = "root"
    sha256: str = ""
    where: Path | None = None      # the file on disk, for a manifest's side

    def bytes(self) -> bytes:
        if self.content is None:
            self.content = self.where.read_bytes() if self.where else b""
        return self.content


@dataclass
class Roles:
    controllers: Hostlist = NONE
    slurmd: Hostlist = NONE
    login: Hostlist = NONE


@dataclass
class Side:
    label: str
    files: dict[str, File] = field(default_factory=dict)
    version: str = ""
    roles: Roles = field(default_factory=Roles)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings) and \
            bool(self.files or self.version)


def render_side(spec_path: str | Path, source: str | None = None) -> Side:
    """The spec rendered without its validators (the gate only, which bounds rendering);
    source: the name the files' headers carry (the new spec's, so that two spec files
    differ only where their contents do). Never raises on bad input."""
    from estate.check import check_gate, has_errors
    from estate.pipeline import internal_error
    from estate.render import render_all
    from estate.render.templates import RenderError
    from estate.spec.load import load
    from estate.spec.resolved import Estate
    side = Side(str(spec_path))
    try:
        loaded = load(spec_path)
        side.findings = list(loaded.findings)
        if loaded.spec is None:
            return side
        estate = Estate(loaded.spec, loaded.files)
        gate = check_gate(estate, loaded.source.locate)
        side.findings += gate
        if has_errors(gate):
            return side
        try:
            artifacts = render_all(estate, source or str(spec_path))
        except RenderError as exc:
            side.findings.append(Finding("render.unsafe_value", Severity.ERROR, "<root>",
                                         str(exc), "change the spec value the message names"))
            return side
    except Exception as exc:  # noqa: BLE001 - reported as a finding, as build does
        side.findings.append(internal_error(exc, "diff render"))
        return side
    side.files = {p: File(a.content, a.consumers, f"{a.mode:04o}", a.owner, a.sha256)
                  for p, a in artifacts.items()}
    side.version = estate.spec.slurm.version
    side.roles = Roles(Hostlist.from_names(estate.spec.slurm.controllers),
                       estate.role_hosts("slurm_worker"), estate.role_hosts("slurm_login"))
    return side


def read_tree(directory: Path) -> Side:
    """The tree `estate render` (or apply) wrote: MANIFEST.json and its files, read only
    where a hash differs."""
    from estate.render.artifacts import MANIFEST
    side = Side(str(directory))
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        side.findings.append(Finding(
            "diff.no_manifest", Severity.ERROR, "<root>",
            f"{directory / MANIFEST} cannot be read: {exc}",
            f"pass the directory `estate render SPEC --out DIR` wrote (it holds {MANIFEST})"))
        return side
    for path, m in manifest.items():
        try:
            consumers = Hostlist.parse(m.get("consumers", ""))
        except HostlistError:
            consumers = NONE
        side.files[path] = File(None, consumers, m.get("mode", "0644"), m.get("owner", "root"),
                                m.get("sha256", ""), directory / path)
    return side


def both_sides(old: Path, new: Path) -> tuple[Side, Side]:
    """Render both specs, the old one in a forked child where that is usable."""
    from estate.pipeline import debugging
    if fork.usable() and not debugging():
        try:
            child = fork.Forked(lambda: render_side(old, source=str(new)))
        except OSError:
            child = None
        if child is not None:
            try:
                mine = render_side(new)
            except BaseException:
                child.cancel()
                raise
            try:
                return child.join(), mine
            except fork.ChildLost:
                pass
    return render_side(old, source=str(new)), render_side(new)


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
            same = (a.sha256 == b.sha256 if a.sha256 and b.sha256 else a.bytes() == b.bytes())
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
    return Hostlist.from_names(dict.fromkeys(n for hl in lists for n in hl.names()))


# --- Slurm files, key by key ---------------------------------------------------------

@dataclass(frozen=True)
class Conf:
    """How to read one Slurm file: its policy key prefix, the line kinds that make records
    (first key, lowercase -> kind) and which kinds name nodes (NodeName hostlists)."""
    prefix: str
    records: dict
    per_node: frozenset = frozenset()


CONFS = {
    "slurm/slurm.conf": Conf("", {"nodename": "node", "partitionname": "partition",
                                  "nodeset": "nodeset"}, frozenset({"node"})),
    "slurm/gres.conf": Conf("gres.conf:", {"nodename": "gres"}, frozenset({"gres"})),
    "slurm/topology.conf": Conf("topology.conf:", {"switchname": "switch",
                                                   "blockname": "block"}),
    "slurm/cgroup.conf": Conf("cgroup.conf:", {}),
}


def _lines(data: bytes) -> list[str]:
    return [l.strip() for l in data.decode(errors="replace").splitlines()
            if l.strip() and not l.lstrip().startswith("#")]


def _fields(line: str) -> list[tuple[str, str]]:
    return [tuple(t.split("=", 1)) if "=" in t else (t, "") for t in line.split()]


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
    old_rec, old_plain = _records(removed, conf)
    new_rec, new_plain = _records(added, conf)
    out = []
    for key in sorted(set(old_plain) | set(new_plain), key=str.lower):
        if old_plain.get(key) != new_plain.get(key):
            out.append(_classified(change.path, conf.prefix + key, version, None))
    for (kind, ident) in sorted(set(old_rec) | set(new_rec)):
        out += _record_effects(change.path, conf, kind, ident, old_rec.get((kind, ident)),
                               new_rec.get((kind, ident)), version)
    return _merge(out)


def _records(lines: list[str], conf: Conf):
    """(kind, id) -> fields for record lines ((kind, node) for per-node kinds: a node's
    fields, its NodeAddr its own), and key -> values for plain `Key=Value` lines."""
    records: dict[tuple[str, str], dict | list] = {}
    plain: dict[str, list[str]] = {}
    for line in lines:
        fields = _fields(line)
        first = fields[0][0].lower()
        kind = conf.records.get(first)
        if kind is None:
            key, _, value = line.partition("=")
            plain.setdefault(key.strip(), []).append(value.strip())
            continue
        ident = fields[0][1]
        rest = dict(fields[1:])
        if kind not in conf.per_node:
            records[(kind, ident)] = rest
            continue
        try:
            names = Hostlist.parse(ident).names()
        except HostlistError:
            names = (ident,)
        addrs = _addresses(rest.pop("NodeAddr")) if "NodeAddr" in rest else None
        for i, name in enumerate(names):
            mine = dict(rest)
            if addrs is not None:
                mine["NodeAddr"] = addrs[i] if i < len(addrs) else ""
            if kind == "node":
                records[(kind, name)] = mine
            else:   # a node's gres lines: a list of their fields
                records.setdefault((kind, name), []).append(mine)
    return records, plain


def _addresses(text: str) -> tuple[str, ...]:
    """NodeAddr's list, which Estate writes ranged as hostlists are (10.0.0.[1-4])."""
    try:
        return Hostlist.parse(text).names()
    except HostlistError:
        return tuple(text.split(","))


def _record_effects(path, conf, kind, ident, old, new, version) -> list[Effect]:
    per_node = kind in conf.per_node
    scope = Hostlist.from_names([ident]) if per_node else None
    line_key = kind if not conf.prefix else conf.prefix + next(
        k for k, v in conf.records.items() if v == kind)
    if old is None or new is None:
        e = _classified(path, line_key, version, scope if not per_node or kind != "node"
                        else None)
        e.key = f"{'+' if old is None else '-'}{kind} {ident}"
        out = [e]
        if kind == "node":   # the node itself: slurmd started there, or drained away
            out.append(Effect(path, e.key, "a new node: install its files, start slurmd"
                              if old is None else "leaves the cluster: drain it, then stop "
                              "slurmd", action="restart_slurmd" if old is None
                              else "drain_restart", scope=scope))
        return out
    if isinstance(old, list):   # gres: the fields of lines that differ
        a = {tuple(sorted(d.items())) for d in old}
        b = {tuple(sorted(d.items())) for d in new}
        diff_keys = {k for t in a ^ b for k, _ in t}
        keys = {k for k in diff_keys
                if {v for t in a - b for kk, v in t if kk == k} !=
                {v for t in b - a for kk, v in t if kk == k}} or diff_keys
    else:
        keys = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
    prefix = f"{kind}:" if not conf.prefix else conf.prefix
    return [_classified(path, prefix + k, version, scope, ident) for k in sorted(keys)]


def _classified(path: str, key: str, version: str, scope: Hostlist | None,
                ident: str = "") -> Effect:
    p = up.policy(version, key)
    label = f"{key}" + (f" ({ident})" if ident and scope is None else "")
    if p is None:
        return Effect(path, label, f"unclassified for Slurm {version}: every daemon "
                      "restarted to be safe (add it to estate/model/update_policy.py)",
                      cls="restart_all", scope=scope)
    return Effect(path, label, f"{p.origin}: {p.why}", cls=p.cls, scope=scope)


def _merge(effects: list[Effect]) -> list[Effect]:
    """Per-node effects of one key and class become one effect over their nodes: a
    changed group of 250 nodes is one line, not 250."""
    out, by = [], {}
    for e in effects:
        if e.scope is None or len(e.scope) != 1:
            out.append(e)
            continue
        k = (e.artifact, e.key.split(" ")[0] if e.key[0] in "+-" else e.key, e.cls, e.action)
        if k in by:
            by[k].append(e)
        else:
            by[k] = [e]
            out.append(e)
    for group in by.values():
        if len(group) > 1:
            first = group[0]
            first.scope = Hostlist(r for e in group for r in e.scope.ranges)
            if first.key[0] in "+-":
                first.key = f"{first.key.split(' ')[0]} {first.scope}"
    return out


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

CTLD_PART = {"reconfigure": "reconfigure", "restart_slurmctld": "restart_slurmctld",
             "restart_slurmd": "reconfigure", "restart_all": "restart_slurmctld",
             "restart_all_drain": "restart_slurmctld"}
SLURMD_PART = {"reconfigure": "reconfigure", "restart_slurmctld": "reconfigure",
               "restart_slurmd": "restart_slurmd", "restart_all": "restart_slurmd",
               "restart_all_drain": "drain_restart"}


def node_action(effect: Effect, node: str, roles: Roles, installs: bool) -> str | None:
    """What one effect needs on one node: a class by the daemons that run there (a
    controller restarts slurmctld, a worker slurmd; a worker outside a node-scoped
    change's nodes gets the new file by reconfigure), an action on its scope's nodes."""
    if effect.action:
        return effect.action if effect.scope is None or node in effect.scope else None
    acts = []
    if node in roles.controllers:
        acts.append(CTLD_PART[effect.cls])
    if node in roles.slurmd:
        inside = effect.scope is None or node in effect.scope
        acts.append(SLURMD_PART[effect.cls] if inside else "reconfigure")
    if not acts and installs:
        acts.append("file")
    return up.strongest(acts) if acts else None


@dataclass
class NodeRow:
    hosts: Hostlist
    action: str
    because: list[str]


def per_node(found: list[Change], old: Side, new: Side) -> list[NodeRow]:
    """Nodes grouped by the strongest action they need and why."""
    roles = Roles(*(union([getattr(old.roles, r), getattr(new.roles, r)])
                    for r in ("controllers", "slurmd", "login")))
    slurm_changed = any(c.path in CONFS or c.path == "(slurm release)" for c in found)
    universe = [c.consumers for c in found]
    if slurm_changed:   # a Slurm change reaches every daemon, whether it installs the file
        universe += [roles.controllers, roles.slurmd]
    universe += [e.scope for c in found for e in c.effects if e.scope is not None]
    names = dict.fromkeys(n for hl in universe for n in hl.names())
    groups: dict[tuple, list[str]] = {}
    for node in names:
        acts = []
        for c in found:
            installs = node in c.consumers
            for e in c.effects:
                a = node_action(e, node, roles, installs)
                if a:
                    acts.append((a, e.label()))
        if not acts:
            continue
        best = up.strongest(a for a, _ in acts)
        because = tuple(dict.fromkeys(w for a, w in acts if a == best))
        groups.setdefault((best, because), []).append(node)
    rows = [NodeRow(Hostlist.from_names(n), a, list(w)) for (a, w), n in groups.items()]
    return sorted(rows, key=lambda r: (-up.rank(r.action), str(r.hosts)))


def steps(rows: list[NodeRow]) -> list[tuple[str, Hostlist]]:
    """The cluster's order: files, slurmctld, reconfigure, then the workers (estate.diff
    apply_order batches those)."""
    order = ("file", "restart_service", "restart_slurmctld", "reconfigure", "restart_slurmd",
             "drain_restart", "k8s_rollout", "node_rejoin")
    by = {a: Hostlist(r for row in rows if row.action == a for r in row.hosts.ranges)
          for a in order}
    # a slurmctld restart or any slurmd restart is followed by a reconfigure (configless
    # slurmd gets the new files from slurmctld)
    return [(a, by[a]) for a in order if by[a]]


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
class Report:
    old: Side
    new: Side
    changes: list[Change]
    nodes: list[NodeRow]
    jobs: Jobs | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes)

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
            "steps": [{"action": a, "says": up.SAY[a], "hosts": str(h), "count": len(h)}
                      for a, h in steps(self.nodes)],
            "jobs": None if self.jobs is None else vars(self.jobs),
        }


def diff(old: Path, new: Path | None = None, against: Path | None = None,
         scontrol: str | None = None) -> Report:
    """OLD NEW (two specs), or NEW --against DIR (the last applied tree)."""
    if against is not None:
        spec = new if new is not None else old
        old_side, new_side = read_tree(against), render_side(spec)
        old_side.version = new_side.version
        old_side.roles = new_side.roles
    else:
        old_side, new_side = both_sides(old, new)
    if not (old_side.ok and new_side.ok):
        return Report(old_side, new_side, [], [])
    found = classify(old_side, new_side)
    rows = per_node(found, old_side, new_side)
    jobs = running_jobs(scontrol, rows, found) if scontrol and found else None
    return Report(old_side, new_side, found, rows, jobs)
