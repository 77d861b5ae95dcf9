"""Slurm's own view of a running cluster, compared with the spec.

``collect`` asks Slurm (scontrol, sinfo) through any runner: a network namespace,
a container, ssh. ``compare`` returns every way that view differs from the spec.
The expected values come from ``estate.model``, the facts slurm.conf, gres.conf and
topology.conf were written from, so no Slurm fact is recomputed here; this module only
knows how to read Slurm's output.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from estate.model import model
from estate.model.slurm import (block_topology, def_per_gpu, default_time, kind_affinity,
                                node_lines, time_seconds, weights)
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.resolved import Estate

NODE_CMD = ["scontrol", "--future", "show", "node", "-o"]    # future nodes too
PARTITION_CMD = ["scontrol", "show", "partition", "-o"]
TOPOLOGY_CMD = ["scontrol", "show", "topology"]
SINFO_CMD = ["sinfo", "-h", "-N", "-o", "%N|%P|%T"]

# A key starts a word and is followed by '='; values may hold spaces (OS=Linux 6.1 #1 ...)
# and '=' after other characters (CfgTRES=cpu=4,mem=7.50G).
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.]*)=")
# Node states in which a node can run jobs; anything else (DOWN, DRAIN, INVAL,
# NOT_RESPONDING, UNKNOWN, FAIL, ...) means the node is not what the spec asked for.
_USABLE = {"IDLE", "ALLOCATED", "MIXED", "COMPLETING"}
_USABLE_FLAGS = {"COMPLETING", "PLANNED", "RESERVED", "DYNAMIC_NORM"}


@dataclass(frozen=True)
class Mismatch:
    subject: str          # "node gpu1", "partition gpu", "switch leaf1"
    field: str
    expected: str
    actual: str
    fix: str = ""         # what an operator does about it, where Slurm's state says

    def __str__(self) -> str:
        text = f"{self.subject}: {self.field} is {self.actual!r}, the spec says {self.expected!r}"
        return f"{text}: {self.fix}" if self.fix else text


@dataclass
class SlurmView:
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    switches: dict[str, dict[str, str]] = field(default_factory=dict)
    sinfo: set[tuple[str, str]] = field(default_factory=set)   # (node, partition[*])
    # topology/block (Slurm >= 23.11): BlockName records; the AggregatedBlock lines are
    # Slurm's own pairing of them by BlockSizes and not read
    blocks: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, nodes: str, partitions: str, topology: str, sinfo: str) -> "SlurmView":
        return cls(_records(nodes, "NodeName"), _records(partitions, "PartitionName"),
                   _records(topology, "SwitchName"), _sinfo(sinfo),
                   _records(topology, "BlockName"))


def parse_record(line: str) -> dict[str, str]:
    """One line of `scontrol show ... -o` as {key: value}."""
    keys = list(_KEY.finditer(line))
    out = {}
    for m, nxt in zip(keys, keys[1:] + [None]):
        out[m.group(1)] = line[m.end():nxt.start() if nxt else len(line)].strip()
    return out


def _records(text: str, key: str) -> dict[str, dict[str, str]]:
    out = {}
    for line in text.splitlines():
        rec = parse_record(line.strip())
        if key in rec:
            out[rec[key]] = rec
    return out


def _sinfo(text: str) -> set[tuple[str, str]]:
    rows = (line.strip().split("|") for line in text.splitlines() if line.strip())
    return {(r[0], r[1]) for r in rows if len(r) >= 2}


def collect(run: Callable[[list[str]], str]) -> SlurmView:
    """Ask Slurm; ``run(argv)`` returns a command's stdout wherever the clients are."""
    return SlurmView.parse(run(NODE_CMD), run(PARTITION_CMD), run(TOPOLOGY_CMD), run(SINFO_CMD))


def compare(estate: Estate, view: SlurmView) -> list[Mismatch]:
    """Every difference between what the spec renders and what Slurm reports."""
    return (_compare_nodes(estate, view) + _compare_partitions(estate, view)
            + _compare_topology(estate, view) + _compare_sinfo(estate, view))


# --- nodes --------------------------------------------------------------------

def reported_gres(line) -> str:
    """Gres= as scontrol shows it: slurmd adds the sockets each kind's GPUs are bound to
    (S:0-1), and shards carry their GPUs' type (measured on 22.05)."""
    if not line.gres_count:
        return "(null)"
    out = []
    for k in line.kinds:
        files = kind_affinity(k, line.sockets, line.cores_per_socket)
        sockets = f"(S:0-{len(files) - 1})" if files[0].cores else ""
        out.append(f"gpu:{k.type + ':' if k.type else ''}{k.count}{sockets}")
    if line.shards:
        kind = f"{line.gres_model}:" if line.gres_model else ""
        out.append(f"shard:{kind}{line.shards}{sockets}")
    return ",".join(out)


