"""What `estate check` and `estate render` do, free of the command-line framework
(estate/cli.py makes them typer commands, and imports this module when one runs)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from estate.findings import Finding, has_errors
from estate.output import LazyConsole, Output, echo, echo_findings
from estate.pipeline import build, debugging, internal_error

console = LazyConsole()
err_console = LazyConsole(stderr=True)


def print_findings(findings: list[Finding], output: Output, spec: Path | None = None) -> None:
    if output is Output.json:
        echo(json.dumps([f.as_dict() for f in findings], indent=2))
        return
    if output.lines:
        echo_findings(findings, output, str(spec or ""))
        return
    if not findings:
        console.print("[green]no findings[/green]")
        return
    from rich.table import Table   # a table only on a terminal: 40 ms of imports
    table = Table(show_lines=False)
    for col in ("severity", "id", "path", "message", "hint", "location"):
        table.add_column(col, overflow="fold")
    colour = {"error": "red", "warning": "yellow", "info": "blue"}
    for f in findings:
        sev = f.severity.value
        table.add_row(f"[{colour[sev]}]{sev}[/]", f.id, f.path, f.message, f.hint, f.location)
    console.print(table)


def check(spec: Path, output: Output) -> int:
    """Report every problem in a spec at once; exit 1 if any is an error."""
    result = build(spec, parallel=True)
    print_findings(result.findings, output, spec)
    return 1 if has_errors(result.findings) else 0


def render(spec: Path, out: Path, output: Output) -> int:
    """Check and render a spec into DIR, atomically: on any error DIR is left as it was."""
    from estate.render import write_tree
    result = build(spec, parallel=True)
    if not result.ok:
        print_findings(result.findings, output, spec)
        err_console.print(f"[red]not rendered[/red]: {out} left unchanged")
        return 1
    try:
        write_tree(result.artifacts, out)
    except OSError as exc:
        err_console.print(f"[red]not rendered[/red]: cannot write {out}: "
                          f"{exc.strerror or exc}; {out} left unchanged")
        return 1
    if output is Output.json:
        echo(json.dumps({"out": str(out), "artifacts": result.artifacts.manifest(),
                         "findings": [f.as_dict() for f in result.findings]}, indent=2))
        return 0
    if result.findings:
        print_findings(result.findings, output, spec)
    echo(f"rendered {len(result.artifacts)} files into {out}")
    return 0


def crashed(exc: Exception) -> int:
    """The last safety net: an exception no stage turned into a finding is one
    internal.error line on stderr and exit status 1, without a traceback unless --debug."""
    if debugging():
        raise exc
    f = internal_error(exc, "estate")
    print(f"error {f.id}: {f.message} ({f.hint})", file=sys.stderr)
    return 1
