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

import hashlib
import importlib
import re
import shlex
from functools import lru_cache
from typing import Any

import jinja2
import yaml
from markupsafe import Markup

from estate import paths
from estate.spec.types import control_problem

ROOT = paths.TREE   # template names are relative to it: "slurm_conf/...", "k8s/..."
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


_SETTINGS: dict[str, Any] = dict(
    undefined=jinja2.StrictUndefined,   # a missing value is a bug, not an empty string
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
    finalize=_finalize,
)


# --- templates compiled ahead, shipped as Python modules ----------------------------------
#
# Jinja lexes, parses and generates Python for each template, and Python compiles that:
# 0.2-0.3 s of every render and check (20-odd templates), the same work each time. The
# modules of estate/render/compiled/ hold that Python, written by
# `python -m estate.render.templates` (Jinja's own form for it: Environment.compile with
# defer_init, loaded as its ModuleLoader does), and are imported as any module is. Each
# records the sha256 of its template's source, the Jinja version and these settings;
# where any differs from what runs (a template edited since), the template is compiled
# from its source instead. tests/unit/test_render.py holds the modules to a fresh compile.
COMPILED = paths.PACKAGE / "render" / "compiled"
COMPILED_PACKAGE = "estate.render.compiled"
TEMPLATE_DIRS = ("slurm_conf", "k8s/templates")


def compiled_name(template: str) -> str:
    """The module of a template: its path with every other character an underscore."""
    return "t_" + re.sub(r"[^A-Za-z0-9]", "_", template)


def _stamp(source: str) -> tuple[str, str, str]:
    settings = ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in _SETTINGS.items())
    return hashlib.sha256(source.encode()).hexdigest(), jinja2.__version__, settings


class _TemplateLoader(jinja2.FileSystemLoader):
    """The template's compiled module where it was compiled from this very source, else the
    template compiled from its source."""

    def load(self, environment, name, globals=None):
        source, _, _ = self.get_source(environment, name)
        try:
            module = importlib.import_module(f"{COMPILED_PACKAGE}.{compiled_name(name)}")
        except ImportError:
            module = None
        if getattr(module, "STAMP", None) != _stamp(source):
            return super().load(environment, name, globals)
        return environment.template_class.from_module_dict(environment, vars(module),
                                                          globals or {})


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=_TemplateLoader(str(ROOT)), **_SETTINGS)
    env.filters["shell_quote"] = shell_quote
    return env


def template_names() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for top in TEMPLATE_DIRS
                  for p in (ROOT / top).rglob("*.j2"))


def compiled_source(name: str) -> str:
    """The module the template compiles to (what write_compiled writes)."""
    env = environment()
    source, _, _ = env.loader.get_source(env, name)
    code = env.compile(source, name, name, raw=True, defer_init=True)
    return (f'"""{name}, compiled by estate.render.templates.write_compiled: do not edit."""\n'
            f"STAMP = {_stamp(source)!r}\n{code}\n")


def write_compiled() -> None:
    """Compile every template into estate/render/compiled/ (after editing one)."""
    COMPILED.mkdir(exist_ok=True)
    for old in COMPILED.glob("t_*.py"):
        old.unlink()
    (COMPILED / "__init__.py").write_text('"""Estate\'s templates, compiled ahead '
                                          '(estate.render.templates)."""\n')
    for name in template_names():
        (COMPILED / f"{compiled_name(name)}.py").write_text(compiled_source(name))


def render_template(name: str, context: dict) -> bytes:
    return environment().get_template(name).render(**context).encode()


if __name__ == "__main__":
    write_compiled()
