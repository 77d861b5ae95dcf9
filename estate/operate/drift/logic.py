"""`estate drift`: how the live estate differs from the spec, each difference with its fix.

This module holds the comparisons, on inputs already parsed from the nodes (the reading
itself is estate.operate.drift.live): Slurm's view (scontrol, estate.verify.slurm_view), the
hardware slurmd detects (`slurmd -C`) against the node class, installed files against the
rendered tree's MANIFEST.json, the services each node's deploys run (estate.catalogue),
the GPUs nvidia-smi lists, and the Kubernetes nodes' labels and taints. Expected values
come from estate.model and the rendered tree, never from constants here.

A finding is `drift` (the estate differs: the exit code says so), `tolerated` (it differs
in a way the spec accepts, e.g. hardware under slurm.config_overrides), `skipped` (not
compared here, with the reason) or `pending` (the spec changed since the last render:
explains the file drift it causes, and is not counted again).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

from estate.catalogue import ROLES
from estate.model import kubernetes as k8s
from estate.model.destinations import destination
from estate.model.slurm import node_lines
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate
from estate.verify.slurm_view import Mismatch, SlurmView, compare as slurm_compare, \
    parse_record

DRIFT, TOLERATED, SKIPPED, PENDING = "drift", "tolerated", "skipped", "pending"
ASPECTS = ("reach", "slurm", "hardware", "file", "service", "gpu", "certificate", "kubernetes",
           "render")
# Where slurmd keeps the slurm.conf it fetched from slurmctld (configless workers).
CONF_CACHE = "/var/spool/slurmd/conf-cache/slurm.conf"
# `systemctl is-enabled` answers 0 for these (testinfra's is_enabled, which verify reads)
ENABLED = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated",
           "linked", "linked-runtime"}
# Drivers report a little less than the marketed size (estate.verify.k8s_view's tolerance).
GPU_MEMORY_TOLERANCE = 0.10
# slurmd -C reads MemTotal, a little under the installed memory: only a class that
# understates the node by more than this is "more memory than the class says".
MEMORY_SLACK = 0.05


@dataclass(frozen=True)
class Finding:
    node: str           # a node, a hostlist (render), or "kubernetes" for the cluster
    aspect: str         # one of ASPECTS
    what: str           # the thing that differs: "RealMemory", "/etc/slurm/slurm.conf"
    expected: str
    actual: str
    fix: str
    status: str = DRIFT

    def line(self) -> str:
        text = f"{self.status} {self.node} {self.aspect} {self.what}: "
        text += (f"{self.actual}" if self.status == SKIPPED else
                 f"is {self.actual!r}, the spec says {self.expected!r}")
        return text + (f"; fix: {self.fix}" if self.fix else "")


@dataclass
class DriftReport:
    findings: list[Finding] = field(default_factory=list)
    # (node, aspect) -> how many things were compared there: JUnit's passing test cases
    checked: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, node: str, aspect: str, findings: list[Finding], compared: int) -> None:
        self.findings += findings
        key = (node, aspect)
        self.checked[key] = self.checked.get(key, 0) + compared

    @property
    def drifted(self) -> list[Finding]:
        return [f for f in self.findings if f.status == DRIFT]

    @property
    def ok(self) -> bool:
        return not self.drifted

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {"compared": sum(self.checked.values())}
        for f in self.findings:
            out[f.status] = out.get(f.status, 0) + 1
        return out

    def as_dict(self) -> dict:
        return {"ok": self.ok, "totals": self.totals(),
                "findings": [asdict(f) for f in sorted(self.findings, key=order)],
                "compared": [{"node": n, "aspect": a, "count": c}
                             for (n, a), c in sorted(self.checked.items())]}


def order(f: Finding) -> tuple:
    rank = {DRIFT: 0, PENDING: 1, TOLERATED: 2, SKIPPED: 3}
    return (rank[f.status], f.node, ASPECTS.index(f.aspect), f.what)


class Fixes:
    """The fix texts, with the command line the operator would type."""

    def __init__(self, spec: str, connect: str = ""):
        self.spec, self.connect = spec, connect

    def apply(self, node: str) -> str:
        return f"estate apply {self.spec} --limit {node}{self.connect}"


# --- certificates (estate.model.certificates) -------------------------------------------

def certificate_findings(node: str, readings: list[tuple], now) -> list[Finding]:
    """(certificate, path, what read_command printed) of the node's certificates: one
    drift for each within WARN_DAYS of its notAfter, the fix its renewal. A file not there
    or not readable is the file aspect's to report (it is no rendered file: the apply's)."""
    from estate.model import certificates as certs
    out = []
    for cert, path, text in readings:
        end = certs.not_after(text, cert.kind)
        if end is not None and certs.expiring(end, now):
            out.append(Finding(node, "certificate", path,
                               f"more than {certs.WARN_DAYS} days of validity",
                               certs.describe(cert, path, end, now), cert.renew))
    return out


# --- Slurm's view ---------------------------------------------------------------------

def slurm_findings(estate: Estate, view: SlurmView, selected: set[str],
                   fixes: Fixes) -> list[Finding]:
    """Every way slurmctld's view differs from the spec, on the selected nodes; the
    partitions, switches and blocks are the controller's (reported when it is selected)."""
    ctl = estate.spec.slurm.controllers[0]
    out = []
    for m in slurm_compare(estate, view):
        kind, _, name = m.subject.partition(" ")
        node, what = (name, m.field) if kind == "node" else (ctl, f"{m.subject} {m.field}")
        if node in selected:
            out.append(Finding(node, "slurm", what, m.expected, m.actual,
                               slurm_fix(estate, m, ctl, fixes)))
    return out


