"""What real slurmctld does with each thing `estate check` refuses on Slurm's account, or
the import changes (issue 48), on every release Estate renders for (22.05 from the host,
24.11 from the Debian 13 root): every "slurmctld refuses / ignores / does X" in a message
is held here to what slurmctld does, and the message to what it says.

- A partition named `all` is no keyword: slurmctld loads it and serves it (the check
  takes it).
- PartitionName=DEFAULT and NodeName=DEFAULT make no partition or node: they set defaults
  for the lines after them (the check refuses the names, saying so).
- NodeName=ALL stops slurmctld (the check quotes its fatal).
- A DefaultTime above MaxTime loads; slurmctld logs "DefaultTime exceeds MaxTime", drops
  the DefaultTime and gives a job without --time the MaxTime (EnforcePartLimits=NO or
  ALL alike). The spec the import writes (DefaultTime = MaxTime) does the same, saying so.

The sentences the messages use are entries of slurm_conf/refusals.json, each run on both
releases by tests/live_slurm/test_slurm_refusals.py; this module holds the import's side.
Each case runs slurmctld alone, as tests/live_slurm/test_import_roundtrip.py does (its
harness: private namespaces, the harness's paths, user and munge socket).
"""
from __future__ import annotations

import re

import pytest

from estate.check.nodes import _RESERVED as NODE_RESERVED
from estate.importer.mapping import Sources, import_slurm
from estate.importer.partitions import DEFAULT_ABOVE_MAX
from estate.render.slurm import render_slurm
from estate.spec.model import Spec
from estate.spec.resolved import Estate
from tests.live_slurm.test_import_roundtrip import (  # noqa: F401 (fixtures)
    _slurmctld, munge, release)
from tests.unit.checkutil import findings_for

pytestmark = pytest.mark.live_slurm

HEAD = ("ClusterName=probe\nSlurmctldHost=head\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\nProctrackType=proctrack/linuxproc\n")
NODES = "NodeName=n[1-2] NodeAddr=127.0.0.[11-12] CPUs=2 RealMemory=1000 State=UNKNOWN\n"
# sbatch from a directory that exists in either root; the job never runs (no slurmd)
SUBMIT = r"""
cd /tmp
$in_root sbatch -p p --wrap true 2>&1 || true; echo ===
for i in $(seq 50); do
  $in_root scontrol -o show job > "$RUN/jobs" 2>&1 || true
  grep -q "Reason=None" "$RUN/jobs" || break
  sleep 0.2
done
cat "$RUN/jobs"
"""


def _probe(conf: str, probe: str, tmp_path, munge, release, name: str = "run",
           topology: str | None = None):
    return _slurmctld(conf, topology, tmp_path / name, munge, release, probe)


def _ok(proc) -> str:
    assert proc.returncode == 0, f"slurmctld did not run: {proc.stderr}\n{proc.stdout}"
    return proc.stdout


def _import_findings(conf: str) -> dict[str, str]:
    doc, _ = import_slurm(Sources(conf))
    return {f.id: f.message for f in findings_for(doc)}


def test_partition_named_all_is_loaded_and_served(release, munge, tmp_path):
    conf = HEAD + NODES + "PartitionName=all Nodes=n[1-2] Default=YES MaxTime=60\n"
    out = _ok(_probe(conf, "$in_root scontrol -o show partition all; "
                     "$in_root sinfo -h -p all -o '%P %D'", tmp_path, munge, release))
    assert re.search(r"^PartitionName=all .*Nodes=n\[1-2\]", out, re.M), out
    assert re.search(r"^all\* 2$", out, re.M), out
    assert not {"slurm.reserved_name", "nodes.reserved_name"} & set(_import_findings(conf))


def test_partition_named_default_sets_defaults_and_is_no_partition(release, munge, tmp_path):
    conf = HEAD + NODES + "PartitionName=DEFAULT MaxTime=30\nPartitionName=p Nodes=n[1-2]\n"
    out = _ok(_probe(conf, "$in_root scontrol -o show partition; "
                     "$in_root scontrol show partition DEFAULT 2>&1 || true",
                     tmp_path, munge, release))
    shown = re.findall(r"^PartitionName=(\S+)", out, re.M)
    assert shown == ["p"] and "MaxTime=00:30:00" in out, out
    assert "Partition DEFAULT not found" in out, out


def test_node_named_default_sets_defaults_and_is_no_node(release, munge, tmp_path):
    conf = HEAD + ("NodeName=DEFAULT CPUs=2 RealMemory=1000\nNodeName=n1 NodeAddr=127.0.0.11\n"
                   "PartitionName=p Nodes=n1\n")
    out = _ok(_probe(conf, "$in_root scontrol -o show node", tmp_path, munge, release))
    assert re.findall(r"^NodeName=(\S+)", out, re.M) == ["n1"] and "CPUTot=2 " in out, out
    assert "no node of that name" in NODE_RESERVED["default"]


def test_node_named_all_stops_slurmctld(release, munge, tmp_path):
    conf = HEAD + "NodeName=ALL CPUs=2\nPartitionName=p Nodes=ALL\n"
    proc = _probe(conf, "$in_root scontrol -o show node", tmp_path, munge, release)
    said = "'ALL' is a reserved word disallowed for use with NodeName"
    assert proc.returncode != 0 and f"fatal: {said}" in proc.stderr, proc.stderr
    assert said in NODE_RESERVED["all"] and "refuses to start" in NODE_RESERVED["all"]