def expected_nodes(estate: Estate) -> dict[str, dict[str, str]]:
    """Node -> the scontrol fields its NodeName line sets, in scontrol's spelling."""
    out = {}
    for line in node_lines(estate):
        addrs = list(line.addr_list) if line.addrs else []
        for i, name in enumerate(line.hostlist):
            exp = {"CPUTot": str(line.cpus), "Sockets": str(line.sockets),
                   "CoresPerSocket": str(line.cores_per_socket),
                   "ThreadsPerCore": str(line.threads_per_core),
                   "RealMemory": str(line.real_memory), "Gres": reported_gres(line),
                   "AvailableFeatures": ",".join(line.features) or "(null)",
                   "Weight": str(line.weight)}
            if line.core_spec_count:    # scontrol prints them only when set
                exp["CoreSpecCount"] = str(line.core_spec_count)
            if line.mem_spec_limit:
                exp["MemSpecLimit"] = str(line.mem_spec_limit)
            if i < len(addrs):
                exp["NodeAddr"] = addrs[i]
            out[name] = exp
    return out


def node_partitions(estate: Estate) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in model(estate).partitions:
        for name in p.members.hostlist():
            out.setdefault(name, set()).add(p.name)
    return out


# What the spec's node state lets slurmctld report, in a mismatch's words.
DECLARED = {"UNKNOWN": "usable (IDLE/MIXED/ALLOCATED)",
            "CLOUD": "usable, or powered down/up by power saving (IDLE+CLOUD+POWERED_DOWN)",
            "FUTURE": "FUTURE (not yet in service)"}
