"""`estate doctor` on this host, for real: where scripts/install-deps.sh ran, the lab spec's
preflight passes (exit 0, what `make lab` needs) and finds every plugin its files name."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from estate.pipeline import build
from estate.render.slurm import slurm_plugins

ROOT = Path(__file__).resolve().parents[2]
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
LAB = ROOT / "stacks" / "lab.yaml"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None,
                                reason="estate doctor checks Debian packages: no dpkg here")


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ESTATE, "doctor", str(LAB), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_lab_preflight_passes_on_this_host():
    res = doctor()
    assert res.returncode == 0, res.stdout + res.stderr
    assert not [line for line in res.stdout.splitlines() if line.startswith("FAIL")]


def test_every_rendered_plugin_is_present():
    checks = json.loads(doctor("--output", "json").stdout)
    found = {c["message"].split(" ", 1)[0]: c["status"] for c in checks
             if c["id"] == "doctor.plugin"}
    named = {p for ps in slurm_plugins(build(LAB).estate).values() for p in ps}
    assert set(found) == named
    assert set(found.values()) == {"ok"}, found