def _jobs(out: str) -> tuple[str, str]:
    submitted, jobs = out.split("===\n", 1)
    return submitted, jobs


ABOVE = "PartitionName=p Nodes=n[1-2] Default=YES MaxTime=10 DefaultTime=20\n"


@pytest.mark.parametrize("enforce", ["NO", "ALL"])
def test_default_time_above_max_time_is_dropped_for_the_max_time(enforce, release, munge,
                                                                 tmp_path):
    """slurmctld loads it, says so only in its log, and gives a job without --time the
    MaxTime, under EnforcePartLimits=NO (Slurm's default) and ALL alike: nothing refuses
    the job (the check once said so)."""
    conf = HEAD + f"EnforcePartLimits={enforce}\n" + NODES + ABOVE
    probe = (SUBMIT + "echo ===; $in_root scontrol -o show partition p; "
             "grep -h 'DefaultTime exceeds MaxTime' \"$RUN/slurmctld.log\" || true")
    submitted, rest = _jobs(_ok(_probe(conf, probe, tmp_path, munge, release)))
    jobs, shown = rest.split("===\n", 1)
    assert submitted.startswith("Submitted batch job"), submitted
    assert "TimeLimit=00:10:00" in jobs and "PartitionTimeLimit" not in jobs, jobs
    assert "DefaultTime=NONE" in shown and "MaxTime=00:10:00" in shown, shown
    assert "partition p DefaultTime exceeds MaxTime (20 > 10)" in shown, shown
    assert "logs 'DefaultTime exceeds MaxTime' and drops the DefaultTime" in DEFAULT_ABOVE_MAX
    assert "gets the MaxTime" in DEFAULT_ABOVE_MAX


def test_imported_default_time_runs_a_job_within_max_time(release, munge, tmp_path):
    """The spec the import writes gives a job without --time the MaxTime, as slurmctld did
    with the source, under either EnforcePartLimits."""
    source = HEAD + NODES + ABOVE
    doc, report = import_slurm(Sources(source), version=release[0])
    assert any(d.kind == "changed" and d.text.startswith("DefaultTime=20") for d in
               report.dropped)
    rendered = next(a.content.decode() for a in render_slurm(Estate(Spec.model_validate(doc)))
                    if a.path == "slurm/slurm.conf")
    for enforce in ("NO", "ALL"):
        conf = re.sub(r"^EnforcePartLimits=.*\n", "", rendered, flags=re.M)
        conf += f"EnforcePartLimits={enforce}\n"
        submitted, jobs = _jobs(_ok(_probe(conf, SUBMIT, tmp_path, munge, release,
                                           f"imported-{enforce}")))
        assert submitted.startswith("Submitted batch job"), submitted
        assert "TimeLimit=00:10:00" in jobs and "PartitionTimeLimit" not in jobs, jobs


SHOW = "$in_root scontrol -o show node; $in_root scontrol -o show partition"


@pytest.mark.parametrize("lines", ["PartitionName=p Nodes=n[1-3]\n",
                                   "NodeSet=ns Nodes=n[1-3]\nPartitionName=p Nodes=ns\n"])
def test_partition_naming_an_undefined_node_stops_slurmctld(lines, release, munge,
                                                            tmp_path):
    """What the import's report says where it leaves such hosts out of a partition or a
    node set (estate/importer/partitions.py, _defined)."""
    proc = _probe(HEAD + NODES + lines, SHOW, tmp_path, munge, release)
    said = "fatal: Invalid node names in partition p"
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr
    _, report = import_slurm(Sources(HEAD + NODES + lines))
    assert any("('fatal: Invalid node names in partition')" in d.reason
               for d in report.dropped)


def test_switch_without_members_stops_slurmctld(release, munge, tmp_path):
    """What the import's report says where it leaves out a switch left empty
    (estate/importer/mapping.py, _without_empty)."""
    conf = HEAD + "TopologyPlugin=topology/tree\n" + NODES + "PartitionName=p Nodes=n[1-2]\n"
    topology = ("SwitchName=top Switches=leaf[1-2]\nSwitchName=leaf1 Nodes=n[1-2]\n"
                "SwitchName=leaf2\n")
    proc = _probe(conf, SHOW, tmp_path, munge, release, topology=topology)
    said = "fatal: something wrong with opening/reading"
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr
    _, report = import_slurm(Sources(conf, topology=topology.replace(
        "SwitchName=leaf2\n", "SwitchName=leaf2 Nodes=gone1\n")))
    assert any(f"('{said} topology.conf')" in d.reason for d in report.dropped)


def test_cr_memory_alone_stops_slurmctld(release, munge, tmp_path):
    """What slurm.select_type_parameters says of CR_Memory under select/cons_tres."""
    conf = (HEAD.replace("CR_Core", "CR_Memory") + NODES + "PartitionName=p Nodes=n[1-2]\n")
    proc = _probe(conf, SHOW, tmp_path, munge, release)
    said = "Invalid SelectTypeParameters: CR_MEMORY"
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr
