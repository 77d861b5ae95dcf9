"""estate.compiled: dataclass methods, forward references and regular expressions are
compiled once and read back by later processes, and what is built from kept code behaves
as compiled code does."""
from __future__ import annotations

import glob
import json
import marshal
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from estate import compiled

ROOT = Path(__file__).resolve().parents[2]

# A fresh process: the dataclasses and patterns below with the memos installed (or not),
# what each does, and how many dataclass sources and patterns it compiled itself.
PROBE = r"""
import collections, dataclasses, json, re, sys, typing
from dataclasses import dataclass, field
from estate import compiled
made = {"exec": 0, "eval": 0, "re": 0}
if sys.argv[1] == "install":
    compiled.install(sys.argv[2])
    real_compile, real_args = compiled._compile, compiled._engine_args
    def counted_compile(source, mode):
        made[mode] += 1
        return real_compile(source, mode)
    def counted_args(pattern, flags):
        made["re"] += 1
        return real_args(pattern, flags)
    compiled._compile, compiled._engine_args = counted_compile, counted_args

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 2
    tags: tuple = ()

@dataclass(order=True)
class Job:
    name: str
    nodes: list = field(default_factory=list)

p = Point(1)
out = {"repr": repr(p), "eq": p == Point(1, 2), "ne": p != Point(1, 3),
       "hash": hash(p) == hash(Point(1, 2)), "job": repr(Job("a")),
       "order": Job("a") < Job("b"), "factory": Job("a").nodes is not Job("b").nodes}
try:
    p.x = 5
    out["frozen"] = False
except dataclasses.FrozenInstanceError:
    out["frozen"] = True
Slot = collections.namedtuple("Slot", "rack unit")
out["namedtuple"] = [repr(Slot(3, unit=7)), Slot(1, 2) == (1, 2), Slot._fields]
class Rack(typing.TypedDict):
    name: "str"
    nodes: "list[Point]"
out["hints"] = repr(typing.get_type_hints(Rack, localns={"Point": Point}))
try:
    typing.ForwardRef("not an expression (")
except SyntaxError as exc:
    out["forward_error"] = str(exc)
host = re.compile(r"(?P<prefix>[a-z]+)(?P<number>\d+)", re.I)
m = host.fullmatch("GPU042")
out["groups"] = [m["prefix"], m["number"], sorted(host.groupindex.items()), host.flags]
out["bytes"] = bool(re.match(rb"\x00[\x01-\x7f]+$", b"\x00abc"))
out["unicode"] = re.findall(r"[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF]", "ok\x07\u00e9\x1b")
out["verbose"] = bool(re.match(r" a  b # comment", "ab", re.X))
try:
    re.compile("a(")
except re.error as exc:
    out["error"] = str(exc)
compiled.save()
print(json.dumps({"behaviour": out, "made": made}))
"""


def _probe(tmp: Path, mode: str = "install", workload: str = "", **env) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE, mode, workload], capture_output=True,
                         text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp),
                              **env}, check=True, timeout=60)
    return json.loads(run.stdout)


def _entry(tmp: Path, name: str) -> list[str]:
    return glob.glob(str(tmp / f"estate-cache-{os.geteuid()}" / f"{name}-code-*.marshal"))


def test_the_next_process_compiles_nothing_and_what_it_builds_behaves_the_same(tmp_path):
    plain = _probe(tmp_path, "plain")
    first = _probe(tmp_path)
    second = _probe(tmp_path)
    assert all(first["made"].values())
    # only what Python refuses (a pattern, a forward reference): compiled again, never kept
    assert second["made"] == {"exec": 0, "eval": 1, "re": 1}
    assert first["behaviour"] == second["behaviour"] == plain["behaviour"]
    seen = plain["behaviour"]
    assert seen["repr"] == "Point(x=1, y=2, tags=())" and seen["frozen"] and seen["order"]
    assert seen["groups"] == ["GPU", "042", [["number", 2], ["prefix", 1]], re.I | re.U]
    assert seen["bytes"] and seen["unicode"] == ["\x07", "\x1b"] and seen["verbose"]
    assert "missing ), unterminated subpattern" in seen["error"]
    assert seen["hints"] == "{'name': <class 'str'>, 'nodes': list[__main__.Point]}"
    assert seen["forward_error"].startswith("Forward reference must be an expression")
    assert seen["namedtuple"] == ["Slot(rack=3, unit=7)", True, ["rack", "unit"]]


def test_the_entries_hold_code_by_source_and_pattern_and_are_closed_to_others(tmp_path):
    _probe(tmp_path)
    [code_entry] = _entry(tmp_path, "python")
    [re_entry] = _entry(tmp_path, "re")
    for entry in (code_entry, re_entry):
        assert os.stat(entry).st_mode & 0o077 == 0
    kept = marshal.loads(Path(code_entry).read_bytes())
    assert kept and all(type(code).__name__ == "code" for code in kept.values())
    assert any(item.startswith("exec ") and "def __init__(self,x:_type_x,y:_type_y=_dflt_y,tags:"
               in item for item in kept)
    assert "eval list[Point]" in kept
    assert "eval lambda _cls, rack, unit: _tuple_new(_cls, (rack, unit))" in kept
    patterns = marshal.loads(Path(re_entry).read_bytes())
    assert f"{int(re.I)} '(?P<prefix>[a-z]+)(?P<number>\\\\d+)'" in patterns
    assert "0 b'\\\\x00[\\\\x01-\\\\x7f]+$'" in patterns   # bytes and str apart


