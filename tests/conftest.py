import sys
from pathlib import Path

# Tests import shared helpers (...) by package path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import pytest

# The end-of-life check reads the date: tests run on a fixed one (the day the default
# version was last bumped), so none starts failing merely because time passes. A test
# that needs another day uses estate.kubernetes_releases.frozen_today(). The variable also
# reaches `estate` run as a subprocess.
FIXED_TODAY = "2026-12-02"


@pytest.fixture(autouse=True)
def _fixed_today(monkeypatch):
    monkeypatch.setenv("ESTATE_TODAY", FIXED_TODAY)
