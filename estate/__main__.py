"""The `estate` process entry (console script and `python -m estate`).

typer parses every command line (estate/cli.py); what keeps a plain `estate check` short
is that it imports only what check needs (estate.cli.LazyGroup).

Pydantic plugins are off unless PYDANTIC_DISABLE_PLUGINS says otherwise (pydantic's own
setting): Estate uses none, and looking for them reads the metadata of every installed
distribution when the first model is built.

`check`, `render` and `diff` end with os._exit once their output is flushed: tearing down
the interpreter's object graph of a large estate frees nothing the operating system would
not. None of them holds a resource that needs a finaliser (render writes its tree
atomically and has renamed it into place before returning); every other command exits the
normal way.
"""
from __future__ import annotations

import os
import sys

FAST_EXIT = frozenset({"check", "render", "diff"})


def main() -> None:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from estate.cli import app
    if not FAST_EXIT & set(sys.argv[1:2]):
        app()
        return
    try:
        app()
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    _fast_exit(code)


def _fast_exit(code: int) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:   # the reader left (`| head`): the interpreter's own status
        code = code or 120
    os._exit(code)


def _exit_status(code) -> int:
    """SystemExit's code as the interpreter would turn it into a status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    sys.stderr.flush()
    return 1


if __name__ == "__main__":
    main()
