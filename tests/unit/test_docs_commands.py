"""Every command the README and docs/ show still parses (issue 45): each `estate ...` line
of a shell block, and each `estate ...` span of the prose that is a command rather than a
synopsis, goes through Estate's own click command tree (commands, options, arguments and
their types; nothing runs), and each `make TARGET` names a target of the Makefile.

Two things are not the page's fault: a path the example names that this machine lacks
(`/etc/slurm/slurm.conf`), and, in the prose, a command named without its arguments
("`estate drift` compares ...")."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
import typer.main

from estate.cli import app

ROOT = Path(__file__).resolve().parents[2]
# Typer carries its own click: its errors, found from the public typer.BadParameter.
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class NoCommand(UsageError):
    """A group named without its subcommand."""
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`((?:estate|make) [^`]+)`")
SHELL = {"", "sh", "bash", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|", ">", ">>", "2>&1", "<"}
# A synopsis, not a command: placeholders and alternatives ([--limit HOSTLIST], a|b, up/down,
# ...), in a span or in one word of a block's command.
SYNOPSIS = re.compile(r"[\[\]|…<>{}]|\.\.\.|^[a-z]+/[a-z]+$")


def _blocks(text: str) -> list[str]:
    """Shell lines of the fenced blocks, continuations joined."""
    lines = []
    for lang, body in FENCE.findall(text):
        if lang in SHELL:
            lines += body.replace("\\\n", " ").splitlines()
    return lines


def _spans(text: str) -> list[str]:
    prose = FENCE.sub("", text)
    return [s for s in SPAN.findall(prose.replace("\n", " ")) if not SYNOPSIS.search(s)]


def _commands(line: str) -> list[list[str]]:
    """Each simple command of a shell line, without its environment assignments."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return []
    out, current = [], []
    for w in words:
        if w in SEPARATORS:
            out.append(current)
            current = []
        else:
            current.append(w)
    out.append(current)
    return [[w for i, w in enumerate(c) if not (re.match(r"^[A-Z_][A-Z0-9_]*=", w) and
                                                 all("=" in x for x in c[:i]))]
            for c in out if c]


def _estate_args(words: list[str]) -> list[str] | None:
    if not words:
        return None
    if words[0] == "estate" or words[0].endswith("/estate"):
        return words[1:]
    if re.search(r"(^|/)python3?$", words[0]) and words[1:3] in (["-m", "estate"],
                                                                 ["-m", "estate.cli"]):
        return words[3:]
    return None


def _shown() -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    estate, make = [], []
    for page in PAGES:
        text = page.read_text()
        where = page.relative_to(ROOT)
        spans = set(_spans(text))
        for line in _blocks(text) + sorted(spans):
            for words in _commands(line):
                args = _estate_args(words)
                if args is not None and not any(SYNOPSIS.search(w) for w in args):
                    named = line in spans   # prose naming a command, maybe without arguments
                    estate.append((f"{where}: {line.strip()}", args, named))
                elif words[0] == "make":
                    make += [(f"{where}: {line.strip()}", t) for t in words[1:]
                             if not t.startswith("-") and "=" not in t]
    return estate, make


ESTATE, MAKE = _shown()


def parse(args: list[str]):
    """Parse args down to the leaf command, as `estate` would, without running it: the
    context of the command that would run (its params converted)."""
    command = typer.main.get_command(app)
    ctx = command.make_context("estate", list(args))
    while hasattr(command, "resolve_command"):   # a group: on to its subcommand
        protected = ctx._protected_args if hasattr(ctx, "_protected_args") else \
            ctx.protected_args   # click renamed it in 8.2
        rest = [*protected, *ctx.args]
        if not rest:
            raise NoCommand("no command", ctx)
        name, command, rest = command.resolve_command(ctx, rest)
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


def test_the_pages_show_commands():
    assert len(ESTATE) > 30 and len(MAKE) > 5


def _excused(exc: Exception, named: bool) -> bool:
    kind = type(exc).__name__
    if kind == "BadParameter" and "does not exist" in exc.format_message():
        return True   # a path on the reader's machine
    if named and kind == "BadOptionUsage":
        return "requires an argument" in exc.format_message()   # "`estate plan --svg`"
    return named and kind in ("MissingParameter", "NoArgsIsHelpError", "NoCommand")


@pytest.mark.parametrize("where,args,named", ESTATE, ids=[w for w, _, _ in ESTATE])
def test_every_estate_command_shown_parses(where, args, named):
    try:
        parse(args)
    except ClickException as exc:
        if not _excused(exc, named):
            pytest.fail(f"{where}\n  estate {shlex.join(args)}: {exc.format_message()}")


def test_a_stale_command_is_caught():
    with pytest.raises(UsageError):
        parse(["check", "stacks/lab.yaml", "--no-such-option"])
    with pytest.raises(UsageError):
        parse(["lab", "upp"])
    with pytest.raises(UsageError):
        parse(["report", "stacks/lab.yaml", "--since"])
    assert parse(["lab", "up", "stacks/lab.yaml", "-o", "build/lab"]).info_name == "up"


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", text, re.M))


@pytest.mark.parametrize("where,target", MAKE, ids=[f"{w} -> {t}" for w, t in MAKE])
def test_every_make_target_shown_exists(where, target):
    assert target in _targets(), f"{where}: no target {target!r} in the Makefile"


def test_the_readme_is_read_in_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) < 300


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    text = FENCE.sub("", page.read_text())
    missing = [t for t in LINK.findall(text)
               if not re.match(r"[a-z]+:", t) and not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: {missing}"
