"""The broken spec: every seeded mistake is reported at its path, and render refuses it.

tests/data/broken-prod.yaml is stacks/example-prod.yaml with mistakes seeded in,
each marked by a comment ``# expect: <validator id> <spec path>``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from estate.check import check_spec, has_errors
from estate.spec.load import load
from estate.spec.resolved import Estate

DATA = Path(__file__).resolve().parents[1] / "data"
BROKEN = DATA / "broken-prod.yaml"
EXPECT = re.compile(r"#\s*expect:\s*(\S+)\s+(\S+)")


def expectations(path: Path) -> list[tuple[str, str, int]]:
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        out += [(m.group(1), m.group(2), lineno) for m in EXPECT.finditer(line)]
    return out


@pytest.fixture(scope="module")
def findings():
    loaded = load(BROKEN)
    assert loaded.findings == [], "the broken spec must stay schema-valid so validators run"
    return check_spec(Estate(loaded.spec), loaded.source.locate)


def test_the_broken_spec_seeds_many_mistakes():
    assert len(expectations(BROKEN)) >= 30


@pytest.mark.parametrize("vid,path,lineno", expectations(BROKEN),
                         ids=[f"{v}:{p}" for v, p, _ in expectations(BROKEN)])
def test_seeded_mistake_reported(findings, vid, path, lineno):
    reported = {(f.id, f.path): f for f in findings}
    assert (vid, path) in reported, (f"line {lineno}: {vid} at {path} not reported; got "
                                     f"{sorted(k for k in reported if k[0] == vid)}")
    finding = reported[(vid, path)]
    # the reported position is in the file and near the seeded line (same item)
    file, line, _ = finding.location.rsplit(":", 2)
    assert file == str(BROKEN)
    assert abs(int(line) - lineno) <= 8, f"{finding.location} is far from line {lineno}"


def test_no_unexpected_findings(findings):
    """Every finding is seeded on purpose: a stray one means a validator misfires."""
    seeded = {(v, p) for v, p, _ in expectations(BROKEN)}
    stray = [(f.id, f.path, f.message) for f in findings if (f.id, f.path) not in seeded
             and f.id.split(".")[0] != "kubernetes"]
    assert stray == []


def test_render_refuses_broken_spec_and_leaves_dir_untouched(tmp_path):
    from estate.cli import app
    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm.conf").write_bytes(b"# previous render\nClusterName=prod\n")
    (out / "nested").mkdir()
    (out / "nested" / "keep.json").write_bytes(b'{"a": 1}\n')
    before = _snapshot(out)

    result = CliRunner().invoke(app, ["render", str(BROKEN), "-o", str(out), "--output", "json"])

    assert result.exit_code == 1, result.output
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "temporary trees left behind"
    assert "topology.cycle" in result.output


def test_check_cli_exits_nonzero_on_broken_spec():
    from estate.cli import app
    result = CliRunner().invoke(app, ["check", str(BROKEN), "--output", "json"])
    assert result.exit_code == 1
    assert "slurm.gres_mismatch" in result.output


def test_broken_spec_has_errors_not_only_warnings(findings):
    assert has_errors(findings)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}
