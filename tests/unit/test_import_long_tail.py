"""estate import on the long tail (issue 48): what real slurmctld runs becomes a spec that
checks clean, or is refused in one sentence naming the lines Estate cannot express. The
live tier (tests/live_slurm/test_import_refusals.py) shows what slurmctld does with each."""
from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from estate.cli import app
from estate.importer.mapping import ImportFailed, Sources, import_slurm
from estate.importer.settings import STATE_DIR

HEAD = "ClusterName=tail\nSlurmctldHost=head(10.2.0.1)\n"


def _errors(text: str, tmp_path) -> list[str]:
    """The error ids `estate check` gives the spec `estate import` writes from text."""
    conf, out = tmp_path / "slurm.conf", tmp_path / "spec.yaml"
    conf.write_text(text)
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    check = CliRunner().invoke(app, ["check", str(out), "--output", "json"])
    return [f["id"] for f in json.loads(check.output) if f["severity"] == "error"]


def test_class_names_say_which_layout_differs(tmp_path):
    text = HEAD + ("NodeName=a[1-2] NodeAddr=10.2.0.[11-12] Sockets=2 CoresPerSocket=16 "
                   "ThreadsPerCore=1 RealMemory=64000\n"
                   "NodeName=b[1-2] NodeAddr=10.2.0.[21-22] Sockets=1 CoresPerSocket=16 "
                   "ThreadsPerCore=2 RealMemory=64000\n"
                   "NodeName=c1 NodeAddr=10.2.0.31 CPUs=8 RealMemory=1000\n"
                   "PartitionName=p Nodes=a[1-2],b[1-2],c1\n")
    doc, _ = import_slurm(Sources(text))
    names = [c["name"] for c in doc["node_classes"]]
    assert names[:3] == ["c32-m64000-s2c16t1", "c32-m64000-s1c16t2", "c8-m1000"]
    assert _errors(text, tmp_path) == []


@pytest.mark.parametrize("where", ["/tmp", "/var/spool", "/tmp/slurm/state", "/var/spool/"])
def test_system_state_directory_becomes_a_dedicated_one(where, tmp_path):
    text = HEAD + (f"StateSaveLocation={where}\nNodeName=n1 NodeAddr=10.2.0.11 CPUs=2\n"
                   "PartitionName=p Nodes=n1\n")
    doc, report = import_slurm(Sources(text))
    assert doc["slurm"]["state_dir"] == STATE_DIR == "/var/spool/slurmctld"
    entry = next(d for d in report.dropped if d.line == 3)
    assert entry.kind == "changed" and f"to {STATE_DIR}" in entry.reason
    assert "move its state files" in entry.reason
    assert _errors(text, tmp_path) == []


def test_own_state_directory_is_kept():
    doc, report = import_slurm(Sources(HEAD + "StateSaveLocation=/var/lib/slurm/ctld\n"
                                       "NodeName=n1 CPUs=2\nPartitionName=p Nodes=n1\n"))
    assert doc["slurm"]["state_dir"] == "/var/lib/slurm/ctld"
    assert not any(d.line == 3 for d in report.dropped)


def test_partition_named_all_checks_clean(tmp_path):
    text = HEAD + "NodeName=n[1-2] NodeAddr=10.2.0.[11-12] CPUs=2\nPartitionName=all Nodes=ALL\n"
    assert _errors(text, tmp_path) == []


@pytest.mark.parametrize("given,written", [
    ("MaxTime=1-00:00:00 DefaultTime=2-00:00:00", "1-00:00:00"),
    ("MaxTime=30 DefaultTime=UNLIMITED", "30")])
def test_default_time_above_max_time_becomes_the_max(given, written, tmp_path):
    text = HEAD + f"NodeName=n1 NodeAddr=10.2.0.11 CPUs=2\nPartitionName=p Nodes=n1 {given}\n"
    doc, report = import_slurm(Sources(text))
    part = doc["slurm"]["partitions"][0]
    assert part["default_time"] == part["max_time"] == written
    entry = next(d for d in report.dropped if d.text.startswith("DefaultTime="))
    assert entry.kind == "changed" and entry.line == 4 and "(PartitionName=p)" in entry.text
    assert "a job without --time gets the MaxTime" in entry.reason
    assert _errors(text, tmp_path) == []


def test_default_time_from_the_default_line_is_reported_on_the_partition():
    text = HEAD + ("NodeName=n1 CPUs=2\nPartitionName=DEFAULT DefaultTime=2:00:00\n"
                   "PartitionName=short Nodes=n1 MaxTime=1:00:00\n"
                   "PartitionName=long Nodes=n1 MaxTime=4:00:00\n")
    doc, report = import_slurm(Sources(text))
    assert [p["default_time"] for p in doc["slurm"]["partitions"]] == ["1:00:00", "2:00:00"]
    assert [d.line for d in report.dropped if d.text.startswith("DefaultTime=")] == [5]


@pytest.mark.parametrize("nodes,lines", [
    ("NodeName=n1 NodeAddr=10.2.0.11 Port=17001 CPUs=2\n"
     "NodeName=n2 NodeAddr=10.2.0.11 Port=17002 CPUs=2\n", "NodeName lines 3, 4 (n1, n2)"),
    ("NodeName=n[1-4] NodeHostname=box NodeAddr=10.2.0.11 Port=[17001-17004]\n",
     "NodeName line 3 (n[1-4])")])
def test_several_slurmd_on_one_host_are_refused_naming_the_lines(nodes, lines):
    with pytest.raises(ImportFailed) as exc:
        import_slurm(Sources(HEAD + nodes + "PartitionName=p Nodes=ALL\n"))
    said = str(exc.value)
    assert said.startswith(f"slurm.conf: {lines} put ") and "multiple-slurmd" in said
    assert "each with its own Port=" in said and ". " not in said


def test_one_host_per_node_is_not_multiple_slurmd():
    doc, _ = import_slurm(Sources(HEAD + "NodeName=n[1-2] NodeHostname=h[1-2] "
                                  "NodeAddr=10.2.0.[11-12]\nPartitionName=p Nodes=ALL\n"))
    assert doc["nodes"][0]["hosts"] == "n[1-2]"


def test_spacing_continuations_and_trailing_comments_import_alike():
    plain = HEAD + "NodeName=n1 NodeAddr=10.2.0.11 CPUs=4\nPartitionName=p Nodes=n1 MaxTime=60\n"
    # Slurm strips the comment before it looks for the continuation (parse_config.c,
    # _get_next_line): a '\\' inside a comment continues nothing
    spaced = HEAD + ("NodeName = n1 \\\n   NodeAddr = 10.2.0.11 \\\n"
                     "CPUs= 4  # the first\n"
                     "PartitionName =p Nodes =n1 \\\n MaxTime= 60 # an hour\\\n")
    a, b = (yaml.safe_dump(import_slurm(Sources(t))[0]) for t in (plain, spaced))
    assert a == b
