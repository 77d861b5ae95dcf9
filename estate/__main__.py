"""The `estate` process entry (console script and `python -m estate`).

Process-level settings that the command functions cannot make themselves, all for what a
user waits for (bench/bench_scale.py: a whole `estate check` of 10,000 nodes):

- The collector's first-generation threshold goes from 700 to 10,000 allocations, set
  before any import: loading the libraries and deriving a large estate allocate hundreds
  of thousands of objects that live until exit, and the default collector walks them
  again and again (0.02 s of a 0.4 s check). Cycles are still collected, only less often.
- `check` and `render` run with the collector off. What they allocate lives until their
  os._exit; even at 10,000 the collector still walked it six times (0.012-0.014 s of a
  0.25 s render) and freed almost nothing: peak memory with it off was within 4% at
  10,000 and 50,000 nodes and 8,000 Kubernetes workers. Every other command, which may
  run long (the lab, apply), keeps it.
- Pydantic plugins are off unless PYDANTIC_DISABLE_PLUGINS says otherwise: Estate uses
  none, and looking for them reads the metadata of every installed distribution when the
  first model is built (0.007 s of each start, with this project's 90). With them off,
  pydantic's plugin loader is not imported either: it imports importlib.metadata (and
  the email package) at its top for a function that setting never calls, 0.015 s of a
  0.45 s check (_plugins_off).
- What Python compiles at every start (the methods dataclasses generate, typing's
  forward references, namedtuple constructors, regular expressions) is compiled once and
  kept between processes (estate/compiled.py): 0.08 s of a 0.45 s check. What this
  process and a forked child compiled is kept at their exit.
- A plain `check` or `render` command line runs without typer (estate/commands.py).
- `check` and `render` end with os._exit once their output is flushed: tearing down the
  interpreter's object graph of a large estate costs 0.03-0.05 s and frees nothing the
  operating system would not. Both commands hold no resource that needs a finaliser
  (render writes its tree atomically and has renamed it into place before returning);
  every other command exits the normal way.
"""
from __future__ import annotations

import gc
import os
import sys

FAST_EXIT = frozenset({"check", "render", "diff"})


def main() -> None:
    gc.set_threshold(10_000, 50, 50)
    if FAST_EXIT & set(sys.argv[1:2]):
        gc.disable()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _plugins_off()
    _keep_compiled()
    if sys.argv[1:2] == ["diff"]:
        from estate.diff_cli import plain
    else:
        from estate.commands import plain
    call = plain(sys.argv[1:])
    if call is not None:
        _fast_exit(call())
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


# pydantic.plugin._loader.get_plugins' own test for "no plugins"
PLUGINS_OFF = ("__all__", "1", "true")
LOADER = "pydantic.plugin._loader"


def _plugins_off() -> None:
    """Stand in for pydantic's plugin loader while PYDANTIC_DISABLE_PLUGINS turns every
    plugin off: pydantic imports the loader at the first model only to call its
    get_plugins(), which then returns () without reading anything. Should the setting
    change later in this process, the real loader takes over."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in PLUGINS_OFF or LOADER in sys.modules:
        return
    import types
    stub = types.ModuleType(LOADER, "Estate's stand-in: no plugins (PYDANTIC_DISABLE_PLUGINS)")

    def get_plugins():
        if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in PLUGINS_OFF:
            return ()
        import importlib
        if sys.modules.get(LOADER) is stub:
            del sys.modules[LOADER]
        return importlib.import_module(LOADER).get_plugins()

    stub.get_plugins = get_plugins
    sys.modules[LOADER] = stub


def _keep_compiled() -> None:
    import atexit
    from estate import compiled, fork
    compiled.install("check-render" if FAST_EXIT & set(sys.argv[1:2]) else "other")
    atexit.register(compiled.save)   # a command that exits the normal way
    fork.AT_CHILD_EXIT.append(compiled.save)


def _fast_exit(code: int) -> None:
    from estate import compiled
    compiled.save()   # os._exit runs no atexit
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
