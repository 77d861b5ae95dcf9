"""`estate verify`: run the role suites and cluster checks, print nodes x checks, write
JSON and JUnit XML.

The suites are pytest modules (testinfra): roles/<role>/tests/test_<role>.py and
estate/verify/checks/test_*.py (files and cluster checks). They run in-process
through pytest with the EstateVerify plugin; pytest writes the JUnit XML.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from estate import paths
from estate.output import Output, annotation, make_console, print_rows
from estate.catalogue import ORDER
from estate.verify.context import VerifyContext
from estate.verify.plugin import CheckResult, EstateVerify

COLUMNS = ORDER + ["cluster"]


def suite_paths() -> list[str]:
    return (sorted(str(p) for p in paths.ROLES.glob("*/tests/test_*.py"))
            + sorted(str(p) for p in paths.CHECKS.glob("test_*.py")))


@dataclass
class VerifyReport:
    results: list[CheckResult]
    exit_code: int
    junit: Path
    json: Path
    reachability: dict | None = None    # reachability.summary(), where it was probed

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


def print_report(report: VerifyReport, nodes: list[str], console: Console,
                 output: Output = Output.auto) -> None:
    roles = [c for c in COLUMNS if any(r.role == c for r in report.results)]
    if output.lines:
        # In a pipe, one line per node and role: the table's width grows with the nodes.
        rows = [[n, role, Text.from_markup(report.cell(n, role)).plain]
                for n in nodes for role in roles if report.cell(n, role)]
        print_rows("estate verify", ["node", "checks", "result"], rows, output)
    else:
        # One row per role's checks, one column per node: a lab's few nodes fit across.
        grid = [[role, *(Text.from_markup(report.cell(n, role)) for n in nodes)] for role in roles]
        print_rows("estate verify: checks x nodes", ["checks", *nodes], grid, output, console)
    _print_problems(report, console, output)
    _print_reachability(report, console, output)
    t = report.totals()
    _line(", ".join(f"{v} {k}" for k, v in sorted(t.items())) +
          f"; JSON {report.json}, JUnit {report.junit}", console, output)


def _print_problems(report: VerifyReport, console: Console, output: Output) -> None:
    for r in report.results:
        if r.outcome not in ("failed", "unsupported"):
            continue
        label = "FAIL" if r.outcome == "failed" else "unsupported"
        if output.resolve() is Output.github and r.outcome == "failed":
            typer.echo(annotation("error", r.detail, title=f"{r.node} {r.role}/{r.check}"))
        _line(Text.assemble((label, "red" if r.outcome == "failed" else "yellow"),
                            f" {r.node} {r.role}/{r.check}: {r.detail}"), console, output)


def _print_reachability(report: VerifyReport, console: Console, output: Output) -> None:
    r = report.reachability
    if r is None:
        return
    _line(f"reachability: {r['probes']} probes, {r['designed_ok']} designed ok, "
          f"{r['denied_ok']} denied ok, {len(r['violations'])} violations", console, output)
    for v in r["violations"]:
        _line(Text.assemble(("VIOLATION", "red"), f" {v['source']} -> {v['destination']} "
                            f"{v['address']} {v['proto']}/{v['port']} ({v['segment']}): "
                            f"expected {v['expected']}"
                            + (f" ({v['designed']})" if v["designed"] else "")
                            + f", got {v['got']}"), console, output)


def _line(text, console: Console, output: Output) -> None:
    if output.lines:
        typer.echo(str(text))
    else:
        console.print(text if isinstance(text, Text) else Text(text))  # details are not markup


def run_verify(estate, render_dir: Path, lab: bool = False, limit: str | None = None,
               outdir: Path = Path("build/verify"), ssh_key: str | None = None,
               ssh_user: str = "root", suites: list[str] | None = None,
               console: Console | None = None, strict_host_keys: bool = True,
               output: Output = Output.auto, reachability: bool | None = None,
               drills: bool = False) -> VerifyReport:
    from estate.provision.inventory import connection
    from estate.provision.secrets import LAB_SECRETS
    ctx = VerifyContext(estate, Path(render_dir), connection(lab, ssh_key, ssh_user,
                                                                strict_host_keys and not lab),
                        Path(outdir), limit, LAB_SECRETS if lab else None,
                        reachability_probe=lab if reachability is None else reachability,
                        drills=drills)
    return run_suites(ctx, suites or suite_paths(), console, output)


def _reachability(ctx: VerifyContext) -> dict | None:
    from estate.verify.reachability import summary
    outcomes = ctx._reachability
    return summary(outcomes) if isinstance(outcomes, list) else None


# Checks that run only when asked (--drills; the lab tier asks): the incident drills, which
# stop a part and wait minutes for its alert, and the acceptance suite run with a check
# broken on purpose, which proves the suite can fail.
EXTRA = "test_drill_ or broken_on_purpose"


def run_suites(ctx: VerifyContext, suites: list[str], console: Console | None = None,
               output: Output = Output.auto) -> VerifyReport:
    """Run the suites and print the report (--output json: the caller prints verify.json,
    so pytest's own progress goes to stderr to keep stdout one JSON document)."""
    import pytest
    paths.roles_package()   # the suites import roles.*
    console = console or make_console()
    outdir = ctx.outdir
    outdir.mkdir(parents=True, exist_ok=True)
    plugin = EstateVerify(ctx)
    junit = outdir / "junit.xml"
    args = [*suites, "-q", "-p", "no:cacheprovider", "-p", "no:pytest11.testinfra",
            "--rootdir", os.path.commonpath([paths.ROLES, paths.CHECKS]),
            "--junitxml", str(junit),
            "-o", "junit_suite_name=estate-verify", "--no-header", "-rN", "--tb=short",
            "-o", "addopts="] + ([] if ctx.drills else ["-k", f"not ({EXTRA})"])
    quiet = output is Output.json
    with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
        code = pytest.main(args, plugins=[plugin])
    report = VerifyReport(plugin.results, int(code), junit, outdir / "verify.json",
                    _reachability(ctx))
    report.json.write_text(json.dumps({"ok": report.ok, "totals": report.totals(),
                                       "results": [asdict(r) for r in report.results],
                                       "reachability": report.reachability},
                                      indent=2) + "\n")
    if not quiet:
        print_report(report, list(ctx.nodes), console, output)
    return report