# scontrol's field names where slurm.conf spells the key otherwise (estate.model.
# update_policy is keyed by slurm.conf's spelling)
SCONTROL_KEYS = {"CPUTot": "CPUs", "AvailableFeatures": "Features", "QoS": "QOS",
                 "JobDefaults": "DefCpuPerGPU", "Partitions": "partition:Nodes",
                 "sinfo partition": "partition:Nodes"}
TOPOLOGY_KEYS = {"switch": "topology.conf:SwitchName", "block": "topology.conf:BlockName"}


def policy_key(m: Mismatch) -> str:
    """The update policy's key for a difference in Slurm's view: "node:RealMemory",
    "partition:MaxTime", the line kind itself ("node") for a node added or removed."""
    kind = m.subject.partition(" ")[0]
    if kind in TOPOLOGY_KEYS:
        return TOPOLOGY_KEYS[kind]
    key = SCONTROL_KEYS.get(m.field, m.field)
    if ":" in key:
        return key
    return kind if key == "presence" else f"{kind}:{key}"


def slurm_fix(estate: Estate, m: Mismatch, ctl: str, fixes: Fixes) -> str:
    """What brings slurmctld back to the spec. `estate apply` restarts slurmctld only when
    the rendered files change, so a slurmctld that runs on other settings than its
    (restored) slurm.conf needs a reconfigure or restart of its own; which one is the
    update policy's (SchedMD's manual for the spec's release, estate.model.update_policy).
    Measured on 22.05 (tests/lab/test_drift.py): RealMemory and Weight come back with a
    reconfigure although the manual asks restarts for node changes, so the reconfigure
    comes first and the manual's restart is the fallback it names."""
    from estate.model.update_policy import policy
    if m.fix:                        # a node state: slurm_view says what to do
        return m.fix
    version = estate.spec.slurm.version
    found = policy(version, policy_key(m))
    first = f"{fixes.apply(ctl)} (puts the rendered slurm.conf back if it drifted), then "
    node = m.subject.partition(" ")[2] if m.subject.startswith("node ") else None
    restart = (f"`systemctl restart slurmctld` on {ctl}" +
               (f", then slurmd on {node}" if node and found and
                found.cls in ("restart_slurmd", "restart_all", "restart_all_drain") else ""))
    if m.field == "presence" and found and found.cls != "reconfigure":
        return first + f"{restart}: {found.origin} for {version}: {found.why[:160]}"
    text = first + (f"`scontrol reconfigure` on {ctl}: slurmctld re-reads slurm.conf "
                    "(changes made with `scontrol update` last only until then)")
    if found and found.cls != "reconfigure":
        text += f"; if that leaves it, {restart} ({found.origin}, {version}: {found.cls})"
    return text


# --- hardware (slurmd -C) -------------------------------------------------------------

def parse_slurmd_c(text: str) -> dict[str, str]:
    """`slurmd -C`'s first line (NodeName=... CPUs=... RealMemory=...) as {key: value}."""
    first = next((line for line in text.splitlines() if line.startswith("NodeName=")), "")
    return parse_record(first.strip())


