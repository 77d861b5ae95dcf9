"""The type checker over estate/ (mypy, configured in pyproject.toml's [tool.mypy]), so the
unit tier, and with it `make test`, fails on a type error. Cold (no build/mypy cache) it
takes about 35 s on the 2-core machine; with the cache a few seconds."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_estate_type_checks():
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
