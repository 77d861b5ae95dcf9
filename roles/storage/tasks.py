"""NFS: exports on storage servers, systemd mount units on clients, from rendered files.

NFS needs the kernel's NFS server and client. Where the kernel has neither (these
machines: no nfsd, no nfs filesystem, no modules; containers share that kernel),
the role stops with Unsupported, which the provisioner and `estate verify` report
as "unsupported here". It never installs a userspace stand-in and calls it NFS.
"""
from __future__ import annotations

from typing import Callable

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.facts.server import Command
from pyinfra.operations import apt, systemd

from estate.provision.destinations import destination
from roles._lib import Unsupported, consumed, digest_of, install, run_when_changed

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


def _server() -> bool:
    return bool(consumed("storage/exports/*"))


@deploy("storage")
def storage() -> None:
    server = _server()
    problem = nfs_problem(lambda cmd: host.get_fact(Command, f"{cmd} || true"), server)
    if problem:
        raise Unsupported(problem)
    exports, mounts = consumed("storage/exports/*"), consumed("storage/mounts/*.mount")
    if not exports and not mounts:
        raise OperationError(f"{host.name}: has the storage role but no rendered exports "
                             "or mounts; re-render the spec")
    packages = (["nfs-kernel-server"] if exports else []) + (["nfs-common"] if mounts else [])
    apt.packages(name="Install NFS", packages=packages, update=True, cache_time=3600)
    for p in exports + mounts:
        install(p)
    if exports:
        systemd.service(name="Run the NFS server", service="nfs-server", running=True,
                        enabled=True)
        run_when_changed(name="Export", command="exportfs -ra",
                         stamp="/var/lib/estate/applied/exports", digest=digest_of(exports))
    if mounts:
        systemd.daemon_reload(name="Load the mount units")
        for p in mounts:
            unit = destination(p).rsplit("/", 1)[1]
            systemd.service(name=f"Mount {unit}", service=unit, running=True, enabled=True)
