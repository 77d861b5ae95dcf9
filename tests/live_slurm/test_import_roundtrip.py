"""estate import, proven on real slurmctld (issue 15), 22.05 and 24.11.

For each configuration in tests/data/slurm-sites/ and each release Estate renders for
(22.05 from the host, 24.11 from the Debian 13 root the namespace lab uses, chrooted):
slurmctld loads the original, then the slurm.conf (and topology.conf) rendered for that
release from the spec `estate import` wrote. `scontrol -o show node/partition/topology`
must agree, except where the import reported a difference on the object's source line.

Where 24.11 differs, it is asserted, not skipped: it refuses SelectType=select/cons_res
(REFUSED: the refusal is checked, then the site's file with cons_tres is the baseline),
and it shows a partition of Nodes=ALL as NodeSets=ALL, which the import reports as a
change (the written node list does not take in dynamic nodes added later).

Only slurmctld runs (no slurmd: scontrol shows the configured nodes), one at a time, in a
private network, UTS and mount namespace whose hostname is the controller's and whose
loopback carries the controller's address. Paths, the service user and authentication
are the harness's in both configurations (the same override on both sides), so that any
difference left is one the import made.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from estate.importer.mapping import ImportFailed, Sources, import_slurm
from estate.importer.parse import parse
from estate.importer.roundtrip import report_differences
from estate.catalogue import HOST_SUITE, SLURM_SUITES
from estate.lab.netns import munge_up, release_root
from estate.render.slurm import render_slurm
from estate.spec.model import Spec
from estate.spec.resolved import Estate
from tests.live_slurm.conftest import RELEASES

pytestmark = pytest.mark.live_slurm
SITES = Path(__file__).resolve().parents[1] / "data" / "slurm-sites"
CONFS = sorted(p for p in SITES.glob("*.conf")
               if not p.name.endswith((".topology.conf", ".gres.conf")))
TOOLS = ("slurmctld", "scontrol", "munged", "unshare", "ip", "setpriv")
# Sites whose design Estate cannot express (several slurmd on one host): the import
# refuses them, naming the lines, and slurmctld is shown to load them.
UNEXPRESSIBLE = {"schedmd-faq-multiple-slurmd", "schedmd-programmer-guide"}
# Keys the harness sets (or removes) on both sides: where state and logs go, who runs
# slurmctld, how scontrol authenticates. None of them changes a node, partition or switch.
HARNESS = ("statesavelocation", "slurmdspooldir", "slurmctldpidfile", "slurmdpidfile",
           "slurmctldlogfile", "slurmdlogfile", "plugindir", "authtype", "authinfo",
           "authalttypes", "authaltparameters", "slurmuser", "accountingstoragetype",
           "accountingstoragehost", "accountingstorageport", "accountingstorageenforce",
           "accountingstorageuser", "accountingstoragepass", "accountingstoragetres", "jobcomploc", "jobcomptype",
           "jobcredentialprivatekey", "jobcredentialpubliccertificate", "include",
           # the site's controller-side programs (slurm.extra keeps them): not here, and
           # 24.11's prep/script stops at a missing one
           "prologslurmctld", "epilogslurmctld")
# scontrol fields that follow from others (compared through those) or from the run.
DERIVED = {"CfgTRES", "AllocTRES", "TRES", "TotalCPUs", "TotalNodes", "CPULoad", "CPUAlloc",
           "AllocMem", "FreeMem", "LastBusyTime", "BootTime", "SlurmdStartTime",
           "ResumeAfterTime", "Reason", "State", "CPUEfctv", "OS", "Arch", "Version",
           "Owner", "MCS_label", "Comment", "Extra", "CurrentWatts", "AveWatts",
           "BillingWeights", "CapWatts", "ExtSensorsJoules",
           "ExtSensorsWatts", "ExtSensorsTemp", "Partitions"}
# scontrol node and partition fields a global slurm.conf key sets for every object: the
# partitions' power-saving fields show where ResumeProgram is set
GLOBAL = {"Port": "slurmdport", "PowerDownOnIdle": "resumeprogram",
          "ResumeTimeout": "resumeprogram", "SuspendTime": "resumeprogram",
          "SuspendTimeout": "resumeprogram"}
# scontrol field -> the slurm.conf key a report names for it
ALIASES = {"CPUTot": "cpus", "AvailableFeatures": "feature", "ActiveFeatures": "feature",
           "DefMemPerNode": "defmempercpu", "PriorityJobFactor": "priority",
           "PriorityTier": "priority", "JobDefaults": "pergpu",
           "Nodes": "nodes", "Gres": "gres", "NodeAddr": "nodeaddr",
           "NodeSets": "nodes"}     # 24.11 shows Nodes=ALL as NodeSets=ALL


@pytest.fixture(scope="module")
def munge():
    if os.geteuid() != 0:
        pytest.skip("the import round trip needs root (namespaces, munged)")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (make test installs Debian's slurm)")
    # munged refuses a socket below pytest's private (0700) temporary directories
    state = Path(tempfile.mkdtemp(prefix="estate-import-rt.", dir="/tmp"))
    state.chmod(0o755)
    try:
        munge_up(state)
        yield state / "munge" / "munge.socket.2"
    finally:
        pid = state / "munge" / "munged.pid"
        if pid.exists():
            os.kill(int(pid.read_text().strip()), signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)


# What a release refuses in a site's own slurm.conf: release -> entries of the line it
# stops at ("line"), what slurmctld says, where needed a second line that must be there
# too ("when"), and the baseline's lines instead ("instead": pattern -> replacement).
# select/cons_res is gone since 23.11, and 24.11 stops at it; select/linear beside
# topology/tree too. Estate renders select/cons_tres, so the baseline the import is held
# to is the site's file with those lines changed as the import changes them (linear's
# CR_Memory alone is refused by cons_tres), and each refusal is asserted first.
REFUSED = {"24.11": [
    {"line": r"^SelectType=select/cons_res$",
     "instead": {r"^SelectType=select/cons_res$": "SelectType=select/cons_tres"},
     "says": "fatal: Can't find plugin for select/cons_res"},
    {"line": r"^SelectType=select/linear$", "when": r"^TopologyPlugin=topology/tree$",
     "instead": {r"^SelectType=select/linear$": "SelectType=select/cons_tres",
                 r"^SelectTypeParameters=CR_Memory$": "SelectTypeParameters=CR_Core_Memory"},
     "says": "fatal: select/linear with topology/tree is not supported"}]}


def _baseline(text: str, topology: str | None, tmp: Path, sock: Path,
              release: tuple[str, str]) -> str:
    """The site's slurm.conf as the release can load it (REFUSED)."""
    for i, entry in enumerate(REFUSED.get(release[0], [])):
        if re.search(entry["line"], text, re.M) and re.search(entry.get("when", ""), text,
                                                              re.M):
            refused = _slurmctld(text, topology, tmp / f"refused{i}", sock, release)
            assert refused.returncode != 0 and entry["says"] in refused.stderr, \
                refused.stderr
            for pattern, line in entry["instead"].items():
                text = re.sub(pattern, line, text, flags=re.M)
    return text


