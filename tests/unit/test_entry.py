"""The process entry (estate/__main__.py): the fast exit of check and render keeps their
output and their exit status, and every other command exits the normal way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from estate.__main__ import _exit_status

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "stacks" / "lab.yaml"


def _estate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "estate", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (1, 1), (2, 2), (256 + 3, 3)])
def test_exit_status_as_the_interpreter_gives_it(code, status):
    assert _exit_status(code) == status


def test_exit_status_of_a_message_is_one_and_the_message_printed(capsys):
    assert _exit_status("gone wrong") == 1
    assert capsys.readouterr().err == "gone wrong\n"


def test_check_of_a_clean_spec_prints_all_its_output_and_exits_0():
    run = _estate("check", str(LAB), "--output", "json")
    assert run.returncode == 0, run.stderr
    findings = json.loads(run.stdout)   # whole: a lost buffer would not parse
    assert isinstance(findings, list)
    assert not [f for f in findings if f["severity"] == "error"]


def test_check_of_a_broken_spec_flushes_the_finding_and_exits_1(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text(LAB.read_text() + "\nunknown_key: 1\n")
    run = _estate("check", str(spec))
    assert run.returncode == 1
    assert "unknown_key" in run.stdout + run.stderr


def test_render_writes_the_whole_tree_before_the_fast_exit(tmp_path):
    out = tmp_path / "tree"
    run = _estate("render", str(LAB), "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert (out / "MANIFEST.json").is_file() and (out / "slurm" / "slurm.conf").is_file()


def test_usage_error_keeps_typers_status_2():
    run = _estate("check")
    assert run.returncode == 2
    assert "Missing argument" in run.stderr


def test_check_into_a_pipe_never_imports_rich():
    """Plain lines in a pipe need no rich (0.03 s of a start): its consoles are made on
    first use (estate.output.LazyConsole)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "estate", "check",
                          str(LAB)], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
                if line.startswith("import time:")}
    assert "estate.pipeline" in imported
    assert not {m for m in imported if m.split(".")[0] == "rich"}


def test_a_reader_gone_at_the_last_flush_gives_status_120_not_a_traceback(monkeypatch):
    """What the interpreter's own exit does when the pipe's reader has left (`| head`)."""
    import io

    import estate.__main__ as entry

    class Gone(io.StringIO):
        def flush(self):
            raise BrokenPipeError

    class Exited(Exception):
        pass

    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(sys, "argv", ["estate", "check", str(LAB)])
    monkeypatch.setattr(sys, "stdout", Gone())
    monkeypatch.setattr(entry.os, "_exit", fake_exit)
    monkeypatch.setattr("estate.commands.check", lambda *a: 0)   # the command succeeded
    with pytest.raises(Exited) as gone:
        entry.main()
    assert gone.value.args == (120,)


def test_the_spec_models_annotations_are_objects_not_strings():
    """Every estate command builds the spec's pydantic models at import; string annotations
    (from __future__ import annotations) would make pydantic evaluate all of them again."""
    import inspect

    import estate.spec.model as model
    lines = inspect.getsource(model).splitlines()
    assert "from __future__ import annotations" not in lines
    assert not isinstance(model.Spec.__annotations__["nodes"], str)


@pytest.mark.parametrize("setting, looked", [(None, False), ("", True)])
def test_the_cli_does_not_look_for_pydantic_plugins_unless_the_user_says(setting, looked):
    """Through pydantic's own setting, PYDANTIC_DISABLE_PLUGINS; a user's own (here: empty,
    none disabled) is kept, and pydantic looks."""
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["PYTHONPATH"] = str(ROOT)
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting
    code = ("import sys, estate.__main__ as entry\n"
            "sys.argv = ['estate', 'check', 'stacks/example-prod.yaml']\n"
            "entry._fast_exit = lambda code: print('status', code, file=sys.stderr)\n"
            "entry.main()\n"
            "import pydantic.plugin._loader as loader\n"
            "print('looked' if getattr(loader, '_plugins', None) is not None else 'not looked',"
            " file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=120)
    assert run.stderr.strip().splitlines()[-2:] == [
        "status 0", "looked" if looked else "not looked"], run.stderr[-2000:]
