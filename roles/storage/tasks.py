"""NFS: exports on storage servers, systemd mount units on clients, from rendered files.

NFS needs the kernel's NFS server and client. Where the kernel has neither (these
machines: no nfsd, no nfs filesystem, no modules; containers share that kernel),
the role stops with Unsupported, which the provisioner and `estate verify` report
as "unsupported here". It never installs a userspace stand-in and calls it NFS.
"""
from __future__ import annotations

import shlex
from typing import Callable, Literal

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, deploy, operation
from pyinfra.operations import files, systemd

from estate.model.destinations import destination
from roles._lib.facts import FileText, ServiceActive
from roles._lib import probe, STAMPS, Unsupported, consumed, digest_of, install, install_packages, \
    render_dir

PROBE = ("if grep -qw {fs} /proc/filesystems || modprobe -n -q {fs} 2>/dev/null; "
         "then echo yes; fi")


def nfs_problem(run: Callable[[str], str], server: bool) -> str | None:
    """Why this node cannot do NFS (None if it can); run(cmd) returns a command's stdout.

    Shared by the role and its verify suite, so both say the same thing."""
    fs = "nfsd" if server else "nfs"
    if (run(PROBE.format(fs=fs)) or "").strip() == "yes":
        return None
    return (f"kernel {(run('uname -r') or '').strip()} has no "
            f"{'NFS server (nfsd)' if server else 'NFS client'} and cannot load one; "
            "NFS needs nodes with their own kernel (VMs or hardware), not containers")


@deploy("storage")
def storage(part: Literal["exports", "mounts", "all"] = "all") -> None:
    """`estate apply` runs this deploy in two phases (estate.catalogue.PHASE_ARGS): exports
    in the first and mounts in the second, so every server exports before any client
    mounts. Run once outside it (pyinfra CLI, molecule), it does both in order."""
    exports, mounts = consumed("storage/exports/*"), consumed("storage/mounts/*.mount")
    if not exports and not mounts:
        raise OperationError(f"{host.name}: has the storage role but no rendered exports "
                             "or mounts; re-render the spec")
    exports = [] if part == "mounts" else exports
    mounts = [] if part == "exports" else mounts
    if not exports and not mounts:
        return  # none of this node's storage is done in this phase
    problem = nfs_problem(probe, bool(exports))
    if problem:
        raise Unsupported(problem)
    extras = ("server",) * bool(exports) + ("client",) * bool(mounts)
    install_packages("storage", extras=extras)
    for path in export_dirs(exports):
        # before the exports file: nfs-server's start-up exportfs skips missing paths
        files.directory(name=f"Export directory {path}", path=path, present=True)
    installed = {p: install(p) for p in exports + mounts}
    if exports:
        systemd.service(name="Run the NFS server", service="nfs-server", running=True,
                        enabled=True)
        applied(name="Export", command="exportfs -ra", stamp=f"{STAMPS}/exports",
                paths=exports, installs=[installed[p] for p in exports])
    for p in mounts:
        unit = destination(p).rsplit("/", 1)[1]
        # restart: a changed unit (new server, options) only takes effect on remount
        applied(name=f"Mount {unit}", stamp=f"{STAMPS}/{unit}", paths=[p], unit=unit,
                installs=[installed[p]],
                command=f"systemctl daemon-reload && systemctl restart {shlex.quote(unit)}")
        systemd.service(name=f"Enable {unit}", service=unit, running=None, enabled=True)


def export_dirs(exports: list[str]) -> list[str]:
    """The exported paths: the first field of each line of the rendered exports files
    (byte-equal to the installed ones; exports(5) quotes paths with spaces)."""
    return [path for p in exports for path in exported_paths((render_dir() / p).read_text())]


def exported_paths(text: str) -> list[str]:
    return [shlex.split(line)[0] for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@operation(is_idempotent=True)
def applied(command: str, stamp: str, paths: list[str], installs: list, unit: str | None = None):
    """Run command once per digest of the rendered paths, like run_when_changed, and
    also when this run rewrote an installed copy (drift put back: the old content may
    still be in effect) or when `unit` is not active.

    installs are the install ops of the paths; estate apply runs operation bodies in
    order at execution time, so their outcome is known here.
    """
    digest = digest_of(paths)
    seen = host.get_fact(FileText, path=stamp)
    rewritten = any(op.did_change() if op.is_complete() else op.will_change for op in installs)
    inactive = unit and not host.get_fact(ServiceActive, unit=unit)
    if seen == digest and not rewritten and not inactive:
        host.noop(f"{command} already applied for {digest[:12]}")
        return
    check = f" && systemctl is-active --quiet {shlex.quote(unit)}" if unit else ""
    # the stamp goes first: if the command fails after a drifted file was put back,
    # the next run must still apply it
    yield StringCommand("sh", "-c", QuoteString(
        f"rm -f {shlex.quote(stamp)}; {command}{check} && mkdir -p {shlex.quote(STAMPS)} && "
        f"echo {shlex.quote(digest)} > {shlex.quote(stamp)}"))
