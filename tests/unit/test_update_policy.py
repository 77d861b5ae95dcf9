"""The update policy (estate/model/update_policy.py, slurm_conf/update-policy/) and
`estate diff` (estate/operate/diff/logic.py): every key Estate writes is classified for every release
of the catalogue, the policy is what the manuals say, and a change is classified as
Slurm needs it (the live proof: tests/live_slurm/test_diff.py)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from estate.catalogue import SLURM_SUITES
from estate.model.services import SLURMD_RESTART
from estate.operate.diff.logic import CONFS, _fields, _lines, diff, hostlist_of, unified_diff
from estate.operate.diff.order import batches
from estate.spec.hostlist import Hostlist
from estate.model import update_policy as up
from estate.pipeline import build
from estate.render import write_tree

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "stacks").glob("*.yaml")) + \
    sorted((ROOT / "tests" / "live_slurm").glob("*.yaml"))
SPECS = [p for p in SPECS if not p.name.startswith("Pulumi.")]
RELEASES = sorted(SLURM_SUITES)


def on_release(spec: Path, version: str, tmp: Path) -> Path:
    """The spec with slurm.version set, beside copies of the files it brings along."""
    data = yaml.safe_load(spec.read_text())
    data["slurm"]["version"] = version
    out = tmp / version / spec.name
    if not out.parent.exists():
        shutil.copytree(spec.parent, out.parent, ignore=shutil.ignore_patterns("*.pyc"))
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def written_keys(files: dict[str, bytes]) -> set[str]:
    """The policy keys of every line of the Slurm files: `Key` for slurm.conf's own,
    `node:Field` for a line's fields, `gres.conf:Key` for the other files'."""
    keys = set()
    for path, conf in CONFS.items():
        for line in _lines(files.get(path, b"")):
            fields = _fields(line)
            first = fields[0][0]
            kind = conf.records.get(first.lower())
            if kind is None:
                keys.add(conf.prefix + line.split("=", 1)[0].strip())
                continue
            keys.add(conf.prefix + first)
            prefix = f"{kind}:" if not conf.prefix else conf.prefix
            keys |= {prefix + k for k, _ in fields[1:]}
    return keys


@pytest.mark.parametrize("version", RELEASES)
def test_every_key_estate_writes_is_classified(version, tmp_path):
    """Render every example and live spec for the release; each key of the rendered
    Slurm files has a class. Fails for a key a template starts writing, or a release
    added to the catalogue, until the policy covers it."""
    seen, rendered = set(), 0
    for spec in SPECS:
        result = build(on_release(spec, version, tmp_path))
        if not result.ok:
            continue
        rendered += 1
        seen |= written_keys({p: a.content for p, a in result.artifacts.items()})
    assert rendered >= 4, f"only {rendered} specs render for {version}"
    assert {"partition:MaxTime", "node:RealMemory", "gres.conf:File", "AuthType",
            "topology.conf:SwitchName", "cgroup.conf:ConstrainCores"} <= seen
    unclassified = sorted(k for k in seen if up.policy(version, k) is None)
    assert unclassified == [], (f"keys Estate writes with no update policy for Slurm "
                                f"{version}: add them to estate/model/update_policy.py JUDGED "
                                f"(with the reason) or regenerate slurm_conf/update-policy/")


def test_an_unknown_key_is_unclassified():
    assert up.policy("22.05", "NoSuchKey") is None
    assert up.policy("24.11", "partition:NoSuchField") is None


@pytest.mark.parametrize("version", RELEASES)
def test_every_release_has_a_policy_that_names_its_manuals(version):
    assert version in up.versions()
    src = up.source(version)
    assert set(src) == {"slurm.conf", "gres.conf", "cgroup.conf", "topology.conf"}
    assert all("slurm" in s and ".5.gz" in s for s in src.values()), src


def test_the_manuals_rules_and_estates_judgements():
    p = up.policy
    # slurm.conf(5) 22.05, NODE CONFIGURATION: node changes restart both daemons
    assert p("22.05", "node:CPUs").cls == "restart_all"
    # ... but 22.05's slurmctld takes a RealMemory change on reconfigure (measured live)
    assert p("22.05", "node:RealMemory").cls == "reconfigure"
    assert p("22.05", "node:RealMemory").origin == "judged"
    assert "restarting both the slurmctld daemon and the slurmd daemons" in \
        p("22.05", "node").why
    # 24.11: "restarting or reconfiguring all slurmctld and slurmd daemons"
    assert p("24.11", "node:RealMemory").cls == "reconfigure"
    assert p("22.05", "partition:MaxTime").cls == p("24.11", "partition:MaxTime").cls \
        == "reconfigure"
    for version in RELEASES:
        assert p(version, "AuthType").cls == "restart_all_drain"
        for key in ("SlurmctldPort", "SlurmdPort", "SelectType"):
            assert p(version, key).cls == "restart_all", (version, key)
    assert p("22.05", "TopologyPlugin").cls == "restart_all"
    assert p("22.05", "SchedulerType").cls == "restart_slurmctld"
    assert p("22.05", "gres.conf:Type").cls == "restart_all"
    assert p("22.05", "SchedulerType").origin == "slurm.conf(5) entry"


def _manual(version: str) -> str | None:
    if version == "22.05":
        return "/"
    roots = sorted((ROOT / "build" / "slurm-root").glob(f"{SLURM_SUITES[version]}-*"))
    return str(roots[-1]) if roots else None


@pytest.mark.parametrize("version", RELEASES)
def test_the_policy_is_what_the_installed_manuals_say(version):
    """Derived, not restated: where the release's manuals are installed (the host's
    22.05, the 24.11 root), the script writes exactly the committed file."""
    root = _manual(version)
    man = Path(root or "/nonexistent") / "usr/share/man/man5/slurm.conf.5.gz"
    if root is None or not man.exists() or shutil.which("dpkg-query") is None:
        pytest.skip(f"slurm.conf(5) of {version} is not installed here")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/slurm-update-policy.py"),
                          *(["--root", root] if root != "/" else [])],
                         capture_output=True, text=True, check=True).stdout
    if version == "22.05" and "22.05" not in out:
        pytest.skip("the host's Slurm is not 22.05")
    assert json.loads(out) == json.loads((up.POLICY_DIR / f"{version}.json").read_text())


# --- estate diff ------------------------------------------------------------------------

def variant(tmp: Path, name: str, version: str, change=None) -> Path:
    data = yaml.safe_load((ROOT / "stacks" / "lab.yaml").read_text())
    data["slurm"]["version"] = version
    if change:
        change(data)
    out = tmp / f"{name}-{version}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def max_time(data):
    data["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"


def gpu_group(data):
    return next(n for n in data["nodes"] if n["hosts"] == "gpu[1-2]")


def more_nodes(data):
    gpu_group(data)["hosts"] = "gpu[1-3]"


def less_memory(data):
    gpu_group(data)["slurm"]["real_memory_mb"] = 7000


def actions(report) -> dict[str, str]:
    return {n: r.action for r in report.nodes for n in r.hosts}


@pytest.mark.parametrize("version", RELEASES)
def test_a_partitions_max_time_is_a_reconfigure(version, tmp_path):
    old = variant(tmp_path, "old", version)
    report = diff(old, variant(tmp_path, "new", version, max_time))
    assert [c.path for c in report.changes] == ["slurm/slurm.conf"]
    assert [(e.key, e.cls) for e in report.changes[0].effects] == \
        [("partition:MaxTime (gpu)", "reconfigure")]
    assert actions(report) == {"ctl1": "reconfigure", "gpu1": "reconfigure",
                               "gpu2": "reconfigure", "login1": "file"}
    text = report.changes[0].unified()
    assert "-PartitionName=gpu " in text and "+PartitionName=gpu " in text
    assert "MaxTime=2-00:00:00" in text


def test_a_new_node_restarts_every_daemon_before_23_11_and_reconfigures_after(tmp_path):
    before = diff(variant(tmp_path, "old", "22.05"), variant(tmp_path, "new", "22.05",
                                                             more_nodes))
    after = diff(variant(tmp_path, "old", "24.11"), variant(tmp_path, "new", "24.11",
                                                            more_nodes))
    a, b = actions(before), actions(after)
    assert (a["ctl1"], a["gpu1"], a["gpu3"]) == ("restart_slurmctld", "restart_slurmd",
                                                  "restart_slurmd")
    assert (b["ctl1"], b["gpu1"], b["gpu3"]) == ("reconfigure", "reconfigure",
                                                  "restart_slurmd")
    # the new node's files: its hosts entry everywhere, gres.conf and topology.conf
    paths = {c.path for c in after.changes}
    assert {"common/hosts", "slurm/gres.conf", "slurm/topology.conf"} <= paths


def more_cores(data):
    next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["cores_per_socket"] = 8


def restart_facts(side) -> dict[str, str]:
    """worker -> the path of the slurmd restart facts it consumes"""
    return {n: p for p, f in side.files.items() if p.startswith(SLURMD_RESTART)
            for n in f.consumers.names()}


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("change", [max_time, more_nodes, less_memory, more_cores])
def test_a_workers_restart_facts_change_exactly_where_the_diff_restarts_its_slurmd(
        version, change, tmp_path):
    """Configless workers install no slurm.conf: the facts are what makes their role (and
    the Pulumi step's trigger) restart slurmd, so they must change where estate diff says
    slurmd restarts, and nowhere else."""
    report = diff(variant(tmp_path, "old", version), variant(tmp_path, "new", version, change))
    old, new = restart_facts(report.old), restart_facts(report.new)
    assert new and set(new) == set(report.new.roles.slurmd.names())
    moved = {n for n in new if old.get(n) != new[n]}
    restarted = {n for n, a in actions(report).items()
                 if a in ("restart_slurmd", "drain_restart")}
    assert moved == restarted


def test_a_nodes_cores_restart_its_slurmd_on_22_05_only(tmp_path):
    """The case the facts were made for: 22.05 classes a node line's CPUs a restart of
    both daemons, 24.11 a reconfigure."""
    for version, restarts in (("22.05", True), ("24.11", False)):
        report = diff(variant(tmp_path, "old", version),
                      variant(tmp_path, "new", version, more_cores))
        assert (actions(report)["gpu1"] == "restart_slurmd") is restarts
        assert (restart_facts(report.old) != restart_facts(report.new)) is restarts


def test_a_line_split_in_two_restarts_no_slurmd(tmp_path):
    """One rack's memory changed (a reconfigure on both releases) splits its NodeName line
    from the others': the workers' restart facts stay as they were."""
    from bench.bench_check_render import big_spec
    from bench.bench_diff import changed
    spec = big_spec(racks=5)
    for version in RELEASES:
        spec["slurm"]["version"] = version
        old, new = tmp_path / f"old-{version}.yaml", tmp_path / f"new-{version}.yaml"
        old.write_text(yaml.safe_dump(spec, sort_keys=False))
        new.write_text(yaml.safe_dump(changed(spec, 1), sort_keys=False))
        report = diff(old, new)
        assert report.new.files["slurm/slurm.conf"].bytes().count(b"\nNodeName=") > \
            report.old.files["slurm/slurm.conf"].bytes().count(b"\nNodeName=")
        assert restart_facts(report.old) == restart_facts(report.new)
        assert not {a for a in actions(report).values()} & {"restart_slurmd", "drain_restart"}


def test_restart_facts_follow_gres_lines_that_split_a_node_line():
    """Lines that do not share the NodeName lines' hostlists are taken node by node."""
    from estate.model.slurm_files import slurmd_restart_facts
    files = {"slurm/slurm.conf": b"SlurmdPort=6818\nNodeName=n[1-4] CPUs=4 Gres=gpu:2\n",
             "slurm/gres.conf": b"NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1]\n"
                                b"NodeName=n[3-4] Name=gpu Type=l4 File=/dev/nvidia[0-1]\n"}
    for version in RELEASES:
        got = {str(h): t.decode() for h, t in
               slurmd_restart_facts(files, version, Hostlist.parse("n[1-5]"))}
        assert set(got) == {"n[1-2]", "n[3-4]", "n5"}
        assert "Type=a100" in got["n[1-2]"] and "Type=l4" in got["n[3-4]"]
        assert all("SlurmdPort=6818" in t for t in got.values())
        assert "Type=" not in got["n5"]


def test_a_nodes_memory_is_a_reconfigure_on_both_releases(tmp_path):
    """What slurmctld does (tests/live_slurm/test_diff.py), not the 22.05 manual's node
    rule; a node's CPUs keep that rule."""
    for version in RELEASES:
        acts = actions(diff(variant(tmp_path, "old", version),
                            variant(tmp_path, "new", version, less_memory)))
        assert (acts["ctl1"], acts["gpu1"]) == ("reconfigure", "reconfigure"), version


def test_a_nodes_cpus_restart_both_daemons_on_22_05(tmp_path):
    def more_cores(data):
        next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["cores_per_socket"] = 8
    acts = actions(diff(variant(tmp_path, "old", "22.05"),
                        variant(tmp_path, "new", "22.05", more_cores)))
    assert (acts["ctl1"], acts["gpu1"]) == ("restart_slurmctld", "restart_slurmd")


def test_no_change_and_against_the_applied_tree(tmp_path):
    old = variant(tmp_path, "old", "22.05")
    assert diff(old, variant(tmp_path, "same", "22.05")).changes == []
    result = build(old)
    write_tree(result.artifacts, tmp_path / "applied")
    assert diff(old, against=tmp_path / "applied").changes == []
    report = diff(variant(tmp_path, "new", "22.05", max_time), against=tmp_path / "applied")
    # the tree's headers name the old spec: a header alone is a file install, no more
    by_path = {c.path: c for c in report.changes}
    assert [e.key for e in by_path["slurm/slurm.conf"].effects] == ["partition:MaxTime (gpu)"]
    others = [e for p, c in by_path.items() if p != "slurm/slurm.conf" for e in c.effects]
    assert {e.action for e in others} <= {"file"}, [(e.artifact, e.action) for e in others]


def test_a_release_change_drains_and_restarts_everything(tmp_path):
    report = diff(variant(tmp_path, "old", "22.05"), variant(tmp_path, "new", "24.11"))
    acts = actions(report)
    assert acts["gpu1"] == "drain_restart" and acts["ctl1"] == "restart_slurmctld"


def test_the_cli_exit_codes_and_json(tmp_path):
    old = variant(tmp_path, "old", "22.05")
    cli = [sys.executable, "-m", "estate", "diff"]
    same = subprocess.run([*cli, str(old), str(old)], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr
    changed = subprocess.run([*cli, str(old), str(variant(tmp_path, "new", "22.05",
                                                          max_time)), "--output", "json"],
                             capture_output=True, text=True, cwd=ROOT)
    assert changed.returncode == 3, changed.stderr
    doc = json.loads(changed.stdout)
    assert doc["nodes"][0]["action"] == "reconfigure"
    assert [s["action"] for s in doc["steps"]] == ["file", "reconfigure"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [")
    bad = subprocess.run([*cli, str(old), str(broken)], capture_output=True, text=True)
    assert bad.returncode == 1 and "does not render" in bad.stdout


def test_the_unified_diff_numbers_lines_as_difflib_does_on_the_whole_file():
    import difflib
    a = "".join(f"line {i}\n" for i in range(2000))
    b = a.replace("line 1500\n", "line 1500 changed\n")
    whole = "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a", "b"))
    assert unified_diff(a, b, "a", "b") == whole


def test_workers_restart_in_batches_that_keep_each_partition_up(tmp_path):
    def more_cores(data):
        next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["cores_per_socket"] = 8
    report = diff(variant(tmp_path, "old", "22.05"),
                  variant(tmp_path, "new", "22.05", more_cores), keep_up=0.5)
    steps = [(s.action, str(s.hosts), s.batch) for s in report.steps()]
    # controllers first; gpu[1-2] make up both partitions: one at a time keeps half up
    assert steps == [("file", "login1", 0), ("restart_slurmctld", "ctl1", 0),
                     ("restart_slurmd", "gpu1", 1), ("restart_slurmd", "gpu2", 2)]


def test_batches_respect_every_partition_a_node_is_in():
    parts = {"all": Hostlist.parse("n[01-20]"), "small": Hostlist.parse("n[01-04]"),
             "one": Hostlist.parse("n20")}
    names = list(Hostlist.parse("n[01-20]").names())
    out = batches(names, parts, keep_up=0.75)
    assert sum(map(len, out)) == 20 and sorted(n for b in out for n in b) == names
    for b in out:
        assert sum(n in parts["all"] for n in b) <= 5       # 25% of 20
        assert sum(n in parts["small"] for n in b) <= 1     # 25% of 4
    assert len(out) == 4


def test_hostlist_of_is_from_names():
    for expr in ("gpu[00001-00300]", "a,b,n[1-100],n[200-299],x[008-012],x[9-11]"):
        names = list(Hostlist.parse(expr).names())
        assert hostlist_of(names) == Hostlist.from_names(names)
        assert hostlist_of(names[::-1]) == Hostlist.from_names(names[::-1])


def test_each_diff_renders_both_specs_as_they_are_now(tmp_path):
    """Nothing of an earlier run is kept: an old spec edited to the new one's content
    diffs as no change at once."""
    old, new = variant(tmp_path, "old", "22.05"), variant(tmp_path, "new", "22.05", max_time)
    assert diff(old, new).changed
    old.write_bytes(new.read_bytes())
    assert not diff(old, new).changed


def test_the_cli_default_share_is_the_orders():
    import estate.operate.diff.order
    import estate.operate.diff.cli
    assert estate.operate.diff.cli.KEEP_UP == estate.operate.diff.order.KEEP_UP
