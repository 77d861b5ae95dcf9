"""The code of the methods @dataclass generates, compiled once and kept between processes.

A dataclass's __init__, __repr__, __eq__ (and a frozen one's __setattr__, __delattr__,
__hash__) are written out as Python source and compiled when its class statement runs,
in every process. On Python 3.11 that is 1-1.5 ms per class: the 79 dataclasses on a
plain `estate check`'s path (Estate's and its libraries': annotated_types alone defines
25) cost 0.05 s of a 0.45 s check, most of it before the check can fork.

install() has the dataclasses module compile through a Memo (estate.cache) keyed by the
source text itself: the same source gives the same code, and a class whose fields change
gives new source, so a new entry. The entry is per interpreter (bytecode magic number,
cache tag, optimisation level), like a __pycache__ file. It holds code this process
runs, so it lives only in estate.cache's directory, the user's own and closed to others;
without that directory (ESTATE_NO_CACHE=1) each process compiles as before.

Only the `estate` entry installs it (estate/__main__.py); importing estate as a library
changes nothing in the importing process.
"""
from __future__ import annotations

import builtins
import dataclasses
import sys
from importlib.util import MAGIC_NUMBER
from types import CodeType

from estate import cache

NAME = "dataclass-code"
_memo: cache.Memo | None = None


def install() -> None:
    """From now on, dataclasses in this process compile their methods through the memo."""
    global _memo
    if _memo is None:
        _memo = cache.Memo(NAME, (MAGIC_NUMBER.hex(), sys.implementation.cache_tag,
                                  str(sys.flags.optimize)))
    dataclasses.exec = _exec   # the module's global name shadows the builtin


def save() -> None:
    """Keep what this process compiled for the next ones (a no-op when nothing was)."""
    if _memo is not None:
        _memo.save(reread=True)   # with what a forked child kept before this process exits


def _exec(source, globals=None, locals=None, /, **kwargs):   # noqa: A002 - exec's own names
    if type(source) is str and _memo is not None:
        code = _memo.get(source, lambda: _compile(source))
        source = code if type(code) is CodeType else _compile(source)
    return builtins.exec(source, globals, locals, **kwargs)


def _compile(source: str) -> CodeType:
    # as exec(str) inside dataclasses.py compiles it: that module has no __future__ flags
    return compile(source, "<string>", "exec", dont_inherit=True)
