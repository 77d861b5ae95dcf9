"""A plain `check` or `render` command line runs without typer (estate/commands.py); the
result must be typer's own: the same stdout, stderr and exit status. Anything plain()
does not recognise goes to typer, so the recogniser must decline every form it cannot
read exactly as click would."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from estate import commands
from estate import diff_cli
from estate.output import Output

ROOT = Path(__file__).resolve().parents[2]
LAB = str(ROOT / "stacks" / "lab.yaml")

# the same command line through typer: estate.cli's app, as `estate` ran it before
TYPER = "import sys; from estate.cli import app; sys.argv[0] = 'estate'; app()"


def _run(argv: list[str], via_typer: bool) -> tuple[int, str, str]:
    entry = ["-c", TYPER] if via_typer else ["-m", "estate"]
    run = subprocess.run([sys.executable, *entry, *argv], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    return run.returncode, run.stdout, run.stderr


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    spec = tmp_path_factory.mktemp("broken") / "broken.yaml"
    spec.write_text(Path(LAB).read_text().replace("name: lab", "name: lab\nnot_a_key: 1", 1))
    return str(spec)


@pytest.mark.parametrize("form", [
    ["check", "{spec}"],
    ["check", "{spec}", "--output", "json"],
    ["check", "--output", "github", "{spec}"],
    ["render", "{spec}", "-o", "{out}"],
    ["render", "--out", "{out}", "{spec}", "--output", "json"],
    ["render", "{spec}", "-o", "{unwritable}"],
])
@pytest.mark.parametrize("spec", ["lab", "broken"])
def test_plain_forms_give_typers_result(form, spec, broken, tmp_path):
    (tmp_path / "file").write_text("")
    values = {"spec": LAB if spec == "lab" else broken, "out": str(tmp_path / "tree"),
              "unwritable": str(tmp_path / "file" / "tree")}
    argv = [w.format(**values) for w in form]
    assert commands.plain(argv) is not None, argv
    fast, slow = _run(argv, via_typer=False), _run(argv, via_typer=True)
    assert fast == slow
    assert fast[0] == (0 if spec == "lab" and "{unwritable}" not in form else 1)


@pytest.mark.parametrize("form", [
    ["diff", "{spec}", "{new}", "--output", "text"],
    ["diff", "{spec}", "{new}", "--output", "json", "--no-diff"],
    ["diff", "{spec}", "{spec}"],
])
def test_plain_diff_gives_typers_result(form, tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(Path(LAB).read_text().replace('max_time: "1-00:00:00"', 'max_time: "2-00:00:00"',
                                                 1))
    argv = [w.format(spec=LAB, new=str(new)) for w in form]
    assert diff_cli.plain(argv) is not None, argv
    fast, slow = _run(argv, via_typer=False), _run(argv, via_typer=True)
    assert fast == slow
    assert fast[0] == (0 if form[2] == "{spec}" else 3), fast


@pytest.mark.parametrize("argv", [
    [], ["check"], ["--debug", "check", "s.yaml"], ["check", "--help"], ["check", "-h"],
    ["check", "a.yaml", "b.yaml"], ["check", "s.yaml", "-o", "d"],
    ["check", "--output=json", "s.yaml"],
    ["check", "s.yaml", "--output", "JSON"], ["check", "s.yaml", "--output"],
    ["check", "s.yaml", "--output", "json", "--output", "text"], ["check", ""], ["check", "-"],
    ["check", "--", "s.yaml"], ["check", "-x.yaml"], ["render", "s.yaml"],
    ["render", "s.yaml", "-o"], ["render", "s.yaml", "-o", "-d"], ["render", "s.yaml", "-od"],
    ["render", "s.yaml", "--out=d"], ["render", "s.yaml", "-o", "d", "--out", "e"],
    ["plan", "s.yaml"], ["lab", "up"],
])
def test_every_other_command_line_goes_to_typer(argv):
    assert commands.plain(argv) is None


def test_plain_reads_what_typer_reads():
    call = commands.plain(["render", "--output", "text", "s.yaml", "--out", "d"])
    assert (call.args, call.keywords) == ((commands.render, Path("s.yaml"), Path("d"),
                                           Output.text), {})
    call = commands.plain(["check", "s.yaml"])
    assert call.args == (commands.check, Path("s.yaml"), Output.auto)


def test_a_plain_command_that_crashes_is_one_internal_error_line(monkeypatch, capsys):
    def boom(*_, **__):
        raise KeyError("x")
    monkeypatch.setattr(commands, "build", boom)
    monkeypatch.delenv("ESTATE_DEBUG", raising=False)
    assert commands.plain(["check", LAB])() == 1
    err = capsys.readouterr().err
    assert err.startswith("error internal.error: estate failed unexpectedly: KeyError")
    assert "Traceback" not in err


def test_ctrl_c_in_a_plain_command_is_clicks_aborted_not_a_traceback(monkeypatch, capsys):
    def interrupted(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "build", interrupted)
    assert commands.plain(["render", LAB, "-o", "d"])() == 1
    assert capsys.readouterr().err == "Aborted!\n"
