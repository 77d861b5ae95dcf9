"""The CLI's check and render run the spec validators (and one builder) in a forked child
while the parent renders the rest (estate/fork.py, pipeline.build(parallel=True)). The
result must be the serial one: the same findings for every seeded mistake and every stack,
the same rendered bytes, and a validator that crashes in the child is the same
internal.error.

Each comparison runs in a fresh interpreter: the test runner's own threads make forking
here unsafe, which is exactly what fork.usable() refuses.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.unit import test_kubernetes_check as k8s_cases
from tests.unit.test_check_validators import CASES, put, spec_dict

ROOT = Path(__file__).resolve().parents[2]

forks = pytest.mark.skipif((os.cpu_count() or 1) < 2 or not hasattr(os, "fork"),
                           reason="one core or no fork: the pipeline never forks here")

COMPARE = textwrap.dedent("""
    import hashlib, json, sys
    from estate import fork
    import estate.pipeline as pipeline
    from estate.pipeline import build
    serial_renders = []
    _render_all = pipeline.render_all
    pipeline.render_all = lambda *a: serial_renders.append(a) or _render_all(*a)
    assert fork.usable(), "one thread, two cores: the pipeline must fork here"

    def outcome(spec, parallel):
        b = build(spec, parallel=parallel)
        files = None if b.artifacts is None else [   # in order: the tree's own order
            (p, hashlib.sha256(a.content).hexdigest(), a.mode, a.owner, str(a.consumers))
            for p, a in b.artifacts.items()]
        return [f.as_dict() for f in b.findings], files

    out = {}
    for spec in sys.argv[1:]:
        serial = outcome(spec, False)
        serial_renders.clear()
        forked = outcome(spec, True)
        out[spec] = {"same": serial == forked, "findings": len(serial[0]),
                     "rendered": serial[1] is not None, "in_parts": not serial_renders}
    print(json.dumps(out))
""")


def _compare(specs: list[Path], *prelude: str) -> dict:
    run = subprocess.run([sys.executable, "-c", "\n".join(prelude) + COMPARE,
                          *map(str, specs)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@forks
def test_seeded_mistakes_and_stacks_give_the_serial_result(tmp_path):
    """Every stack and every fourth seeded case (all of them: 30 s more of unit tier)."""
    specs = sorted((ROOT / "stacks").glob("*.yaml"))
    specs = [s for s in specs if not s.name.startswith("Pulumi.")]
    for i, (_vid, _sev, base, edits, _path) in enumerate(CASES[::4]):
        data = spec_dict(base)
        for where, value in edits.items():
            put(data, where, value)
        specs.append(tmp_path / f"case{i:03d}.yaml")
        specs[-1].write_text(yaml.safe_dump(data, sort_keys=False))
    out = _compare(specs)
    differ = [s for s, r in out.items() if not r["same"]]
    assert not differ, f"forked build differs from serial on {differ}"
    # both kinds were compared: specs refused (the speculative render dropped) and rendered
    assert {r["rendered"] for r in out.values()} == {True, False}
    # and a tree is assembled from both processes' parts, not rendered again in line
    assert all(r["in_parts"] for r in out.values() if r["rendered"])
    assert sum(r["findings"] for r in out.values()) >= len(CASES[::4])


@forks
def test_a_validator_that_crashes_in_the_child_is_the_serial_internal_error(tmp_path):
    crash = textwrap.dedent("""
        from estate.check import load_domains, validator
        from estate.findings import Severity
        load_domains()
        @validator("test.crash", Severity.ERROR, "test", "raises")
        def _crash(estate):
            raise KeyError("boom")
    """)
    out = _compare([ROOT / "stacks" / "lab.yaml"], crash)
    assert out[str(ROOT / "stacks" / "lab.yaml")] == {"same": True, "findings": 1,
                                                       "rendered": False, "in_parts": True}


@forks
def test_a_child_that_dies_is_reported_and_a_cancelled_one_is_reaped():
    run = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os
        from estate import fork
        done = fork.Forked(lambda: 41 + 1)
        assert done.join() == 42
        try:   # read back, then reaped: no zombie left behind
            os.waitpid(done.pid, os.WNOHANG)
            raise SystemExit("the joined child was not reaped")
        except ChildProcessError:
            pass
        import time
        slow = fork.Forked(lambda: time.sleep(60))
        t = time.monotonic()
        slow.cancel()
        assert time.monotonic() - t < 5
        try:
            os.waitpid(slow.pid, os.WNOHANG)
            raise SystemExit("the cancelled child was not reaped")
        except ChildProcessError:
            pass
        try:
            fork.Forked(lambda: os._exit(9)).join()
        except fork.ChildLost as exc:
            print("lost:", exc)
    """)], capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("lost: the checking process ended without a result")


@forks
def test_a_result_larger_than_a_default_pipe_leaves_the_child_done_before_the_join():
    """The child writes its whole result and ends without waiting for the parent's reads
    (a 10,000-node check's result is about 1 MB; the default pipe holds 64 KiB)."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import time
        from pathlib import Path
        from estate import fork
        child = fork.Forked(lambda: b"x" * 900_000)
        stat = Path(f"/proc/{child.pid}/stat")
        deadline = time.monotonic() + 10
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":   # exited, not reaped
            assert time.monotonic() < deadline, "the child still waits for the parent"
            time.sleep(0.01)
        assert child.join() == b"x" * 900_000
    """)], capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr


@functools.lru_cache(maxsize=1)
def _lab():
    return k8s_cases.lab.__wrapped__()


def _without_child_files(estate, arts):
    """The tree less the files CHILD_BUILDERS render (network/, common/hosts, slurm/)."""
    from estate.pipeline import CHILD_BUILDERS
    from estate.render import Artifacts, render_each
    child = {a.path for m in render_each(estate, "", CHILD_BUILDERS).values() for a in m}
    assert child and child <= set(arts), "the child renders files of the tree"
    return Artifacts({p: a for p, a in arts.items() if p not in child})


@pytest.mark.parametrize("case", range(len(k8s_cases.TAMPER)))
def test_artifact_checks_read_none_of_the_childs_files(case):
    """The parent checks its own part of the tree while the child renders the rest
    (pipeline.CHILD_BUILDERS): every artifact validator must find the same without the
    child's files, on a clean tree and on each tampered one."""
    from estate.check import check_artifacts
    from estate.pipeline import _ArtifactContext
    estate, arts = _lab()
    path, edit, *_ = k8s_cases.TAMPER[case]
    arts = k8s_cases.tampered(arts, path, edit)
    part = _without_child_files(estate, arts)
    whole = check_artifacts(_ArtifactContext(estate, arts))
    assert check_artifacts(_ArtifactContext(estate, part)) == whole
