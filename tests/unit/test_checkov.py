"""Checkov on every manifest rendered for the two example specs: each failure is fixed or
listed, with its reason, in k8s/checkov-allowlist.txt; a new failure fails here, and so does
a line that no longer matches a failure.

Checkov (pinned in pyproject.toml's `scan` extra) pins packaging<24, which Pulumi and pytest
refuse, so it lives in its own environment, .venv/checkov (scripts/scan-venv.sh, `make test-unit`, makes it); it
runs here as a subprocess, offline: no platform mapping download (BC_SKIP_MAPPING), no SCA
scan, --skip-download, HOME in a temporary folder.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from estate.pipeline import build
from tests.unit.checkutil import ROOT

SPECS = ("lab", "example-prod")
ALLOWLIST = ROOT / "k8s" / "checkov-allowlist.txt"
MANIFESTS = "kubernetes/manifests/"


def checkov() -> str | None:
    for candidate in (os.environ.get("ESTATE_CHECKOV"), ROOT / ".venv" / "checkov" / "bin" /
                      "checkov", shutil.which("checkov")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


def allowlist() -> dict[tuple[str, str], str]:
    out = {}
    for n, line in enumerate(ALLOWLIST.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        check, resource, *why = line.split("\t")
        assert why and why[0].strip(), f"{ALLOWLIST.name}:{n}: no reason for {check} {resource}"
        assert (check, resource) not in out, f"{ALLOWLIST.name}:{n}: listed twice"
        out[(check, resource)] = why[0]
    return out


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> dict[str, set[tuple[str, str]]]:
    tool = checkov()
    if tool is None:
        pytest.skip("no Checkov: scripts/venv.sh installs it into .venv/checkov")
    root = tmp_path_factory.mktemp("checkov")
    for spec in SPECS:
        result = build(ROOT / "stacks" / f"{spec}.yaml")
        assert result.ok, spec
        for path, a in result.artifacts.items():
            if path.startswith(MANIFESTS):
                out = root / spec / path.removeprefix(MANIFESTS)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(a.content)
    home = root / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
           "LOG_LEVEL": "WARNING"}
    proc = subprocess.run([tool, "-d", str(root), "--framework", "kubernetes", "--quiet",
                           "--compact", "-o", "json", "--skip-download"],
                          capture_output=True, text=True, env=env, timeout=300)
    report = json.loads(proc.stdout)
    assert report["summary"]["parsing_errors"] == 0, proc.stderr[-2000:]
    assert report["summary"]["resource_count"] > 100
    out: dict[str, set] = {s: set() for s in SPECS}
    for f in report["results"]["failed_checks"]:
        spec = Path(f["file_path"]).parts[1]
        out[spec].add((f["check_id"], f["resource"]))
    return out


def test_the_allowlist_gives_every_line_a_reason():
    listed = allowlist()
    assert listed and all(len(why) > 20 for why in listed.values())


@pytest.mark.parametrize("spec", SPECS)
def test_every_checkov_failure_is_fixed_or_listed_with_its_reason(failures, spec):
    new = sorted(failures[spec] - set(allowlist()))
    assert not new, ("Checkov failures that are neither fixed nor in "
                     f"k8s/checkov-allowlist.txt: {new}")


def test_no_allowlist_line_outlives_its_failure(failures):
    seen = set().union(*failures.values())
    stale = sorted(set(allowlist()) - seen)
    assert not stale, f"k8s/checkov-allowlist.txt lists what no longer fails: {stale}"
