"""Snapshot tests: every file `estate render` writes for every stack, MANIFEST.json included,
byte for byte.

The tree is written by the real writer (estate.render.write_tree) into a temporary
directory, so the snapshot also shows each file's consumers, mode and owner. A change to
any output shows up in review as a diff under tests/golden/. Regenerate deliberately with
`make golden` (scripts/golden.py), then review the diff; the test itself
never writes.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from scripts.golden import GOLDEN, PICTURE, STACKS, draw_picture, render_stack


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("stack", STACKS, ids=[p.stem for p in STACKS])
def test_rendered_tree_matches_golden(stack: Path, tmp_path: Path):
    rendered = tree(render_stack(stack, tmp_path / "out"))
    assert "MANIFEST.json" in rendered
    want = tree(GOLDEN / stack.stem)
    assert set(want) == set(rendered), (
        "rendered files differ from tests/golden; review and run `make golden`: "
        f"new={sorted(set(rendered) - set(want))} gone={sorted(set(want) - set(rendered))}")
    for path, content in rendered.items():
        assert want[path] == content, f"{stack.stem}/{path} changed; run `make golden`"


def test_the_readme_picture_is_current():
    assert PICTURE.read_text() == draw_picture(), (
        f"{PICTURE.name} is not what `estate plan stacks/example-prod.yaml --svg` draws; "
        "run `make golden`")