def hardware_findings(estate: Estate, node: str, detected: dict[str, str]) -> list[Finding]:
    """The hardware slurmd detects against the node's class (its NodeName line): CPU
    topology exactly, memory at least the configured RealMemory and not far above the
    class's. Under slurm.config_overrides the spec trusts slurm.conf over the hardware
    (labs emulating bigger nodes): the difference is tolerated, and said."""
    line = next((l for l in node_lines(estate) if node in l.hostlist), None)
    if line is None:
        return []
    cls = estate.node_class(estate.group_of(node))
    have = {k: _int(detected.get(k)) for k in ("CPUs", "Boards", "SocketsPerBoard",
                                                "CoresPerSocket", "ThreadsPerCore",
                                                "RealMemory")}
    sockets = (have["Boards"] or 1) * (have["SocketsPerBoard"] or 0)
    pairs = [("CPUs", line.cpus, have["CPUs"]), ("Sockets", line.sockets, sockets),
             ("CoresPerSocket", line.cores_per_socket, have["CoresPerSocket"]),
             ("ThreadsPerCore", line.threads_per_core, have["ThreadsPerCore"])]
    out = [(k, str(want), str(got)) for k, want, got in pairs if got != want]
    mem = have["RealMemory"]
    if mem is None or mem < line.real_memory:
        out.append(("RealMemory", f"at least {line.real_memory} MB", f"{mem} MB"))
    elif mem > cls.memory_mb * (1 + MEMORY_SLACK):
        out.append(("RealMemory", f"about {cls.memory_mb} MB (class {cls.name})", f"{mem} MB"))
    overrides = estate.spec.slurm.config_overrides
    fix = (f"change the spec: node class {cls.name} (sockets, cores_per_socket, "
           f"threads_per_core, memory_mb) or the node's real_memory_mb must describe "
           f"{node}'s hardware; or move {node} to a class that does")
    if overrides:
        fix = ("none needed: slurm.config_overrides tells slurmd to trust slurm.conf over "
               "the hardware (set it false on real nodes to have this counted)")
    return [Finding(node, "hardware", k, want, got, fix, TOLERATED if overrides else DRIFT)
            for k, want, got in out]


def hardware_unread(node: str, fixes: Fixes) -> Finding:
    """slurmd -C printed no NodeName line: slurmd is missing or broken there."""
    return Finding(node, "hardware", "slurmd -C", "a NodeName= line",
                   "no answer (is slurmd installed?)", fixes.apply(node))


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


# --- files ----------------------------------------------------------------------------

@dataclass(frozen=True)
class FileState:
    sha256: str | None     # None: could not be read
    mode: str              # octal, 4 digits: "0644"
    owner: str             # user:group


def parse_stat(text: str) -> dict[str, tuple[str, str]]:
    """`stat -c '%n|%a|%U|%G'` lines -> path: (mode, user:group)."""
    out = {}
    for line in text.splitlines():
        parts = line.rsplit("|", 3)
        if len(parts) == 4:
            out[parts[0]] = (f"{int(parts[1], 8):04o}", f"{parts[2]}:{parts[3]}")
    return out


def parse_sha256sum(text: str) -> dict[str, str]:
    """`sha256sum` lines -> path: digest (a path with a newline is escaped with a leading
    backslash by coreutils; Estate's destinations have none)."""
    out = {}
    for line in text.splitlines():
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            out[path] = digest
    return out


def file_states(stat_text: str, sha_text: str) -> dict[str, FileState]:
    stats, shas = parse_stat(stat_text), parse_sha256sum(sha_text)
    return {p: FileState(shas.get(p), mode, owner) for p, (mode, owner) in stats.items()}


def _owner(spec: str) -> str:
    user, _, group = spec.partition(":")
    return f"{user}:{group or user}"


