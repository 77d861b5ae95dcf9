"""Snapshot tests: every rendered file of every stack, byte for byte.

A change to any output shows up in review as a diff under tests/golden/.
Regenerate deliberately with `make golden` (ESTATE_UPDATE_GOLDEN=1).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from estate.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent
STACKS = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))
UPDATE = os.environ.get("ESTATE_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("stack", STACKS, ids=[p.stem for p in STACKS])
def test_rendered_tree_matches_golden(stack: Path):
    result = build(stack.relative_to(ROOT))
    assert result.ok, [f.as_dict() for f in result.findings]
    want_dir = GOLDEN / stack.stem
    rendered = {p: a.content for p, a in result.artifacts.items()}
    if UPDATE:
        shutil.rmtree(want_dir, ignore_errors=True)
        for path, content in rendered.items():
            (want_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (want_dir / path).write_bytes(content)
    on_disk = {str(p.relative_to(want_dir)) for p in want_dir.rglob("*") if p.is_file()}
    assert on_disk == set(rendered), (
        "rendered files differ from tests/golden; review and run `make golden`: "
        f"new={sorted(set(rendered) - on_disk)} gone={sorted(on_disk - set(rendered))}")
    for path, content in rendered.items():
        assert (want_dir / path).read_bytes() == content, f"{stack.stem}/{path} changed; run `make golden`"