def test_a_damaged_entry_or_one_that_holds_no_code_is_compiled_again(tmp_path):
    _probe(tmp_path)
    for name in ("python", "re"):
        [entry] = _entry(tmp_path, name)
        Path(entry).write_bytes(b"\x00not marshal")
    assert all(_probe(tmp_path)["made"].values())
    plain = _probe(tmp_path, "plain")["behaviour"]
    for name in ("python", "re"):
        [entry] = _entry(tmp_path, name)
        kept = marshal.loads(Path(entry).read_bytes())
        Path(entry).write_bytes(marshal.dumps({item: "print('no')" for item in kept}))
    again = _probe(tmp_path)
    assert again["behaviour"] == plain
    assert again["made"]["exec"] > 0


def test_each_workload_keeps_its_own_entries(tmp_path):
    first = _probe(tmp_path, workload="check-render")
    assert _probe(tmp_path, workload="other")["made"] == first["made"]
    assert _probe(tmp_path, workload="check-render")["made"] == {"exec": 0, "eval": 1, "re": 1}
    assert len(_entry(tmp_path, "python")) == len(_entry(tmp_path, "re")) == 2


def test_without_a_cache_directory_every_process_compiles(tmp_path):
    first = _probe(tmp_path, ESTATE_NO_CACHE="1")
    assert _probe(tmp_path, ESTATE_NO_CACHE="1")["made"] == first["made"]
    assert all(first["made"].values())
    assert not os.path.exists(tmp_path / f"estate-cache-{os.geteuid()}")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """compiled installed in this process, undone afterwards."""
    from estate import cache
    from re import _compiler
    monkeypatch.delenv("ESTATE_NO_CACHE", raising=False)
    monkeypatch.setattr(cache.tempfile, "tempdir", str(tmp_path))
    cache.directory.cache_clear()
    monkeypatch.setattr(compiled, "_memos", {})
    monkeypatch.setattr(_compiler, "compile", _compiler.compile)
    monkeypatch.setattr(compiled.dataclasses, "exec", exec, raising=False)
    monkeypatch.setattr(compiled.typing, "compile", compile, raising=False)
    monkeypatch.setattr(compiled.collections, "eval", eval, raising=False)
    monkeypatch.setattr(re, "_cache", {})
    compiled.install()
    yield compiled._memos
    cache.directory.cache_clear()


def test_engine_code_that_builds_another_pattern_is_not_kept(installed, monkeypatch):
    """Another Python's internals (here: the engine code of another pattern) give a
    pattern unlike re's own: it is compiled the way re does and nothing is kept."""
    from re import _compiler, _parser
    other = types.SimpleNamespace(
        _code=lambda parsed, flags: _compiler._code(_parser.parse("x"), 0))
    monkeypatch.setattr(compiled, "_compiler", other)
    pattern = re.compile("a+b")
    assert pattern.fullmatch("aab") and not pattern.fullmatch("x")
    assert installed["re"]._used == {"0 'a+b'": None}


def test_kept_engine_code_builds_the_pattern_re_builds(installed):
    sources = [r"^(?:[-+]?0b[0-1_]+)$", r"\s*(?P<key>[A-Za-z]\w*)=(?P<value>\S*)",
               r"(?i)gpu\[(\d+)-(\d+)\]", r"[\w\u00b7\u0300-\u036f]+", r"(a)(?P<b>b)?\2"]
    from re import _compiler
    for source in sources:
        ours = _compiler.compile(source, 0)
        args = installed["re"]._used[f"0 {source!r}"]
        real = compiled._REAL_RE_COMPILE(source, 0)
        assert args is not None and ours == real and ours.groupindex == real.groupindex


# `estate check` through its entry, each compile logged with the pid that made it
CHECK = r"""
import os, sys
from estate import compiled
real_compile, real_args, path = compiled._compile, compiled._engine_args, sys.argv[1]
def log(kind):
    with open(path, "a") as out:
        out.write(f"{os.getpid()} {kind}\n")
def logged_compile(source, mode):
    log(mode)
    return real_compile(source, mode)
def logged_args(pattern, flags):
    log("re")
    return real_args(pattern, flags)
compiled._compile, compiled._engine_args = logged_compile, logged_args
import estate.__main__
sys.argv = ["estate", "check", sys.argv[2]]
estate.__main__.main()
"""


def test_a_plain_check_keeps_the_code_of_both_its_processes(tmp_path):
    """The parent's at its fast exit and the forked child's (estate.fork.AT_CHILD_EXIT):
    both compile at the first check, neither at the second."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("ESTATE_NO_CACHE", None)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    for log in logs:
        subprocess.run([sys.executable, "-c", CHECK, str(log), str(ROOT / "stacks" / "lab.yaml")],
                       env=env, check=True, capture_output=True, timeout=120)
    first = [line.split() for line in logs[0].read_text().splitlines()]
    assert len({pid for pid, kind in first if kind == "exec"}) == 2, \
        "the parent and the forked child each compile some dataclasses"
    assert {kind for _, kind in first} == {"exec", "eval", "re"}
    assert not logs[1].exists()


def test_importing_estate_as_a_library_installs_nothing():
    code = ("import collections, dataclasses, typing, re._compiler, estate.pipeline\n"
            "import estate.commands, estate.compiled\n"
            "print(hasattr(dataclasses, 'exec'), hasattr(typing, 'compile'),"
            " hasattr(collections, 'eval'), re._compiler.compile.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=60)
    assert run.stdout.split() == ["False", "False", "False", "re._compiler"]