def file_findings(node: str, installed: list[tuple[str, str]], manifest: dict,
                  live: dict[str, FileState], fixes: Fixes, last: dict | None = None,
                  container: bool = False) -> list[Finding]:
    """Each (artifact, destination) the roles installed on node against MANIFEST.json:
    present, same sha256, mode and owner. `last`: the last render's manifest, which tells
    a file edited on the node from one the spec has changed since (not yet applied)."""
    out, fix = [], fixes.apply(node)
    for artifact, dest in installed:
        info, got = manifest[artifact], live.get(dest)
        if got is None:
            out.append(Finding(node, "file", dest, f"{artifact} (sha256 {info['sha256'][:12]})",
                               "missing", fix))
            continue
        if got.sha256 != info["sha256"]:
            how = _why_differs(got.sha256, artifact, last)
            out.append(Finding(node, "file", dest, f"sha256 {info['sha256'][:12]} ({artifact})",
                               f"sha256 {(got.sha256 or 'unreadable')[:12]} ({how})", fix))
        if dest == "/etc/hosts" and container:
            continue   # Docker bind-mounts it: its mode and owner are the runtime's
        if got.mode != info["mode"]:
            out.append(Finding(node, "file", f"{dest} mode", info["mode"], got.mode, fix))
        if got.owner != _owner(info["owner"]):
            out.append(Finding(node, "file", f"{dest} owner", _owner(info["owner"]), got.owner,
                               fix))
    return out


def _why_differs(sha: str | None, artifact: str, last: dict | None) -> str:
    """The last render tells an edit on the node from a spec change not yet applied."""
    if last is None:
        return "differs; no last render to tell an edit from a spec change"
    if sha and sha == last.get(artifact, {}).get("sha256"):
        return "the last render's: the spec changed since it was applied"
    return "edited on the node"


def conf_cache_finding(node: str, want_sha: str, got_sha: str | None, ctl: str,
                       fixes: Fixes) -> list[Finding]:
    """A configless slurmd runs on the slurm.conf slurmctld handed it: the rendered one."""
    if got_sha == want_sha:
        return []
    return [Finding(node, "file", CONF_CACHE, f"sha256 {want_sha[:12]} (slurm/slurm.conf)",
                    f"sha256 {got_sha[:12]}" if got_sha else "missing (slurmd has not "
                    "fetched its configuration)",
                    f"{fixes.apply(ctl)} if {ctl}'s slurm.conf drifted, then `scontrol "
                    f"reconfigure` on {ctl}: it hands slurm.conf to the configless slurmds")]


# --- services -------------------------------------------------------------------------

@dataclass(frozen=True)
class Service:
    unit: str
    deploy: str
    tolerate_stopped: str | None = None   # why it may be stopped here (said, not counted)


def expected_services(deploys: list[str], consumes: list[str],
                      container: str | None = None) -> list[Service]:
    """The units a node's deploys keep running: each role's services (estate.catalogue),
    nfs-server only on NFS servers, kubelet on Kubernetes nodes that joined or init, and
    the rendered units (storage mounts, timers) the node consumes."""
    server = any(p.startswith("storage/exports/") for p in consumes)
    out = []
    for d in deploys:
        for unit in ROLES[d].services:
            if unit == "nfs-server" and not server:
                continue      # the storage role on a client only mounts
            why = None
            if unit == "chrony" and container:
                why = (f"a {container} container shares the host's clock and may not set it "
                       "(roles/common/tests: time_sync)")
            out.append(Service(unit, d, why))
        if d in ("k8s_worker", "k8s_control_plane"):
            out.append(Service("kubelet", d))
    for p in consumes:
        name = destination(p).rsplit("/", 1)[-1]
        if p.startswith("storage/mounts/") and "storage" in deploys:
            out.append(Service(name, "storage"))
        elif p.endswith(".timer") and (p.startswith("slurm/bridge/") and
                                       "slurm_controller" in deploys or
                                       p.startswith(k8s.SYSTEMD_UNITS) and
                                       "k8s_control_plane" in deploys):
            out.append(Service(name, "slurm_controller" if p.startswith("slurm/")
                               else "k8s_control_plane"))
        elif p.endswith(".timer") and p.startswith("monitoring/cert-expiry/") and \
                "node_exporter" in deploys:
            out.append(Service(name, "node_exporter"))   # the certificate expiry collector
    return out


def parse_systemctl_show(text: str, units: list[str]) -> dict[str, dict[str, str]]:
    """`systemctl show -p Id,LoadState,ActiveState,UnitFileState U...`: one block per unit,
    in argument order, blank-line separated."""
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    out = {}
    for unit, block in zip(units, blocks):
        out[unit] = dict(l.split("=", 1) for l in block.splitlines() if "=" in l)
    return out


