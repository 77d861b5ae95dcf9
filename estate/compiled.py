"""Code Python generates at every start, compiled once and kept between processes.

Three things are compiled from source in every process, and the same source gives the same
result each time:

- **Dataclass methods.** A dataclass's __init__, __repr__, __eq__ (and a frozen one's
  __setattr__, __delattr__, __hash__) are written out as Python source and compiled when
  its class statement runs. On Python 3.11 that is 1-1.5 ms per class: the 79 on a plain
  `estate check`'s path (Estate's and its libraries': annotated_types alone defines 25)
  cost 0.05 s of a 0.45 s check.
- **Forward references and named tuples.** typing compiles each string annotation it
  meets into a ForwardRef (pydantic_core's schema TypedDicts alone hold about 800, 7 ms),
  and namedtuple each class's __new__ (30 in a check, 2.8 ms).
- **Regular expressions.** re parses each pattern and computes the engine's code in
  Python: the 82 a check compiles (PyYAML's, jinja2's, pydantic's, Estate's) cost 0.025 s,
  6 ms of it PyYAML's printable-character class.

All of it happens mostly before a check can fork, so on the path of everything after.

install() puts a Memo (estate.cache) in front of each: the dataclass module's exec,
typing's compile and collections' eval keyed by the mode and source text, and re's compiler keyed by the
pattern and its flags (the engine's code is kept only if a pattern built from it equals
the one re builds itself). Entries are per interpreter (bytecode magic number, cache tag,
-O level, re's engine version), like a __pycache__ file. They hold code this process runs,
so they live only in estate.cache's directory, the user's own and closed to others;
without it (ESTATE_NO_CACHE=1) each process compiles as before.

Only the `estate` entry installs it (estate/__main__.py); importing estate as a library
changes nothing in the importing process.
"""
from __future__ import annotations

import builtins
import collections
import dataclasses
import re
import sys
import typing
from importlib.util import MAGIC_NUMBER
from re import _compiler, _constants, _parser   # the same interpreter's, keyed below
from types import CodeType

import _sre

from estate import cache

_INTERPRETER = (MAGIC_NUMBER.hex(), sys.implementation.cache_tag, str(sys.flags.optimize))
_memos: dict[str, cache.Memo] = {}
_REAL_RE_COMPILE = _compiler.compile


def install(workload: str = "") -> None:
    """From now on, dataclasses, typing, namedtuple and re in this process compile through
    the memos. Each workload has its own: a process reads every entry of its memo at the
    first lookup (2.5 ms for 450 KB of code), and what `estate check` compiles is a
    fraction of what every command does (the lab's, typer's and rich's classes, and
    patterns built from a set, which differ in each process: tokenize's)."""
    if not _memos:
        _memos["code"] = cache.Memo("python-code", (*_INTERPRETER, workload))
        _memos["re"] = cache.Memo("re-code", (*_INTERPRETER, str(_constants.MAGIC), workload))
    # each module's global name shadows the builtin
    dataclasses.exec = _exec
    typing.compile = _typing_compile
    collections.eval = _eval   # namedtuple's
    _compiler.compile = _re_compile   # what re._compile calls for a pattern it lacks


def save() -> None:
    """Keep what this process compiled for the next ones (a no-op when nothing was)."""
    for memo in _memos.values():
        memo.save(reread=True)   # with what a forked child kept before this process exits


# --- dataclasses, typing and namedtuple ------------------------------------------------

def _exec(source, globals=None, locals=None, /, **kwargs):   # noqa: A002 - exec's own names
    if type(source) is str and _memos:
        source = _code(source, "exec")
    return builtins.exec(source, globals, locals, **kwargs)


def _eval(source, globals=None, locals=None, /):   # noqa: A002 - eval's own names
    if type(source) is str and _memos:
        source = _code(source, "eval")
    return builtins.eval(source, globals, locals)


def _typing_compile(source, filename, mode, *args, **kwargs):
    """typing's one compile: a ForwardRef's string, "<string>", "eval"."""
    if type(source) is str and (filename, mode, args, kwargs) == ("<string>", "eval", (), {}):
        return _code(source, "eval")
    return builtins.compile(source, filename, mode, *args, **kwargs)


def _code(source: str, mode: str) -> CodeType:
    if not _memos:
        return _compile(source, mode)
    code = _memos["code"].get(f"{mode} {source}", lambda: _compile(source, mode))
    return code if type(code) is CodeType else _compile(source, mode)


def _compile(source: str, mode: str) -> CodeType:
    # as dataclasses.py, typing.py and collections compile it: none has __future__ flags
    return compile(source, "<string>", mode, dont_inherit=True)


# --- regular expressions -----------------------------------------------------------------

def _re_compile(pattern, flags=0):
    if type(pattern) not in (str, bytes) or flags & re.DEBUG or not _memos:
        return _REAL_RE_COMPILE(pattern, flags)
    args = _memos["re"].get(f"{flags} {pattern!r}", lambda: _engine_args(pattern, flags))
    return _sre.compile(*args) if type(args) is tuple else _REAL_RE_COMPILE(pattern, flags)


def _engine_args(pattern, flags: int) -> tuple | None:
    """What re._compiler.compile passes to the engine for this pattern; None where a
    pattern built from it is not the one re builds (another Python's internals)."""
    parsed = _parser.parse(pattern, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup = [None] * parsed.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    code = [int(op) for op in _compiler._code(parsed, flags)]   # marshal keeps no int subclass
    args = (pattern, flags | parsed.state.flags, code,
            parsed.state.groups - 1, groupindex, tuple(indexgroup))
    try:
        ours, real = _sre.compile(*args), _REAL_RE_COMPILE(pattern, flags)
    except Exception:   # noqa: BLE001 - not this interpreter's shape: compile as re does
        return None
    # a Pattern's == compares its flags, text and engine code, not its group names
    same = ours == real and (ours.groups, ours.groupindex) == (real.groups, real.groupindex)
    return args if same else None
