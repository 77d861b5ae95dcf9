"""Rewrite the golden snapshots (tests/golden/<stack>/) from the current renderer: `make
golden`, then review the diff. Plumbing of the project, not a test: the Makefile runs it,
and tests/golden/test_golden.py reads the same functions to compare.

It also redraws the README's picture of example-prod (docs/estate-example-prod.svg).

    .venv/bin/python scripts/golden.py
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script

from estate.pipeline import build
from estate.render import write_tree
from estate.render.picture import render_svg

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
PICTURE = ROOT / "docs" / "estate-example-prod.svg"
STACKS = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


def render_stack(stack: Path, out: Path) -> Path:
    """The tree `estate render` writes for a stack (paths relative to the repository)."""
    result = build(stack.relative_to(ROOT))
    if not result.ok:
        raise SystemExit(f"{stack}: {[f.as_dict() for f in result.findings]}")
    write_tree(result.artifacts, out)
    return out


def draw_picture() -> str:
    """What `estate plan stacks/example-prod.yaml --svg FILE` writes."""
    result = build(ROOT / "stacks" / "example-prod.yaml")
    if not result.ok:
        raise SystemExit(f"example-prod: {[f.as_dict() for f in result.findings]}")
    return render_svg(result.estate)


def main() -> int:
    for stack in STACKS:
        target = GOLDEN / stack.stem
        shutil.rmtree(target, ignore_errors=True)
        render_stack(stack, target)
        print(f"wrote {target.relative_to(ROOT)}")
    PICTURE.write_text(draw_picture())
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
