"""How a command prints: a table on a terminal, whole lines in a pipe.

Rich wraps tables at 80 columns when stdout is not a terminal, cutting identifiers
across lines, so ``grep`` and CI logs miss them. ``auto`` (the default) therefore
prints a table only on a terminal and one line per row or finding otherwise:
findings in the compiler convention editors and CI parse
(``FILE:LINE:COL: SEVERITY ID: message [spec.path] (hint)``), tables as aligned
columns. ``github`` prints workflow annotations; ``json`` is for programs.
"""
from __future__ import annotations

import re
import sys
from enum import Enum

from typing import TYPE_CHECKING, Literal

from estate.findings import Finding, Severity

if TYPE_CHECKING:
    from rich.console import Console


class Output(str, Enum):
    auto = "auto"
    table = "table"
    text = "text"
    json = "json"
    github = "github"

    def resolve(self) -> "Output":
        if self is not Output.auto:
            return self
        return Output.table if sys.stdout.isatty() else Output.text

    @property
    def lines(self) -> bool:
        """Whether rows print as plain lines (not a rich table)."""
        return self.resolve() in (Output.text, Output.github)


OUTPUT_FLAG = "--output"
OUTPUT_HELP = ("auto (table on a terminal, text otherwise), table, text (one line per "
               "row or finding, never wrapped), json, or github (workflow annotations).")


def output_option():
    """The --output option, shared by every command that prints findings or rows."""
    import typer
    return typer.Option(Output.auto, OUTPUT_FLAG, help=OUTPUT_HELP)


# How a command reaches the nodes over ssh (estate.provision.inventory.connection): the
# same four options on every command that does (apply, verify, report, drift, handoff).
def lab_option():
    import typer
    return typer.Option(False, "--lab", help="Reach nodes as the lab does (its key, as root, "
                        "no host key checks).")


def ssh_key_option():
    import typer
    return typer.Option(None, "--ssh-key", help="The private key ssh offers the nodes.")


def ssh_user_option():
    import typer
    return typer.Option("root", "--ssh-user", help="The user ssh logs in as.")


def strict_host_keys_option():
    import typer
    return typer.Option(True, "--strict-host-keys/--no-strict-host-keys",
                        help="Refuse a node whose host key known_hosts does not hold "
                        "(--lab never checks).")


def echo(text: str) -> None:
    """A line on stdout, flushed as typer.echo flushes it (stdout and stderr keep their
    order in a shared pipe), without importing typer for it."""
    print(text, flush=True)


def help_markup() -> Literal["rich"] | None:
    """Typer's help style: rich boxes on a terminal; click's plain help (wrapped between
    words, never inside one) in a pipe, where rich would cut option names at 80 columns."""
    return "rich" if sys.stdout.isatty() else None


def make_console(stderr: bool = False) -> Console:
    """A rich console that never cuts a word when its stream is not a terminal."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    # Rich assumes 80 columns for a pipe; a wide width keeps table cells whole.
    return Console(stderr=stderr, soft_wrap=True, width=10_000)


class LazyConsole:
    """A module's console, made on first use: a command that prints plain lines into a
    pipe (`estate check` in CI) never imports rich, 0.03 s of its start."""

    def __init__(self, stderr: bool = False):
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str):
        if self._console is None:
            self._console = make_console(self._stderr)
        return getattr(self._console, name)


# --- findings ---------------------------------------------------------------

_LOCATION = re.compile(r"^(?P<file>.*?)(?::(?P<line>\d+))?(?::(?P<col>\d+))?$")


def split_location(location: str, default_file: str = "") -> tuple[str, int | None, int | None]:
    """(file, line, column) of a ``file:line:col`` location; missing parts are None."""
    m = _LOCATION.match(location or "")
    line, col = m.group("line"), m.group("col")
    return (m.group("file") or default_file, int(line) if line else None,
            int(col) if col else None)


def finding_line(f: Finding, default_file: str = "") -> str:
    file, line, col = split_location(f.location, default_file)
    where = ":".join(str(p) for p in (file, line, col) if p not in (None, ""))
    return (f"{where}: " if where else "") + f"{f.severity.value} {f.id}: {_body(f)}"


def _body(f: Finding) -> str:
    return f"{f.message} [{f.path}]" + (f" ({f.hint})" if f.hint else "")


_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, **props) -> str:
    """A GitHub workflow command such as ``::error file=F,line=L,title=T::message``."""
    given = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items()
                     if v not in (None, ""))
    return f"::{level}{' ' + given if given else ''}::{escape_data(message)}"


def finding_annotation(f: Finding, default_file: str = "") -> str:
    file, line, col = split_location(f.location, default_file)
    return annotation(_LEVEL[f.severity], _body(f), file=file, line=line, col=col, title=f.id)


def summary(findings: list[Finding]) -> str:
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    e, w, i = counts[Severity.ERROR], counts[Severity.WARNING], counts[Severity.INFO]
    text = f"{e} error{'s' * (e != 1)}, {w} warning{'s' * (w != 1)}"
    return text + (f", {i} info" if i else "")


def echo_findings(findings: list[Finding], output: Output, default_file: str = "") -> None:
    """Findings one per line (text or github); never wrapped, whatever the width."""
    if not findings:
        echo("no findings")
        return
    fmt = finding_annotation if output.resolve() is Output.github else finding_line
    for f in findings:
        echo(fmt(f, default_file))
    echo(summary(findings))


# --- tables as lines ----------------------------------------------------------

def echo_columns(header: list[str], rows: list[list[str]]) -> None:
    """Aligned columns, one row per line (as ``kubectl get`` prints): the last column is
    free text, empty cells print '-' so every row has a value in each column."""
    cells = [[c if c != "" else "-" for c in map(str, row)] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    for row in cells:
        echo("  ".join([c.ljust(w) for c, w in zip(row, widths)] + row[-1:]).rstrip())


def print_rows(title: str | None, header: list[str], rows: list[list], output: Output,
               console: Console | LazyConsole | None = None) -> None:
    """A rich table on a terminal (or --output table); aligned lines otherwise.
    Cells are plain strings (never read as markup) or styled rich Text."""
    if output.lines:
        if title:
            echo(title)
        echo_columns(header, [[str(c) for c in row] for row in rows])
        return
    from rich.table import Table   # a table only on a terminal: 40 ms of imports
    from rich.text import Text
    table = Table(title=title)
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in row))
    (console or make_console()).print(table)
