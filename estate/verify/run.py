"""`estate verify`: run the role suites and cluster checks, print nodes x checks, write
JSON and JUnit XML.

The suites are pytest modules (testinfra): roles/<role>/tests/test_<role>.py and
estate/verify/checks/test_*.py (files and cluster checks). They run in-process
through pytest with the EstateVerify plugin; pytest writes the JUnit XML.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from estate.provision.inventory import ORDER
from estate.verify.context import VerifyContext
from estate.verify.plugin import CheckResult, EstateVerify

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ORDER + ["cluster"]


def suite_paths() -> list[str]:
    paths = sorted(str(p) for p in (ROOT / "roles").glob("*/tests/test_*.py"))
    paths += sorted(str(p) for p in (ROOT / "estate" / "verify" / "checks").glob("test_*.py"))
    return paths


@dataclass
class Report:
    results: list[CheckResult]
    exit_code: int
    junit: Path
    json: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not any(r.outcome == "failed" for r in self.results)

    def totals(self) -> dict:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    def cell(self, node: str, role: str) -> str:
        rs = [r for r in self.results if r.node == node and r.role == role]
        if not rs:
            return ""
        failed = sum(r.outcome == "failed" for r in rs)
        passed = sum(r.outcome == "passed" for r in rs)
        if failed:
            return f"[red]FAIL {failed}/{len(rs)}[/]"
        if any(r.outcome == "unsupported" for r in rs):
            return (f"[green]ok {passed}[/] " if passed else "") + "[yellow]unsupported[/]"
        skipped = len(rs) - passed
        return f"[green]ok {passed}[/]" + (f" [dim]+{skipped} skipped[/]" if skipped else "")


def print_report(report: Report, nodes: list[str], console: Console) -> None:
    # One row per role's checks, one column per node: a lab's few nodes fit across.
    rows = [c for c in COLUMNS if any(r.role == c for r in report.results)]
    table = Table(title="estate verify: checks x nodes")
    table.add_column("checks")
    for n in nodes:
        table.add_column(n)
    for role in rows:
        table.add_row(role, *(report.cell(n, role) for n in nodes))
    console.print(table)
    for r in report.results:
        if r.outcome == "failed":
            console.print(f"[red]FAIL[/red] {r.node} {r.role}/{r.check}: {r.detail}")
        elif r.outcome == "unsupported":
            console.print(f"[yellow]unsupported[/yellow] {r.node} {r.role}/{r.check}: {r.detail}")
    t = report.totals()
    console.print(", ".join(f"{v} {k}" for k, v in sorted(t.items())) +
                  f"; JSON {report.json}, JUnit {report.junit}")


def run_verify(estate, render_dir: Path, lab: bool = False, limit: str | None = None,
               outdir: Path = Path("build/verify"), ssh_key: str | None = None,
               ssh_user: str = "root", suites: list[str] | None = None,
               console: Console | None = None, strict_host_keys: bool = True) -> Report:
    from estate.provision.cli import _connection
    from estate.provision.lab import SECRETS
    ctx = VerifyContext(estate, Path(render_dir), _connection(lab, ssh_key, ssh_user,
                                                                strict_host_keys and not lab),
                        Path(outdir), limit, SECRETS if lab else None)
    return run_suites(ctx, suites or suite_paths(), console)


def run_suites(ctx: VerifyContext, suites: list[str], console: Console | None = None) -> Report:
    import sys

    import pytest
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # suites import roles.* (a top-level package)
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    outdir = ctx.outdir
    outdir.mkdir(parents=True, exist_ok=True)
    plugin = EstateVerify(ctx)
    junit = outdir / "junit.xml"
    args = [*suites, "-q", "-p", "no:cacheprovider", "-p", "no:pytest11.testinfra",
            "--rootdir", str(ROOT), "--junitxml", str(junit),
            "-o", "junit_suite_name=estate-verify", "--no-header", "-rN", "--tb=short",
            "-o", "addopts="]
    code = pytest.main(args, plugins=[plugin])
    report = Report(plugin.results, int(code), junit, outdir / "verify.json")
    report.json.write_text(json.dumps({"ok": report.ok, "totals": report.totals(),
                                       "results": [asdict(r) for r in report.results]},
                                      indent=2) + "\n")
    print_report(report, list(ctx.nodes), console)
    return report
