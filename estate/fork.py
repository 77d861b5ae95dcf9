"""One function run in a forked child while the parent goes on.

`estate check` and `estate render` spend most of their own time in two independent halves
once the spec is loaded: the spec validators, and rendering (then checking what was
rendered). The pipeline runs the validators in a child on the second core while the parent
renders (bench/bench_scale.py: 10,000 nodes). The child returns its result pickled
through a pipe; it shares nothing else with the parent, so nothing it caches or changes
reaches the parent's estate.

Only for a process with one thread: a child forked from a process with other threads
(the Pulumi language host's gRPC threads, a test runner's) holds their locks forever, so
`usable()` says no there and the caller runs the function in line.
"""
from __future__ import annotations

import fcntl
import os
import pickle
import signal
import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def usable() -> bool:
    return (hasattr(os, "fork") and threading.active_count() == 1
            and (os.cpu_count() or 1) > 1)


class ChildLost(RuntimeError):
    """The child ended without a result (killed, or out of memory)."""


class Forked(Generic[T]):
    """fn() in a child; join() returns its value. fn must not raise: it returns what went
    wrong as part of its value (a traceback does not survive the pipe)."""

    def __init__(self, fn: Callable[[], T]):
        read, write = os.pipe()
        _widen(write)
        self.pid = os.fork()
        if self.pid == 0:
            os.close(read)
            _child(fn, write)   # never returns
        os.close(write)
        self._read = read

    def join(self) -> T:
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        # the result is read back while the child's exit tears its address space down
        # (1-3 ms at 10,000 nodes), and the child is reaped after
        try:
            value = pickle.loads(data) if data else None
        finally:
            _, status = os.waitpid(self.pid, 0)
        if not data:
            raise ChildLost(f"the checking process ended without a result "
                            f"(wait status {status})")
        return value

    def cancel(self) -> None:
        """Stop the child and reap it (the parent is leaving early: Ctrl-C)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self._read)


# A result the pipe holds whole is written at once and the child is gone before the parent
# reads. Through the default 64 KiB the child writes a chunk each time the parent reads one:
# a 10,000-node check's 1 MB came back in 19 ms of ping-pong instead of 3 (a child done
# before the parent joined, median of 15). Root may go past /proc/sys/fs/pipe-max-size
# (1 MiB, the limit for others); the pages are taken only as the child writes.
PIPE_SIZES = (16 << 20, 1 << 20)


def _widen(fd: int) -> None:
    for size in PIPE_SIZES:
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
            return
        except (OSError, AttributeError):   # above the limit, or not Linux: as it is
            continue


def _child(fn: Callable, write: int) -> None:
    code = 0
    try:
        data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
        os.close(write)   # the parent's read ends here, not after this process is torn down
    except BaseException:   # noqa: BLE001 - the parent reports ChildLost
        code = 1
    finally:
        os._exit(code)   # no atexit, no flush of the parent's copied buffers
