"""The fuzz tier: a broken spec always ends in findings, never in a crash, a hang, a partial
write or a render that differs between two runs.

Seeded mutants of the example stacks (tests/fuzz/mutate.py) go through load -> check ->
render in-process; a sample also goes through the real CLI. The seed is printed;
ESTATE_FUZZ_SEED replays it (ESTATE_FUZZ_COUNT sets the number of mutants). Every failing
mutant is written to build/fuzz-failures/ with the reason.
"""
from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest

from estate.check import has_errors
from estate.pipeline import build
from estate.render import render_all, write_tree
from tests.fuzz.mutate import ROOT, mutants

SEED = int(os.environ.get("ESTATE_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
COUNT = int(os.environ.get("ESTATE_FUZZ_COUNT", "2000"))
CLI_COUNT = int(os.environ.get("ESTATE_FUZZ_CLI_COUNT", "50"))
# A hang spins the CPU, so the bound is on this process's CPU time: wall time on a loaded
# 2-core CI machine also counts the other tiers and fsync waits (a 0.5 s render once took
# 5 s of wall time there). A wall bound, far higher, still catches a mutant that blocks.
PER_SPEC_S = 5.0
PER_SPEC_WALL_S = 60.0
FAILURES = ROOT / "build" / "fuzz-failures"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    if signum == signal.SIGPROF:
        raise _Timeout(f"over {PER_SPEC_S} s of CPU time")
    raise _Timeout(f"over {PER_SPEC_WALL_S} s of wall time")


def _record(i: int, data: bytes, reason: str) -> str:
    FAILURES.mkdir(parents=True, exist_ok=True)
    stem = FAILURES / f"seed{SEED}-{i:05d}"
    stem.with_suffix(".yaml").write_bytes(data)
    stem.with_suffix(".txt").write_text(reason)
    return f"{stem}.yaml: {reason.strip().splitlines()[-1]}"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _one(spec: Path, out: Path) -> str:
    """Load, check, render into out as the CLI does; the outcome, or raise AssertionError."""
    result = build(spec)
    ids = {f.id for f in result.findings}
    assert "internal.error" not in ids, [f.message for f in result.findings]
    if not result.ok:
        assert has_errors(result.findings) or result.loaded.spec is None, \
            "not rendered, yet no error finding says why"
        # the CLI writes nothing then: no output directory, no temporary left behind
        assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
        return result.findings[0].id.split(".")[0] if result.findings else "empty"
    write_tree(result.artifacts, out)
    written = _tree(out)
    assert {k for k in written if k != "MANIFEST.json"} == set(result.artifacts), \
        "the written tree differs from the artifacts"
    assert not list(out.parent.glob(f".{out.name}.*")), "a temporary directory was left"
    again = render_all(result.estate, str(spec))
    assert {p: a.content for p, a in again.items()} == \
        {p: a.content for p, a in result.artifacts.items()}, "two renders differ"
    return "rendered"


def test_mutated_specs_end_in_findings(tmp_path, monkeypatch):
    monkeypatch.setenv("ESTATE_DEBUG", "1")     # an unexpected exception must surface here
    print(f"\nfuzz seed {SEED} ({COUNT} mutants); replay: ESTATE_FUZZ_SEED={SEED}")
    failures, outcomes, slowest = [], Counter(), (0.0, -1)
    old = {sig: signal.signal(sig, _alarm) for sig in (signal.SIGALRM, signal.SIGPROF)}
    start = time.monotonic()
    try:
        for i, base, ops, data in mutants(SEED, COUNT):
            spec = tmp_path / f"m{i}" / "spec.yaml"
            spec.parent.mkdir()
            spec.write_bytes(data)
            t0 = time.process_time()
            signal.setitimer(signal.ITIMER_PROF, PER_SPEC_S)
            signal.setitimer(signal.ITIMER_REAL, PER_SPEC_WALL_S)
            try:
                outcomes[_one(spec, spec.parent / "out")] += 1
            except _Timeout as exc:
                failures.append(_record(i, data, f"{base} {ops}: timeout {exc}"))
            except BaseException:   # noqa: BLE001 - every exception is a finding of the fuzzer
                failures.append(_record(i, data, f"{base} {ops}\n{traceback.format_exc()}"))
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, (time.process_time() - t0, i))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    print(f"outcomes {dict(outcomes)}; slowest mutant {slowest[1]} {slowest[0]:.2f} s of CPU; "
          f"total {time.monotonic() - start:.1f} s")
    assert not failures, f"seed {SEED}: {len(failures)} failures:\n" + "\n".join(failures[:20])


def _cli(i: int, data: bytes, work: Path) -> str | None:
    spec = work / f"cli{i}.yaml"
    spec.write_bytes(data)
    command = "check" if i % 2 else "render"
    args = [sys.executable, "-m", "estate.cli", command, str(spec), "--output", "text"]
    if command == "render":
        args += ["-o", str(work / f"out{i}")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ESTATE_DEBUG", None)
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    text = proc.stdout + proc.stderr
    if "Traceback" in text or proc.returncode not in (0, 1) or "internal.error" in text:
        return _record(100000 + i, data, f"estate {command} exited {proc.returncode}\n{text}")
    return None


@pytest.mark.skipif(CLI_COUNT == 0, reason="ESTATE_FUZZ_CLI_COUNT=0")
def test_cli_never_prints_a_traceback(tmp_path):
    print(f"\nfuzz seed {SEED} ({CLI_COUNT} CLI runs); replay: ESTATE_FUZZ_SEED={SEED}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(_cli, i, data, tmp_path)
                for i, _, _, data in mutants(SEED + 1, CLI_COUNT)]
        failures = [f for f in (j.result() for j in jobs) if f]
    assert not failures, f"seed {SEED}: " + "\n".join(failures)
