"""What `estate check` and `estate render` do, free of the command-line framework.

estate/cli.py makes them typer commands. estate/__main__.py runs them directly, without
importing typer (0.02-0.03 s of a whole 10,000-node check, bench/bench_scale.py), when the
command line is one of the plain forms `plain()` recognises; everything else (help, usage
errors, `=` forms, repeated or other options, other commands) goes to typer, which gives
the same result for the plain forms (tests/unit/test_commands.py runs both).
"""
from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Callable

from estate.check.findings import Finding, has_errors
from estate.output import OUTPUT_FLAG, LazyConsole, Output, echo, echo_findings
from estate.pipeline import build, debugging, internal_error

OUT_FLAGS = ("-o", "--out")   # render's output directory
_FORMATS = frozenset(o.value for o in Output)

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


def plain(argv: list[str]) -> Callable[[], int] | None:
    """The call for `check SPEC` or `render SPEC -o DIR`, each with at most one
    `--output FORMAT`, in any order; None for any other command line (a plain `diff` is
    estate.diff_cli.plain's)."""
    if argv[:1] not in (["check"], ["render"]):
        return None
    words, options, positional = argv[1:], {}, []
    while words:
        word, *words = words
        if not word or word == "-" or word.startswith("-") and word not in (OUTPUT_FLAG,
                                                                            *OUT_FLAGS):
            return None
        if not word.startswith("-"):
            positional.append(word)
            continue
        key = OUTPUT_FLAG if word == OUTPUT_FLAG else OUT_FLAGS
        if key in options or not words or not words[0] or words[0].startswith("-"):
            return None
        options[key], *words = words
    if len(positional) != 1 or options.get(OUTPUT_FLAG, "auto") not in _FORMATS:
        return None
    spec, output = Path(positional[0]), Output(options.pop(OUTPUT_FLAG, "auto"))
    if argv[0] == "check":
        return None if options else partial(_safely, check, spec, output)
    if OUT_FLAGS not in options:
        return None
    return partial(_safely, render, spec, Path(options[OUT_FLAGS]), output)


def _safely(fn: Callable[..., int], *args) -> int:
    try:
        return fn(*args)
    except BrokenPipeError:   # the reader left (`| head`): click's status, and no message
        return 1
    except KeyboardInterrupt:   # Ctrl-C: what click prints and returns, not a traceback
        print("Aborted!", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - see crashed
        return crashed(exc)
