"""Helpers for the validator tests: example specs as dicts, mutate, check."""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from estate.check import check_spec
from estate.check.findings import Finding
from estate.spec.load import load_text
from estate.spec.resolved import Estate

ROOT = Path(__file__).resolve().parents[2]
SPECS = {"lab": ROOT / "stacks" / "lab.yaml", "prod": ROOT / "stacks" / "example-prod.yaml"}


@lru_cache(maxsize=None)
def _base(name: str) -> dict:
    return yaml.safe_load(SPECS[name].read_text())


def spec_dict(name: str) -> dict:
    """A fresh, mutable copy of an example spec."""
    return copy.deepcopy(_base(name))


def findings_for(data: dict, filename: str = "<test>") -> list[Finding]:
    """Load findings (schema) plus validator findings for a spec given as a dict."""
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), filename)
    if loaded.spec is None:
        return loaded.findings
    return loaded.findings + check_spec(Estate(loaded.spec), loaded.source.locate)


def keyed(findings: list[Finding]) -> dict[tuple[str, str], Finding]:
    return {(f.id, f.path): f for f in findings}
