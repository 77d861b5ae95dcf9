"""Output that survives a pipe: the real CLI with stdout piped prints whole identifiers,
one finding or row per line (GitHub issue: `estate check spec | grep key` found nothing
because rich cut the key across lines at 80 columns)."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from estate.findings import Finding, Severity
from estate.output import (Output, annotation, escape_data, escape_property, finding_annotation,
                           finding_line, split_location)

ROOT = Path(__file__).resolve().parents[2]
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
LAB = ROOT / "stacks" / "lab.yaml"
KEY = "bogus_segment_key_that_is_long"
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|info) "
                  r"(?P<id>\S+): (?P<msg>.*) \[(?P<path>[^\]]*(?:\[\d+\][^\]]*)*)\]"
                  r"(?: \((?P<hint>.*)\))?$")


def estate(*args: str) -> subprocess.CompletedProcess:
    # stdout is a pipe here, as in CI or `| grep`
    return subprocess.run([ESTATE, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80"})


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> tuple[Path, int, int]:
    """lab.yaml with a long unknown key on a segment; returns (file, line, column) of the key."""
    data = yaml.safe_load(LAB.read_text())
    data["segments"][1][KEY] = 1
    path = tmp_path_factory.mktemp("spec") / "broken.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    lineno, line = next((i, l) for i, l in enumerate(text.splitlines(), 1) if KEY in l)
    return path, lineno, line.index(KEY) + 1


def test_check_piped_prints_the_whole_key_on_one_compiler_style_line(broken):
    path, lineno, col = broken
    proc = estate("check", path)
    assert proc.returncode == 1, proc.stderr
    hits = [l for l in proc.stdout.splitlines() if KEY in l]
    assert len(hits) == 1, proc.stdout
    m = LINE.match(hits[0])
    assert m, hits[0]
    assert (m["file"], int(m["line"]), int(m["col"])) == (str(path), lineno, col)
    assert (m["sev"], m["id"]) == ("error", "schema.unknown_key")
    assert m["path"] == f"segments[1].{KEY}"
    assert f"unknown key '{KEY}'" in m["msg"]
    assert m["hint"].startswith("valid keys here")
    assert proc.stdout.splitlines()[-1] == "1 error, 0 warnings"
    assert "─" not in proc.stdout and "│" not in proc.stdout  # no table in a pipe


def test_check_output_table_in_a_pipe_cuts_no_identifier(broken):
    proc = estate("check", broken[0], "--output", "table")
    assert f"segments[1].{KEY}" in proc.stdout


def test_clean_spec_prints_no_findings():
    proc = estate("check", LAB)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "no findings\n"


def test_check_github_annotations(broken):
    path, lineno, col = broken
    proc = estate("check", path, "--output", "github")
    assert proc.returncode == 1
    hits = [l for l in proc.stdout.splitlines() if KEY in l]
    assert hits == [l for l in proc.stdout.splitlines() if l.startswith("::error ")]
    assert hits[0].startswith(f"::error file={path},line={lineno},col={col},"
                              f"title=schema.unknown_key::unknown key '{KEY}' "
                              f"[segments[1].{KEY}] (valid keys here: ")


def test_check_json_keeps_its_shape(broken):
    proc = estate("check", broken[0], "--output", "json")
    assert proc.returncode == 1
    findings = json.loads(proc.stdout)
    assert [sorted(f) for f in findings] == [
        ["hint", "id", "location", "message", "path", "severity"]]
    f = findings[0]
    assert f["location"] == f"{broken[0]}:{broken[1]}:{broken[2]}"
    assert (f["id"], f["severity"], f["path"]) == ("schema.unknown_key", "error",
                                                   f"segments[1].{KEY}")


def test_plan_piped_prints_each_pool_and_partition_whole_on_one_line():
    budget = json.loads(estate("plan", LAB, "--output", "json").stdout)
    proc = estate("plan", LAB)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"GPU budget: {budget['total']} GPUs"
    for scope, kind in (("pool", "pools"), ("partition", "partitions"), ("tenant", "tenants")):
        for name, v in budget[kind].items():
            rows = [l.split() for l in lines if l.split()[:2] == [scope, name]]
            assert len(rows) == 1, proc.stdout
            assert rows[0][2] == str(v["gpus"])
    pool = next(iter(budget["pools"].values()))
    assert any(pool["hosts"] in l and l.startswith("pool ") for l in lines)


def test_validators_piped_prints_one_validator_per_line():
    proc = estate("validators")
    listed = json.loads(estate("validators", "--output", "json").stdout)
    rows = proc.stdout.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [v["id"] for v in listed]
    assert all(r.split()[1] in ("error", "warning", "info") for r in rows)


def test_help_in_a_pipe_keeps_choices_whole():
    assert "<auto|table|text|json|github>" in estate("check", "--help").stdout


# --- the formatting functions ---------------------------------------------------

def test_escaping_follows_github_workflow_commands():
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert escape_data("a:b,c") == "a:b,c"  # data keeps ':' and ','
    assert annotation("warning", "x\ny", file="C:/s,1.yaml", line=3, col=None, title="t.id") == \
        "::warning file=C%3A/s%2C1.yaml,line=3,title=t.id::x%0Ay"
    assert annotation("notice", "m") == "::notice::m"


@pytest.mark.parametrize("location,expected", [
    ("spec.yaml:12:3", ("spec.yaml", 12, 3)),
    ("dir/a:b.yaml:4:5", ("dir/a:b.yaml", 4, 5)),
    ("spec.yaml:7", ("spec.yaml", 7, None)),
    ("spec.yaml", ("spec.yaml", None, None)),
    ("", ("default.yaml", None, None)),
])
def test_split_location(location, expected):
    assert split_location(location, "default.yaml") == expected


def test_finding_without_a_position_omits_the_missing_parts():
    f = Finding("spec.read", Severity.ERROR, "<root>", "cannot read x", "", "x.yaml")
    assert finding_line(f) == "x.yaml: error spec.read: cannot read x [<root>]"
    assert finding_line(Finding("a.b", Severity.WARNING, "p", "m", "h")) == \
        "warning a.b: m [p] (h)"
    assert finding_annotation(Finding("a.b", Severity.INFO, "p", "50%", "", "s.yaml:2:1")) == \
        "::notice file=s.yaml,line=2,col=1,title=a.b::50%25 [p]"


def test_auto_is_a_table_only_on_a_terminal(monkeypatch):
    import sys

    class Stream:
        def __init__(self, tty: bool):
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty
    monkeypatch.setattr(sys, "stdout", Stream(True))
    assert Output.auto.resolve() is Output.table
    monkeypatch.setattr(sys, "stdout", Stream(False))
    assert Output.auto.resolve() is Output.text
    assert Output.json.resolve() is Output.json


def test_apply_and_verify_in_a_pipe_print_one_row_per_line(capsys):
    from estate.output import make_console
    from estate.provision.apply import HostResult, Result
    from estate.provision.cli import print_apply
    from estate.verify.plugin import CheckResult
    from estate.verify.run import VerifyReport, print_report
    op = "an_operation_name_long_enough_to_wrap_an_eighty_column_table"
    res = Result({"gpu1": HostResult(changed=[op], ops=9),
                  "ctl1": HostResult(failed=["slurmctld: start failed"], ops=2)}, 1.0)
    print_apply(res, output=Output.github)
    report = VerifyReport([CheckResult("gpu1", "slurm_worker", "munge", "failed", "no [key]"),
                     CheckResult("ctl1", "cluster", "dns", "passed")], 1, Path("j"), Path("v"))
    print_report(report, ["ctl1", "gpu1"], make_console(), Output.text)
    lines = capsys.readouterr().out.splitlines()
    assert "gpu1  changed  9    1        " + op in lines
    assert "::error title=apply failed on ctl1::slurmctld: start failed" in lines
    assert ["ctl1", "cluster", "ok", "1"] in [l.split() for l in lines]
    assert "FAIL gpu1 slurm_worker/munge: no [key]" in lines
