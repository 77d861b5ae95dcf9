"""The Jinja2 environment shared by every renderer: strict, deterministic, and safe.

Every value a template prints goes through ``finalize``, so no template can forget it:

- a plain string with a newline or another control character is refused (RenderError
  naming the template and the value): it would start a new line, i.e. a new setting in
  slurm.conf or gres.conf, a new key or document in a manifest;
- in a YAML template a plain string must also read back as the same string wherever it
  is printed (block or flow position): no value can open a mapping, a comment, a flow
  collection or turn into a boolean or a number;
- in a shell template (``.sh.j2``) a plain string must be one word that needs no quoting
  (or be printed with ``| shell_quote``).

Structured data reaches templates already dumped: ``tojson`` and the renderers' YAML
dumper return ``Markup``, which finalize passes as it is (a dumper's output may span
lines, and quotes what it must). Code that writes a config line without a template
checks its values with ``line_value``.
"""
from __future__ import annotations

import re
import shlex
from functools import lru_cache
from pathlib import Path

import jinja2
import yaml
from markupsafe import Markup

from estate.spec.types import control_problem

ROOT = Path(__file__).resolve().parents[2]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderError(ValueError):
    """A value that would change the structure of a rendered file."""


def dumped(text: str) -> Markup:
    """Mark the output of a dumper (yaml/json) as structure the templates print verbatim."""
    return Markup(text)


def line_value(value, where: str = "a rendered file"):
    """value, if it can be printed inside one line of a config file; RenderError if not."""
    if isinstance(value, str) and not isinstance(value, Markup):
        problem = control_problem(value)
        if problem:
            raise RenderError(f"{where}: refusing to print {problem}")
    return value


# A word YAML 1.1 (PyYAML's resolvers) reads as a plain string in block and flow context
# alike: a letter first (no number, timestamp, .inf, ~ or indicator), no ':' or '#'.
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_YAML_WORDS = frozenset({"yes", "no", "true", "false", "on", "off", "null"})


def _reads_back(value: str) -> bool:
    """True if value, printed raw, is one YAML plain scalar equal to itself, both as a
    block mapping value and inside a flow mapping."""
    if _PLAIN_WORD.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return True   # the common case, without two YAML parses (1,000 join files)
    return _reads_back_parsed(value)


@lru_cache(maxsize=4096)
def _reads_back_parsed(value: str) -> bool:
    if value != value.strip() or not value:
        return value == ""
    try:
        return (yaml.load(f"k: {value}\n", Loader=_Loader) == {"k": value}
                and yaml.load(f"{{k: {value}}}\n", Loader=_Loader) == {"k": value})
    except yaml.YAMLError:
        return False


@jinja2.pass_context
def _finalize(context: jinja2.runtime.Context, value):
    if not isinstance(value, str) or isinstance(value, Markup):
        return value
    name = context.name or "<string>"
    line_value(value, f"template {name}")
    if name.endswith((".yaml.j2", ".yml.j2")) and not _reads_back(value):
        raise RenderError(f"template {name}: refusing to print {value!r} raw into "
                          "YAML, where it would not read back as the same string; print it "
                          "with | tojson")
    if name.endswith(".sh.j2") and value and shlex.quote(value) != value:
        raise RenderError(f"template {name}: refusing to print {value!r} raw into a "
                          "shell script, where it is not one plain word; print it with "
                          "| shell_quote")
    return value


def shell_quote(value) -> Markup:
    """One shell word, quoted as it needs (a filter for shell templates)."""
    return Markup(shlex.quote(str(value)))


# A word systemd reads as itself in an Exec*= line: no quoting, escaping, specifier (%) or
# variable ($) meaning (systemd.service, "Command lines"; systemd.unit, "Specifiers").
_UNIT_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def unit_word(value, where: str = "a systemd unit") -> str:
    """One argument of a systemd command line, as systemd reads it back: printed raw where
    nothing in it means anything to systemd, else double-quoted with backslash, quote, %
    and $ escaped; RenderError for control characters (a new line is a new setting)."""
    text = str(line_value(str(value), where))
    if _UNIT_PLAIN.fullmatch(text):
        return text
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
               .replace("$", "$$"))
    return f'"{escaped}"'


_SETTINGS = dict(
    undefined=jinja2.StrictUndefined,   # a missing value is a bug, not an empty string
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
    finalize=_finalize,
)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT)), **_SETTINGS)
    env.filters["shell_quote"] = shell_quote
    return env


def render_template(name: str, context: dict) -> bytes:
    return environment().get_template(name).render(**context).encode()
