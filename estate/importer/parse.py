"""slurm.conf, gres.conf and topology.conf read as Slurm's parser reads them, keeping
line numbers.

Keys are case-insensitive; '#' starts a comment (unless escaped as '\\#'); a line ending
in '\\' continues on the next. Each logical line becomes a list of (key, value) pairs;
the first pair of a NodeName/PartitionName/SwitchName line names the object.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field


@dataclass
class ConfLine:
    number: int          # the first physical line of the logical line
    text: str            # the logical line as written, comments stripped
    pairs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def keyword(self) -> str:
        """The first key, lowercased: 'nodename', 'partitionname', 'clustername'..."""
        return self.pairs[0][0].lower() if self.pairs else ""

    @property
    def name(self) -> str:
        return self.pairs[0][1] if self.pairs else ""

    def params(self) -> dict[str, tuple[str, str]]:
        """lowercase key -> (key as written, value), after the first pair."""
        return {k.lower(): (k, v) for k, v in self.pairs[1:]}


def _strip_comment(raw: str) -> str:
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "\\" and raw[i + 1:i + 2] == "#":
            out.append("#")
            i += 2
            continue
        if raw[i] == "#":
            break
        out.append(raw[i])
        i += 1
    return "".join(out).rstrip()


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with comments stripped and continuations joined."""
    out, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            out.append((start, whole))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


# Slurm's key=value pattern allows blanks around '=' ("ClusterName = nsls2"); quoted values
# are kept as they are
_SPACED = re.compile(r'"[^"]*"|[ \t]*=[ \t]*')


def _pairs(text: str) -> list[tuple[str, str]]:
    """key=value tokens; values may be double-quoted. 'Include path' is a pair too."""
    text = _SPACED.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "=", text)
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    lexer.quotes = '"'
    lexer.escape = ""
    tokens = list(lexer)
    if tokens and tokens[0].lower() == "include":
        return [("Include", " ".join(tokens[1:]))]
    pairs = []
    for tok in tokens:
        key, sep, value = tok.partition("=")
        pairs.append((key, value if sep else ""))
    return pairs


def with_defaults(lines: list[ConfLine]):
    """(line, its parameters over the DEFAULT lines before it): Slurm's NodeName=DEFAULT and
    PartitionName=DEFAULT set values for the lines after them, not a node or partition."""
    defaults: dict = {}
    for line in lines:
        params = line.params()
        if line.name.upper() == "DEFAULT":
            defaults = {**defaults, **params}
            continue
        yield line, {**defaults, **params}


def parse(text: str) -> list[ConfLine]:
    lines = []
    for number, whole in logical_lines(text):
        try:
            pairs = _pairs(whole)
        except ValueError:   # an unbalanced quote: kept whole so it is reported
            pairs = [("", whole)]
        lines.append(ConfLine(number, whole, pairs))
    return lines
