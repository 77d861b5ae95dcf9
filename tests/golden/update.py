"""Rewrite the golden snapshots from the current renderer: `make golden`, then review the diff.

    python -m tests.golden.update
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from estate.pipeline import build
from estate.render import write_tree

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent
STACKS = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))


def render_stack(stack: Path, out: Path) -> Path:
    """The tree `estate render` writes for a stack (paths relative to the repository)."""
    result = build(stack.relative_to(ROOT))
    if not result.ok:
        raise SystemExit(f"{stack}: {[f.as_dict() for f in result.findings]}")
    write_tree(result.artifacts, out)
    return out


def main() -> int:
    for stack in STACKS:
        target = GOLDEN / stack.stem
        shutil.rmtree(target, ignore_errors=True)
        render_stack(stack, target)
        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