@pytest.fixture(scope="module", params=RELEASES)
def release(request, munge) -> tuple[str, str]:
    """(Slurm release, root its slurmctld runs from): the host's 22.05 from '/', 24.11
    from the Debian 13 root the namespace lab uses (scripts/slurm-root.sh)."""
    version = request.param
    if SLURM_SUITES[version] != HOST_SUITE:
        missing = [t for t in ("debootstrap", "chroot") if shutil.which(t) is None]
        if missing:
            pytest.skip(f"Slurm {version} runs from a debootstrapped root: needs "
                        f"{', '.join(missing)}")
    return version, release_root(version)


_KEY = re.compile(r"^\s*(\w+)\s*=")     # Slurm allows blanks around '='


def _harness_conf(text: str, run: Path, sock: Path) -> str:
    keep = [ln for ln in text.splitlines()
            if not ((m := _KEY.match(ln)) and m.group(1).lower() in HARNESS)]
    return "\n".join(keep + [
        f"StateSaveLocation={run}/state", f"SlurmdSpoolDir={run}/spool",
        f"SlurmctldPidFile={run}/slurmctld.pid", f"SlurmctldLogFile={run}/slurmctld.log",
        f"SlurmdPidFile={run}/slurmd.pid", f"SlurmdLogFile={run}/slurmd.log",
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "SlurmUser=root",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none"]) + "\n"


def _names(text: str) -> list[str]:
    from estate.spec import hostlist
    out = []
    for line in parse(text):
        params = line.params()
        if line.keyword == "nodename" and line.name.upper() != "DEFAULT":
            out += hostlist.expand(line.name)
            for key in ("nodeaddr", "nodehostname"):
                if key in params:
                    out += [a for a in hostlist.expand(params[key][1])
                            if not re.match(r"^[0-9.]+$", a)]
        if line.keyword in ("slurmctldhost", "controlmachine", "backupcontroller",
                            "controladdr", "backupaddr"):
            out.append(line.name.partition("(")[0])
    return out


def _controller(text: str) -> tuple[str, str]:
    """(name, address) of the primary: SlurmctldHost=name(addr), or ControlMachine with
    a ControlAddr line where that is an address (a name resolves as the controller's)."""
    lines = parse(text)
    addr = next((ln.name for ln in lines if ln.keyword == "controladdr"
                 and re.match(r"^[0-9.]+$", ln.name)), "")
    for line in lines:
        if line.keyword == "slurmctldhost":
            name, _, given = line.name.partition("(")
            return name, given.rstrip(")")
        if line.keyword == "controlmachine":
            return line.name, addr
    raise AssertionError("no controller")


_SCRIPT = r"""
set -e
ip link set lo up
# getaddrinfo(AI_ADDRCONFIG), which slurmctld binds with, needs a non-loopback address
ip link add est0 type dummy 2>/dev/null || ip link add est0 type veth peer name est1
ip addr add 10.255.255.1/24 dev est0
ip link set est0 up
[ -n "$ADDR" ] && ip addr add "$ADDR/32" dev lo
hostname "$CTL"
in_root=
if [ -n "$ROOT" ]; then
  # another release's Slurm from its root: this namespace's /proc, /sys and /dev, and the
  # run and munge directories at their own paths on a private /tmp (nothing lands in the
  # cached root but the /etc/hosts mount point the namespace lab makes as well)
  for d in /proc /sys /dev; do mount --rbind "$d" "$ROOT$d"; done
  mount -t tmpfs tmpfs "$ROOT/tmp"
  mkdir -p "$ROOT$RUN" "$ROOT$MUNGE"
  mount --bind "$RUN" "$ROOT$RUN"
  mount --bind "$MUNGE" "$ROOT$MUNGE"
  [ -e "$ROOT/etc/hosts" ] || : > "$ROOT/etc/hosts"
  mount --bind "$RUN/hosts" "$ROOT/etc/hosts"
  in_root="chroot $ROOT"
else
  mount --bind "$RUN/hosts" /etc/hosts
fi
export SLURM_CONF="$RUN/slurm.conf"
$in_root slurmctld -D -f "$SLURM_CONF" > "$RUN/slurmctld.out" 2>&1 &
pid=$!
for i in $(seq 100); do
  $in_root scontrol ping 2>/dev/null | grep -q "is UP" && break
  kill -0 $pid 2>/dev/null || { cat "$RUN/slurmctld.out" >&2; exit 3; }
  sleep 0.2
done
show() {
  $in_root slurmctld -V; echo ===
  $in_root scontrol -o show node; echo ===; $in_root scontrol -o show partition; echo ===
  $in_root scontrol -o show topology || true; echo ===
  $in_root scontrol show config | grep -E '^(DependencyParameters|PreemptParameters|SchedulerParameters) ' || true
}
# PROBE: other commands to run against the running slurmctld ($in_root before each)
eval "${PROBE:-show}"
kill $pid; wait $pid || true
"""


def _run(conf: str, topology: str | None, run: Path, sock: Path,
         release: tuple[str, str]) -> list[list[str]]:
    """scontrol's nodes, partitions and switches from the release's slurmctld (which
    must say it is that release) loading conf."""
    proc = _slurmctld(conf, topology, run, sock, release)
    assert proc.returncode == 0, f"slurmctld on {run}: {proc.stderr}\n{proc.stdout}"
    said, *parts = proc.stdout.split("===\n")
    assert said.startswith(f"slurm-wlm {release[0]}."), said
    return [[ln for ln in part.splitlines() if ln.strip()] for part in parts]


def _slurmctld(conf: str, topology: str | None, run: Path, sock: Path,
               release: tuple[str, str], probe: str = "",
               files: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """slurmctld on conf in its own namespaces; once it answers, the probe's commands (a
    shell snippet, $in_root before each command; default: the scontrol listing _run
    reads), then it is stopped. files: more files next to slurm.conf (gres.conf)."""
    run.mkdir(parents=True)
    (run / "state").mkdir()
    (run / "slurm.conf").write_text(_harness_conf(conf, run, sock))
    if topology is not None:
        (run / "topology.conf").write_text(topology)
    for name, text in (files or {}).items():
        (run / name).write_text(text)
    ctl, addr = _controller(conf)
    # every name the configuration gives resolves locally: no look-up waits in the run
    names = " ".join(sorted(set(_names(conf)) - {ctl, "localhost"}))
    (run / "hosts").write_text(f"127.0.0.1 localhost {names}\n{addr or '127.0.0.1'} {ctl}\n")
    root = release[1]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RUN": str(run), "CTL": ctl,
           "ADDR": addr if re.match(r"^[0-9.]+$", addr) else "",
           "ROOT": "" if root == "/" else root, "MUNGE": str(sock.parent), "PROBE": probe}
    return subprocess.run(["unshare", "--net", "--uts", "--mount", "--propagation",
                           "private", "sh", "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=60)


def _objects(lines: list[str]) -> dict[str, dict[str, str]]:
    """scontrol -o lines -> name -> fields (values end where the next Key= starts)."""
    out = {}
    for line in lines:
        fields = dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", line))
        name = next(iter(fields.values()), "")
        out[name] = fields
    return out


def _explained(report, name: str, field: str) -> bool:
    """A report entry names the object and the key (or, for a node, a DownNodes line
    names it: its State)."""
    key = ALIASES.get(field, field).lower()
    if field in GLOBAL:
        return any(d.text.lower().startswith(GLOBAL[field] + "=") for d in report.dropped)
    named = re.compile(rf"(^|[=( ,]){re.escape(name.lower())}($|[) ,])")
    for d in report.dropped:
        text = d.text.lower()
        if named.search(text) and (key in text or key in d.reason.lower()
                                   or text.startswith("downnodes")):
            return True
    return False


def _unexplained(kind, theirs, ours, report) -> list[str]:
    out = []
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name, {}), ours.get(name, {})
        for field in sorted((set(a) | set(b)) - DERIVED):
            if a.get(field) != b.get(field) and not _explained(report, name, field):
                out.append(f"{kind} {name}: {field} {a.get(field)!r} -> {b.get(field)!r}")
    return out


@pytest.mark.parametrize("conf", CONFS, ids=[p.stem for p in CONFS])
def test_import_round_trip(conf, release, munge, tmp_path):
    text = conf.read_text()
    topo_path = conf.with_name(conf.stem + ".topology.conf")
    topology = topo_path.read_text() if topo_path.exists() else None
    gres_path = conf.with_name(conf.stem + ".gres.conf")
    gres = gres_path.read_text() if gres_path.exists() else None
    try:
        doc, report = import_slurm(Sources(text, gres=gres, topology=topology,
                                           slurm_name=conf.name), version=release[0],
                                   can_read=lambda path: False)
    except ImportFailed as exc:
        # a design Estate cannot express: slurmctld loads it all the same, and the import
        # says so in one sentence that names the lines
        assert conf.stem in UNEXPRESSIBLE, exc
        shown = _run(_baseline(text, topology, tmp_path, munge, release), topology,
                     tmp_path / "original", munge, release)
        assert shown[0] and shown[1], f"slurmctld showed no nodes or partitions: {shown}"
        assert re.search(r"NodeName lines? [0-9]", str(exc)) and "\n" not in str(exc), exc
        return
    report_differences(text, doc, report, conf.name)
    rendered = {a.path: a.content.decode()
                for a in render_slurm(Estate(Spec.model_validate(doc)))}
    baseline = _baseline(text, topology, tmp_path, munge, release)
    before = _run(baseline, topology, tmp_path / "original", munge, release)
    after = _run(rendered["slurm/slurm.conf"], rendered.get("slurm/topology.conf"),
                 tmp_path / "imported", munge, release)
    assert before[0] and before[1], f"slurmctld showed no nodes or partitions: {before}"
    hosts = _hosts_of_lines(text)
    problems = _moved_options(report, _config(before[3]), _config(after[3]))
    for kind, a, b in zip(("node", "partition", "switch"), before, after):
        theirs, ours = _objects(a), _objects(b)
        if kind == "node":
            problems += _node_problems(theirs, ours, report, hosts)
        else:
            problems += _unexplained(kind, theirs, ours, report)
    assert not problems, "\n".join(problems)


def _config(lines: list[str]) -> dict[str, set[str]]:
    """scontrol show config's option lists: key -> its comma-separated options."""
    out = {}
    for line in lines:
        key, _, value = line.partition("=")
        out[key.strip()] = {o for o in value.strip().split(",") if o and o != "(null)"}
    return out


def _moved_options(report, theirs: dict, ours: dict) -> list[str]:
    """Each SchedulerParameters option the import moved (reported as changed) is where
    slurmctld reads it now, under its new name, in the rendered configuration."""
    out = []
    for d in report.dropped:
        moved = re.match(r"SchedulerParameters (\w+).*", d.text)
        to = re.match(r"written as (\w+)=(\w+)", d.reason)
        if d.kind == "changed" and moved and to:
            key, option = to.groups()
            if option not in ours.get(key, set()):
                out.append(f"{d.text}: slurmctld shows {key}={sorted(ours.get(key, []))}")
    return out


def _hosts_of_lines(text: str) -> dict[str, list[int]]:
    """host -> the numbers of the NodeName lines (and DEFAULT lines before) that set it."""
    from estate.spec import hostlist
    out: dict[str, list[int]] = {}
    defaults: list[int] = []
    for line in parse(text):
        if line.keyword != "nodename":
            continue
        if line.name.upper() == "DEFAULT":
            defaults.append(line.number)
            continue
        for h in hostlist.expand(line.name):
            out[h] = defaults + [line.number]
    return out


def _node_problems(theirs, ours, report, hosts) -> list[str]:
    out = []
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name, {}), ours.get(name, {})
        lines = set(hosts.get(name, []))
        for field in sorted((set(a) | set(b)) - DERIVED):
            if a.get(field) == b.get(field):
                continue
            key = ALIASES.get(field, field).lower()
            if not any(d.line in lines and (key in d.text.lower() or key in d.reason.lower())
                       for d in report.dropped) and \
                    not _explained(report, name, field):
                out.append(f"node {name}: {field} {a.get(field)!r} -> {b.get(field)!r}")
    return out


DEPENDS = ("ClusterName=deps\nSlurmctldHost=head\nDebugFlags=Dependency\nSlurmctldDebug=debug\n"
           "SchedulerParameters=bf_continue,kill_invalid_depend,max_depend_depth=3\n"
           "NodeName=n[1-2] CPUs=2 RealMemory=1000\nPartitionName=p Nodes=n[1-2] Default=YES\n")


def _depend_policy(run: Path) -> str:
    log = (run / "slurmctld.log").read_text() + (run / "slurmctld.out").read_text()
    return re.search(r"init_depend_policy: (.*)", log).group(1)


def test_moved_dependency_options_take_effect_where_the_import_writes_them(release, munge,
                                                                           tmp_path):
    """slurmctld ignores kill_invalid_depend and max_depend_depth under SchedulerParameters
    (moved in 20.02); the spec the import writes has them where they take effect."""
    doc, report = import_slurm(Sources(DEPENDS), version=release[0])
    conf = render_slurm(Estate(Spec.model_validate(doc)))
    rendered = next(a.content.decode() for a in conf if a.path == "slurm/slurm.conf")
    _run(DEPENDS, None, tmp_path / "original", munge, release)
    _run(rendered, None, tmp_path / "imported", munge, release)
    assert "kill_invalid_depend is set to 0" in _depend_policy(tmp_path / "original")
    assert "max_depend_depth is set to 10" in _depend_policy(tmp_path / "original")
    assert "kill_invalid_depend is set to 1" in _depend_policy(tmp_path / "imported")
    assert "max_depend_depth is set to 3" in _depend_policy(tmp_path / "imported")
    assert {d.text for d in report.dropped if d.kind == "changed"} >= {
        "SchedulerParameters kill_invalid_depend", "SchedulerParameters max_depend_depth=3"}