def service_findings(node: str, wants: list[Service], states: dict[str, dict[str, str]],
                     fixes: Fixes) -> list[Finding]:
    out, fix = [], fixes.apply(node)
    for s in wants:
        st = states.get(s.unit, {})
        if st.get("LoadState") != "loaded":
            out.append(Finding(node, "service", s.unit, f"installed ({s.deploy})",
                               st.get("LoadState", "unknown"), fix))
            continue
        active = st.get("ActiveState", "")
        if active != "active":
            status, note = (TOLERATED, s.tolerate_stopped) if s.tolerate_stopped else (DRIFT, fix)
            out.append(Finding(node, "service", s.unit, "active", active, note, status))
        enabled = st.get("UnitFileState", "")
        if enabled not in ENABLED:
            out.append(Finding(node, "service", f"{s.unit} enabled", "enabled",
                               enabled or "no unit file state", fix))
    return out


# --- GPUs (nvidia-smi) ----------------------------------------------------------------

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]


def parse_nvidia_smi(text: str) -> list[tuple[str, int | None]]:
    out = []
    for line in text.splitlines():
        name, _, mem = line.rpartition(",")
        if name.strip():
            out.append((name.strip(), _int(mem.strip())))
    return out


def _product(name: str) -> str:
    """nvidia-smi's name ('NVIDIA A100-SXM4-40GB') in the spec's spelling (GFD's label)."""
    return "-".join(name.upper().split())


def gpu_findings(estate: Estate, node: str, gpus: list[tuple[str, int | None]]) -> list[Finding]:
    """The GPUs the node sees against its class: how many of each product, and memory."""
    cls = estate.node_class(estate.group_of(node))
    fix = (f"change the spec: node class {cls.name}'s gpus must describe {node}'s GPUs "
           f"(or the node lost GPUs: check `nvidia-smi -q` and the driver on {node})")
    want = class_gpus(cls)
    have: dict[str, int] = {}
    for name, _ in gpus:
        have[_product(name)] = have.get(_product(name), 0) + 1
    out = []
    if have != want:
        out.append(Finding(node, "gpu", "GPUs", _counts(want), _counts(have) or "none", fix))
    sizes = {_product(k.product): k.memory_gb * 1024 for k in cls.gpu_kinds}
    for name, mib in gpus:
        spec = sizes.get(_product(name))
        if spec and (mib is None or abs(mib - spec) > spec * GPU_MEMORY_TOLERANCE):
            out.append(Finding(node, "gpu", f"{name} memory", f"about {spec} MiB",
                               f"{mib} MiB", fix))
    return out


def class_gpus(cls) -> dict[str, int]:
    """product (nvidia-smi's spelling, normalised) -> how many the class has."""
    out: dict[str, int] = {}
    for k in cls.gpu_kinds:
        out[_product(k.product)] = out.get(_product(k.product), 0) + k.count
    return out


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{n} x {p}" for p, n in sorted(c.items()))


def gpu_skipped(estate: Estate, node: str) -> Finding:
    cls = estate.node_class(estate.group_of(node))
    why = (f"nvidia-smi is not on {node}" +
           (f": node class {cls.name}'s GPUs are emulated (fake device files)"
            if any(k.emulated for k in cls.gpu_kinds) else
            ": install NVIDIA's driver there to have its GPUs compared"))
    return Finding(node, "gpu", "GPUs", _counts(class_gpus(cls)), why, "", SKIPPED)


# --- Kubernetes -----------------------------------------------------------------------

