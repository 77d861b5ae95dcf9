"""estate.check.STAGE_DOMAINS: the modules a stage imports are the ones that register its
validators, so a stage that loads only its own modules runs every validator it has."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from estate.check import REGISTRY, STAGE_DOMAINS, all_domains, load_domains

ROOT = Path(__file__).resolve().parents[2]


def _modules_of(stage: str) -> set[str]:
    load_domains()
    return {v.func.__module__.rpartition(".")[2] for v in REGISTRY.values()
            if v.stage == stage}


def test_each_listed_stage_names_exactly_the_modules_with_its_validators():
    for stage, modules in STAGE_DOMAINS.items():
        assert set(modules) == _modules_of(stage), stage
        assert set(modules) <= set(all_domains())


def test_every_stage_has_validators_and_the_spec_stage_loads_every_domain():
    stages = {v.stage for v in REGISTRY.values()} | set(STAGE_DOMAINS)
    assert stages == {"gate", "spec", "artifacts"}
    assert "spec" not in STAGE_DOMAINS


def test_a_fresh_process_runs_the_same_gate_and_artifact_validators_as_with_every_domain():
    """In a process that has imported nothing else, each stage's own modules register all
    of that stage's validators (what `estate check` runs before and after its fork)."""
    code = ("import estate.check as c\n"
            "for stage in ('gate', 'artifacts'):\n"
            "    c.load_domains(stage)\n"
            "    print(stage, sorted(v.id for v in c.REGISTRY.values() if v.stage == stage))\n"
            "c.load_domains()\n"
            "for stage in ('gate', 'artifacts'):\n"
            "    print(stage, sorted(v.id for v in c.REGISTRY.values() if v.stage == stage))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120).stdout.splitlines()
    assert out[:2] == out[2:] and len(out) == 4
    assert all(line.split(" ", 1)[1] != "[]" for line in out)
