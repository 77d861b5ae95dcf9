"""What the three labs share, and the one interface `estate lab` drives them through.

Backends, each a module of this package:

- ``netns``: real slurmctld/slurmd/munged on this host, one network namespace per node;
- ``vagrant``: systemd containers through Vagrant's docker provider, provisioned by the roles;
- ``vm``: QEMU VMs (Debian's kernel, for kernel NFS), provisioned by the roles.

Every backend answers ``down(log) -> leftovers`` and ``leftovers() -> {kind: [names]}``
(what of it is still on the host: empty lists when it is gone), so that `estate lab down
--all` and `estate lab status` treat them alike (``DRIVERS``). The helpers below are the
pieces each used to carry its own copy of: running a host command, the lab's ssh key,
waiting for sshd, and the one-lab-at-a-time lock.
"""
from __future__ import annotations

import fcntl
import importlib
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Protocol


class LabError(RuntimeError):
    """A lab could not be brought up or down; the message says where and what to do."""


class Driver(Protocol):
    def down(self, log=print) -> dict[str, list[str]]: ...

    def leftovers(self) -> dict[str, list[str]]: ...


# name -> module; `estate lab down --all` takes them down in this order
DRIVERS = {"vagrant": "estate.lab.vagrant", "netns": "estate.lab.netns", "vm": "estate.lab.vm"}


def driver(name: str) -> Driver:
    return importlib.import_module(DRIVERS[name])


def run(cmd: list[str], *, check: bool = True, timeout: float = 900, env: dict | None = None,
        error: type[Exception] = LabError, tail: int = 25) -> subprocess.CompletedProcess:
    """A host command (an argument list, never a shell string), output captured; on failure
    `error` with the command and the last lines it printed."""
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, text=True, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and proc.returncode != 0:
        last = "\n".join(proc.stdout.splitlines()[-tail:])
        raise error(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{last}")
    return proc


def ensure_ssh_key(path: Path, comment: str, error: type[Exception] = LabError) -> Path:
    """The lab's ed25519 key (made once, in a 0700 directory)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            error=error)
    return path


def wait_for_ssh(machines: list[tuple[str, str]], timeout: float, *,
                 why: Callable[[str], str] = lambda name: "",
                 gone: Callable[[str], bool] = lambda name: False,
                 error: type[Exception] = LabError, poll: float = 0.5, port: int = 22) -> None:
    """Each (name, address)'s sshd answering (where pyinfra connects). `gone` says a
    machine died (stop waiting); `why` adds where to look."""
    deadline = time.monotonic() + timeout
    for name, addr in machines:
        while not _ssh_banner(addr, port):
            if gone(name):
                raise error(f"{name}: exited while booting\n{why(name)}".rstrip())
            if time.monotonic() > deadline:
                raise error(f"{name}: no ssh on {addr}:{port} after {timeout:.0f} s "
                            f"{why(name)}".rstrip())
            time.sleep(poll)


def _ssh_banner(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=3) as s:
            s.settimeout(10)
            return s.recv(4).startswith(b"SSH")
    except OSError:
        return False


def hold(path: Path, what: str, error: type[Exception] = LabError) -> int:
    """One run of a lab at a time (its names are fixed): an exclusive flock on `path`, held
    by the returned fd until it is closed or the process ends. The holder's pid is kept in
    the file for the message a second run gets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.read(fd, 32).decode().strip() or "?"
        os.close(fd)
        raise error(f"another {what} (pid {owner}) holds {path}: its machines and networks "
                    "have the same names; wait for it to finish") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