def kubernetes_findings(estate: Estate, nodes_json: dict, selected: set[str]) -> list[Finding]:
    """The selected Kubernetes-plane nodes' labels and taints against the spec's
    (estate.model.kubernetes); the GPU labels and capacity as estate.verify.k8s_view reads
    them (GPU Feature Discovery may own those labels)."""
    from estate.verify import k8s_view
    live = {(n.get("metadata") or {}).get("name"): n for n in nodes_json.get("items") or []}
    out = []
    for kn in k8s.plane_nodes(estate):
        if kn.name not in selected:
            continue
        seen = live.get(kn.name)
        if seen is None:
            continue          # k8s_view names an unregistered GPU worker; see below
        labels = (seen.get("metadata") or {}).get("labels") or {}
        fix = (f"`kubectl label node {kn.name} KEY=VALUE --overwrite` (kubeadm sets the "
               "rendered labels only when the node registers)")
        for key, value in kn.labels.items():
            if key in (k8s.GPU_PRODUCT, k8s.GPU_COUNT):
                continue      # k8s_view's, below: GPU Feature Discovery may rewrite them
            if labels.get(key) != value:
                out.append(Finding(kn.name, "kubernetes", f"label {key}", value,
                                   labels.get(key, "absent"), fix))
        out += _taint_findings(kn, (seen.get("spec") or {}).get("taints") or [])
    for m in k8s_view.compare(estate, nodes_json):
        name = m.subject.partition(" ")[2]
        if name in selected:
            out.append(Finding(name, "kubernetes", m.field, m.expected, m.actual, m.fix))
    registered = set(live)
    out += [Finding(kn.name, "kubernetes", "registered", "yes", "no",
                    "join it (estate apply), or check its kubelet")
            for kn in k8s.plane_nodes(estate)
            if kn.name in selected and kn.name not in registered and not kn.is_gpu_worker]
    return out


def _taint(t: dict) -> str:
    return f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"


def _taint_findings(kn: k8s.KNode, live: list[dict]) -> list[Finding]:
    """Estate's taints present; none of Estate's keys with other values. Other taints (a
    cordon's unschedulable, not-ready) are the cluster's own and not drift."""
    want = {_taint(t) for t in kn.taints}
    keys = {k8s.GPU_TAINT["key"], k8s.CONTROL_PLANE_TAINT["key"]}
    have = {_taint(t) for t in live if t.get("key") in keys}
    if want == have:
        return []
    return [Finding(kn.name, "kubernetes", "taints", ", ".join(sorted(want)) or "none",
                    ", ".join(sorted(have)) or "none",
                    f"`kubectl taint node {kn.name} ...` to the spec's taints (kubeadm sets "
                    "them only when the node registers)")]


# --- the last render ------------------------------------------------------------------

def render_findings(manifest: dict, last: dict, selected: set[str], last_dir: str,
                    fixes: Fixes) -> list[Finding]:
    """What the spec renders now that the last render did not (pending, not yet applied
    where the nodes still have the old bytes: their file findings count that)."""
    out = []
    for path in sorted(set(manifest) | set(last)):
        new, old = manifest.get(path), last.get(path)
        if new and old and (new["sha256"], new["mode"], new["owner"]) == \
                (old["sha256"], old["mode"], old["owner"]):
            continue
        consumers = Hostlist.parse((new or old)["consumers"])
        nodes = sorted(n for n in consumers if n in selected)
        if not nodes:
            continue
        where = str(Hostlist.from_names(nodes))
        change = ("added" if old is None else "removed" if new is None else "changed")
        out.append(Finding(where, "render", path, f"{change} by the spec",
                           f"as in the last render ({last_dir})", fixes.apply(where), PENDING))
    return out


# --- JUnit ----------------------------------------------------------------------------

def junit(report: DriftReport) -> bytes:
    """One test case per (node, aspect) compared: failed where anything drifted, skipped
    where it was not compared (the reason), passed otherwise; tolerated differences go to
    the case's system-out."""
    cases: dict[tuple[str, str], list[Finding]] = {k: [] for k in report.checked}
    for f in report.findings:
        cases.setdefault((f.node, f.aspect), []).append(f)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="estate-drift")
    failures = skipped = 0
    for (node, aspect), found in sorted(cases.items(), key=lambda kv: (kv[0][0], ASPECTS.index(kv[0][1]))):
        case = ET.SubElement(suite, "testcase", classname=f"estate-drift.{aspect}", name=node)
        drift = [f for f in found if f.status == DRIFT]
        if drift:
            failures += 1
            fail = ET.SubElement(case, "failure", message=f"{len(drift)} difference(s): " +
                                 "; ".join(f.what for f in drift)[:500])
            fail.text = "\n".join(f.line() for f in drift)
        elif found and all(f.status == SKIPPED for f in found) and not report.checked.get((node, aspect)):
            skipped += 1
            ET.SubElement(case, "skipped", message=found[0].actual)
        other = [f for f in found if f.status != DRIFT]
        if other:
            ET.SubElement(case, "system-out").text = "\n".join(f.line() for f in other)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", "0")
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)
