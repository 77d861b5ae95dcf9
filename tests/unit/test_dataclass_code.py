"""estate.dataclass_code: the methods dataclasses generate are compiled once and read back
by later processes, and the classes built from kept code behave as compiled ones do."""
from __future__ import annotations

import glob
import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fresh process: the dataclasses below with the memo installed (or not), what each
# class does, and how many sources it compiled itself.
PROBE = r"""
import dataclasses, json, sys
from dataclasses import dataclass, field
from estate import dataclass_code
compiled = []
if sys.argv[1] == "install":
    dataclass_code.install()
    real = dataclass_code._compile
    dataclass_code._compile = lambda source: compiled.append(source) or real(source)

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
dataclass_code.save()
print(json.dumps({"behaviour": out, "compiled": len(compiled)}))
"""


def _probe(tmp: Path, mode: str = "install", **env) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp),
                              **env}, check=True, timeout=60)
    return json.loads(run.stdout)


def _entry(tmp: Path) -> list[str]:
    return glob.glob(str(tmp / f"estate-cache-{os.geteuid()}" / "dataclass-code-*.marshal"))


def test_the_next_process_compiles_nothing_and_its_classes_behave_the_same(tmp_path):
    plain = _probe(tmp_path, "plain")
    first = _probe(tmp_path)
    second = _probe(tmp_path)
    assert first["compiled"] > 0 and second["compiled"] == 0
    assert first["behaviour"] == second["behaviour"] == plain["behaviour"]
    assert all(plain["behaviour"].values())
    assert plain["behaviour"]["repr"] == "Point(x=1, y=2, tags=())"


def test_the_entry_holds_code_by_its_source_and_is_closed_to_others(tmp_path):
    _probe(tmp_path)
    [entry] = _entry(tmp_path)
    assert os.stat(entry).st_mode & 0o077 == 0
    kept = marshal.loads(Path(entry).read_bytes())
    assert kept and all(type(code).__name__ == "code" for code in kept.values())
    assert any("def __init__(self,x:_type_x,y:_type_y=_dflt_y,tags:" in source
               for source in kept)


def test_a_damaged_entry_or_one_that_holds_no_code_is_compiled_again(tmp_path):
    _probe(tmp_path)
    [entry] = _entry(tmp_path)
    Path(entry).write_bytes(b"\x00not marshal")
    assert _probe(tmp_path)["compiled"] > 0
    kept = marshal.loads(Path(entry).read_bytes())
    Path(entry).write_bytes(marshal.dumps({source: "print('no')" for source in kept}))
    again = _probe(tmp_path)
    assert again["behaviour"] == _probe(tmp_path, "plain")["behaviour"]
    assert again["compiled"] == len(kept)


def test_without_a_cache_directory_every_process_compiles(tmp_path):
    first = _probe(tmp_path, ESTATE_NO_CACHE="1")
    assert _probe(tmp_path, ESTATE_NO_CACHE="1")["compiled"] == first["compiled"] > 0
    assert not _entry(tmp_path)


# `estate check` through its entry, each compile logged with the pid that made it
CHECK = r"""
import os, sys
from estate import dataclass_code
real, path = dataclass_code._compile, sys.argv[1]
def logged(source):
    with open(path, "a") as log:
        log.write(f"{os.getpid()}\n")
    return real(source)
dataclass_code._compile = logged
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
    first = logs[0].read_text().split()
    assert len(set(first)) == 2, "the parent and the forked child each compile some"
    assert not logs[1].exists()