_POWER_FLAGS = {"CLOUD", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN"}


def as_declared(declared: str, state: str) -> bool:
    """A node's reported state fits what the spec declares: usable; for a cloud node also
    powered down or on its way (IDLE+CLOUD+POWERED_DOWN); for a future node FUTURE."""
    if declared == "FUTURE":
        return state.split("+")[0] == "FUTURE"
    if declared == "CLOUD":
        base, *flags = state.split("+")
        if base in _USABLE and flags and set(flags) <= _POWER_FLAGS | _USABLE_FLAGS:
            return True
    return usable(state)


def node_states(estate: Estate) -> dict[str, str]:
    """Node -> the State= its NodeName line declares (UNKNOWN, CLOUD, FUTURE)."""
    return {n: line.state for line in node_lines(estate) for n in line.hostlist}


def _compare_nodes(estate: Estate, view: SlurmView) -> list[Mismatch]:
    expected, parts = expected_nodes(estate), node_partitions(estate)
    declared = node_states(estate)
    out = []
    for name, exp in expected.items():
        subject = f"node {name}"
        got = view.nodes.get(name)
        if got is None:
            out.append(Mismatch(subject, "presence", "defined", "missing from Slurm"))
            continue
        nvml = estate.spec.slurm.gres_autodetect == "nvml"
        out += [Mismatch(subject, k, v, got.get(k, "")) for k, v in exp.items()
                if not _same_node_value(k, v, got.get(k, ""), nvml)]
        want_parts = parts.get(name, set())
        have_parts = set(filter(None, got.get("Partitions", "").split(",")))
        if have_parts != want_parts:
            out.append(Mismatch(subject, "Partitions", _join(want_parts), _join(have_parts)))
        state = got.get("State", "")
        if not as_declared(declared.get(name, "UNKNOWN"), state):
            reason = got.get("Reason", "")
            out.append(Mismatch(subject, "State", DECLARED[declared.get(name, "UNKNOWN")],
                                state + (f" ({reason})" if reason else ""),
                                state_fix(name, state)))
    out += [Mismatch(f"node {n}", "presence", "not in the spec", "defined in Slurm")
            for n in view.nodes if n not in expected]
    return out


def usable(state: str) -> bool:
    """IDLE, MIXED+COMPLETING, ...: a base state that runs jobs and no bad flag.
    A '*' (not responding) or power/reboot marker ('~#!%@^') makes it unusable."""
    if any(c in state for c in "*~#!%@^"):
        return False
    base, *flags = state.split("+")
    return base in _USABLE and all(f in _USABLE_FLAGS for f in flags)


def state_fix(name: str, state: str) -> str:
    """What to do about a node in an unusable state, as `scontrol show node` spells it
    (IDLE+NOT_RESPONDING, DOWN+DRAIN, ...) or sinfo does (idle*, down*)."""
    base, *flags = state.upper().split("+")
    resume = f"`scontrol update nodename={name} state=resume`"
    if base.endswith("*") or "NOT_RESPONDING" in flags:
        return (f"slurmd on {name} is not responding: start slurmd on {name} "
                f"(systemctl start slurmd), then {resume} if it does not return by itself")
    if base == "UNKNOWN":
        return (f"slurmd on {name} has not registered since slurmctld started (for a few "
                f"seconds after a restart, normal): if it stays, start slurmd on {name} "
                f"(systemctl start slurmd)")
    if "DRAIN" in flags or base in ("DRAINED", "DRAINING"):
        return f"{name} is drained: remove the cause (see its Reason), then {resume}"
    if base == "INVAL":
        return (f"{name} reports less hardware than slurm.conf: compare `slurmd -C` on "
                f"{name} with its node class in the spec")
    if base == "DOWN":
        return f"Slurm set {name} DOWN: see its Reason and slurmd's log on {name}, then {resume}"
    return ""


# --- partitions ---------------------------------------------------------------

def expected_partitions(estate: Estate) -> dict[str, dict[str, str]]:
    slurm = estate.spec.slurm
    per_gpu = def_per_gpu(estate, node_lines(estate))
    out = {}
    for part in model(estate).partitions:
        p = part.spec
        exp = out[p.name] = {
            # slurmctld lists a node set's nodes, not its name
            "Nodes": str(part.members.hostlist()), "Default": "YES" if p.default else "NO",
            "MaxTime": p.max_time, "DefaultTime": default_time(p),
            "PriorityTier": str(p.priority_tier), "State": "UP",
            # A partition QOS needs accounting; slurm.conf omits it otherwise.
            "QoS": p.qos if p.qos and slurm.accounting else "N/A",
            "AllowQos": ",".join(p.allow_qos) or "ALL",
            "AllowGroups": ",".join(p.allow_groups) or "ALL",
            "Hidden": "YES" if p.hidden else "NO", "GraceTime": str(p.grace_time_s or 0),
            "MaxMemPerNode": str(p.max_mem_per_node_mb or "UNLIMITED"),
        }
        # scontrol shows DenyAccounts instead of AllowAccounts when a partition has it
        if p.deny_accounts:
            exp["DenyAccounts"] = ",".join(p.deny_accounts)
        else:
            exp["AllowAccounts"] = ",".join(p.allow_accounts) or "ALL"
        if p.oversubscribe:
            exp["OverSubscribe"] = _oversubscribe(p.oversubscribe)
        if p.preempt_mode:
            exp["PreemptMode"] = p.preempt_mode.upper()
        if p.tres_billing_weights:
            exp["TRESBillingWeights"] = weights(p.tres_billing_weights)
        cpu, mem = per_gpu.get(p.name, (None, None))
        defaults = [f"{k}={v}" for k, v in (("DefCpuPerGPU", cpu), ("DefMemPerGPU", mem)) if v]
        exp["JobDefaults"] = ",".join(defaults) or "(null)"
    return out


def _oversubscribe(value: str) -> str:
    """YES and FORCE without a count share each resource 4 ways, and scontrol says so."""
    return f"{value}:4" if value in ("YES", "FORCE") else value


def _compare_partitions(estate: Estate, view: SlurmView) -> list[Mismatch]:
    out = []
    expected = expected_partitions(estate)
    for name, exp in expected.items():
        subject = f"partition {name}"
        got = view.partitions.get(name)
        if got is None:
            out.append(Mismatch(subject, "presence", "defined", "missing from Slurm"))
            continue
        for key, want in exp.items():
            have = got.get(key, "")
            if not _same(key, want, have):
                out.append(Mismatch(subject, key, want, have))
    out += [Mismatch(f"partition {n}", "presence", "not in the spec", "defined in Slurm")
            for n in view.partitions if n not in expected]
    return out


_SOCKETS = re.compile(r"\(S:[^)]*\)")


def _same_node_value(key: str, want: str, have: str, nvml: bool) -> bool:
    """With AutoDetect=nvml the driver, not Estate's convention, says which sockets the
    GPUs sit on: Gres is compared without them."""
    if key == "Gres" and nvml:
        return _SOCKETS.sub("", want) == _SOCKETS.sub("", have)
    return want == have


def _same(key: str, want: str, have: str) -> bool:
    if key == "Nodes":
        return _names(want) == _names(have)
    if key in ("AllowAccounts", "DenyAccounts", "AllowQos", "AllowGroups"):
        return set(want.split(",")) == set(have.split(","))
    if key in ("MaxTime", "DefaultTime"):
        return time_seconds(want) == time_seconds(have)
    return want == have


# --- topology -----------------------------------------------------------------

def expected_switches(estate: Estate) -> dict[str, dict[str, set[str]]]:
    """Switch -> {"Nodes": every compute node below it, "Switches": its children}."""
    spec_switches = {s.name: s for s in estate.spec.topology.switches}
    leaves = model(estate).switch_nodes

    def below(name: str, seen: frozenset = frozenset()) -> set[str]:
        sw = spec_switches.get(name)
        nodes = set(leaves.get(name, Hostlist()))
        for child in (sw.switches if sw and name not in seen else []):
            nodes |= below(child, seen | {name})
        return nodes

    return {name: {"Nodes": below(name), "Switches": set(sw.switches)}
            for name, sw in spec_switches.items()}


def _compare_topology(estate: Estate, view: SlurmView) -> list[Mismatch]:
    """The form topology.conf was rendered in: blocks where the release reads them, else
    the switch tree."""
    if block_topology(estate):
        return _compare_blocks(estate, view)
    if not estate.spec.topology.switches:
        return []
    out = []
    expected = expected_switches(estate)
    for name, exp in expected.items():
        subject = f"switch {name}"
        got = view.switches.get(name)
        if got is None:
            out.append(Mismatch(subject, "presence", "defined", "missing from Slurm"))
            continue
        have_nodes = _names(got.get("Nodes", ""))
        if have_nodes != exp["Nodes"]:
            out.append(Mismatch(subject, "Nodes", _compress(exp["Nodes"]),
                                _compress(have_nodes)))
        have_sw = set(filter(None, got.get("Switches", "").split(",")))
        if _expand_set(have_sw) != exp["Switches"]:
            out.append(Mismatch(subject, "Switches", _join(exp["Switches"]), _join(have_sw)))
    out += [Mismatch(f"switch {n}", "presence", "not in the spec", "defined in Slurm")
            for n in view.switches if n not in expected]
    return out


def _compare_blocks(estate: Estate, view: SlurmView) -> list[Mismatch]:
    """Each block's nodes, and the planning base size (BlockSizes' first) where set."""
    topo, out = estate.spec.topology, []
    for block in topo.blocks:
        subject = f"block {block.name}"
        got = view.blocks.get(block.name)
        if got is None:
            out.append(Mismatch(subject, "presence", "defined", "missing from Slurm"))
            continue
        want = set(Hostlist.parse(block.nodes))
        have = _names(got.get("Nodes", ""))
        if have != want:
            out.append(Mismatch(subject, "Nodes", _compress(want), _compress(have)))
        if topo.block_sizes and got.get("BlockSize") != str(topo.block_sizes[0]):
            out.append(Mismatch(subject, "BlockSize", str(topo.block_sizes[0]),
                                got.get("BlockSize", "")))
    named = {b.name for b in topo.blocks}
    out += [Mismatch(f"block {n}", "presence", "not in the spec", "defined in Slurm")
            for n in view.blocks if n not in named]
    return out


# --- sinfo --------------------------------------------------------------------

def _compare_sinfo(estate: Estate, view: SlurmView) -> list[Mismatch]:
    """sinfo lists each node once per partition, the default partition marked '*'."""
    want, future = set(), {n for n, s in node_states(estate).items() if s == "FUTURE"}
    for p in model(estate).partitions:     # sinfo leaves future nodes out
        label = p.name + ("*" if p.spec.default else "")
        want |= {(n, label) for n in p.members.hostlist() if n not in future}
    out = [Mismatch(f"node {n}", "sinfo partition", p, "not listed")
           for n, p in sorted(want - view.sinfo)]
    out += [Mismatch(f"node {n}", "sinfo partition", "not listed", p)
            for n, p in sorted(view.sinfo - want)]
    return out


# --- helpers ------------------------------------------------------------------

def _names(expr: str) -> set[str]:
    try:
        return set(Hostlist.parse(expr)) if expr and expr != "(null)" else set()
    except HostlistError:
        return {expr}


def _expand_set(exprs: set[str]) -> set[str]:
    return set().union(*(_names(e) for e in exprs)) if exprs else set()


def _compress(names: set[str]) -> str:
    return str(Hostlist.from_names(sorted(names)).sorted())


def _join(items: set[str]) -> str:
    return ",".join(sorted(items))
