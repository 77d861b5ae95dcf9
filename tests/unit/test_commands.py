"""The command line: typer parses every command line, and estate.cli.LazyGroup imports a
command's module only when that command runs, so `estate check` imports what check needs
and no other command's code."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from estate import cli, commands

ROOT = Path(__file__).resolve().parents[2]
LAB = str(ROOT / "stacks" / "lab.yaml")


def _estate(*argv: str, importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "estate", *argv], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120)


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    spec = tmp_path_factory.mktemp("broken") / "broken.yaml"
    spec.write_text(Path(LAB).read_text().replace("name: lab", "name: lab\nnot_a_key: 1", 1))
    return spec


def test_check_imports_no_other_commands_module_and_no_rich():
    run = _estate("check", LAB, importtime=True)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = _imported(run.stderr)
    assert {"estate.cli", "estate.commands", "estate.pipeline"} <= imported
    others = {m.partition(":")[0] for m in cli.LAZY.values()}
    assert not imported & others, sorted(imported & others)
    assert not {m for m in imported if m.split(".")[0] == "rich"}


def test_a_lazy_command_imports_its_module_when_it_runs():
    code = ("import sys; from estate.cli import app\n"
            "try:\n    app(['diff', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(*sorted(m for m in sys.modules if m.startswith('estate.')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    imported = set(run.stdout.split())
    assert "estate.operate.diff.cli" in imported and "estate.lab.cli" not in imported, run.stderr


def test_help_lists_every_command_once_in_order():
    result = CliRunner().invoke(cli.app, ["--help"])
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.split("Commands:")[1].splitlines()
              if line.startswith("  ") and line.split()]
    assert listed == ["schema", "check", "render", "plan", "validators", *cli.LAZY]


@pytest.mark.parametrize("name", list(cli.LAZY))
def test_each_lazy_command_is_its_modules_and_has_help(name):
    command = cli.lazy_command(name)
    assert command.name == name
    result = CliRunner().invoke(cli.app, [name, "--help"])
    assert result.exit_code == 0, result.output
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert f" {name} " in usage


def test_an_unknown_command_is_typers_usage_error():
    result = CliRunner().invoke(cli.app, ["nosuch"])
    assert result.exit_code == 2 and "No such command 'nosuch'" in result.output


@pytest.mark.parametrize("output", ["json", "github", "text"])
def test_check_exits_0_on_a_clean_spec_and_1_on_a_broken_one(output, broken):
    assert _estate("check", LAB, "--output", output).returncode == 0
    run = _estate("check", "--output", output, str(broken))
    assert run.returncode == 1 and "not_a_key" in run.stdout + run.stderr
    if output == "json":
        assert any(f["severity"] == "error" for f in json.loads(run.stdout))


def test_render_writes_the_tree_and_leaves_an_unwritable_one(tmp_path):
    run = _estate("render", LAB, "--out", str(tmp_path / "tree"), "--output", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["out"] == str(tmp_path / "tree")
    (tmp_path / "file").write_text("")
    run = _estate("render", LAB, "-o", str(tmp_path / "file" / "tree"))
    assert run.returncode == 1 and "not rendered" in run.stderr


def test_diff_exits_0_without_a_change_and_3_with_one(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(Path(LAB).read_text().replace('max_time: "1-00:00:00"',
                                                 'max_time: "2-00:00:00"', 1))
    assert _estate("diff", LAB, LAB).returncode == 0
    run = _estate("diff", LAB, str(new), "--output", "json", "--no-diff")
    assert run.returncode == 3, run.stderr
    assert json.loads(run.stdout)


def test_a_command_that_crashes_is_one_internal_error_line(monkeypatch):
    def boom(*_, **__):
        raise KeyError("x")
    monkeypatch.setattr(commands, "build", boom)
    monkeypatch.delenv("ESTATE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.app(["check", LAB])
    assert exited.value.code == 1


def test_ctrl_c_is_typers_status_130_not_a_traceback(monkeypatch):
    def interrupted(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "build", interrupted)
    result = CliRunner().invoke(cli.app, ["render", LAB, "-o", "d"])
    assert result.exit_code == 130 and "Traceback" not in result.output
