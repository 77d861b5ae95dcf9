"""What the lab tier's modules share: where the lab's spec, tree and key are, and the
`estate` command run as a user runs it (test_lab_cycle.py, drift_case.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
SPEC = "stacks/lab.yaml"
OUT = "build/lab"
SSH = ["ssh", "-q", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
       "-o", "UserKnownHostsFile=/dev/null", "-i", str(ROOT / ".lab/ssh/id_ed25519")]


def estate(*args, check=True, timeout: float = 1200) -> subprocess.CompletedProcess:
    proc = subprocess.run([ESTATE, *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "160"})
    if check and proc.returncode != 0:
        pytest.fail(f"estate {' '.join(args)} exited {proc.returncode}:\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
