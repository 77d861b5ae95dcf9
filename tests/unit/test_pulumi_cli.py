"""`pulumi preview --stack lab` with the real engine, against a local file backend.

Runs only where the Pulumi CLI works: it is in none of the registries this
project's machines reach, so elsewhere the test skips and says so. The program
itself is covered under Pulumi's mocks in test_pulumi_program.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pulumi() -> str:
    exe = shutil.which("pulumi")
    if exe is None:
        pytest.skip("the pulumi CLI is not installed (no reachable registry ships it); "
                    "install it from pulumi.com to run `pulumi preview` here")
    done = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"`pulumi version` failed: {done.stderr.strip()}")
    return exe


def _project(tmp_path: Path) -> Path:
    """A copy of the project, so `stack init` writes its salt there, not into stacks/."""
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, project / name)
    for spec in (ROOT / "stacks").glob("*.yaml"):
        shutil.copy(spec, project / "stacks" / spec.name)
    (project / ".venv").symlink_to(ROOT / ".venv")
    return project


@pytest.mark.pulumi_cli
def test_preview_lab_on_a_local_backend(tmp_path):
    exe = _pulumi()
    project = _project(tmp_path)
    (tmp_path / "state").mkdir()
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
           "PULUMI_CONFIG_PASSPHRASE": "test-only", "PULUMI_SKIP_UPDATE_CHECK": "1"}

    def pulumi(*args):
        return subprocess.run([exe, *args, "--non-interactive"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=540)

    init = pulumi("stack", "init", "lab")
    assert init.returncode == 0, init.stderr
    preview = pulumi("preview", "--stack", "lab", "--json")
    assert preview.returncode == 0, preview.stdout[-4000:] + preview.stderr[-4000:]
    steps = json.loads(preview.stdout)["steps"]
    created = {s["urn"].rsplit("::", 1)[-1] for s in steps if s["op"] == "create"}
    assert {f"node-{n}" for n in ("nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2")} \
        <= created
    assert {"munge-key", "slurmrestd-jwt-key"} <= created
