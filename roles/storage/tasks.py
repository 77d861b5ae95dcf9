"""NFS: exports on storage servers, mounts on clients, from rendered storage artifacts.

NFS needs the kernel's NFS server and client. Where the kernel has neither (these
machines: no nfsd, no nfs filesystem, no modules; containers share that kernel),
the role stops with Unsupported, which the provisioner and `estate verify` report
as "unsupported here". It never installs a userspace stand-in and calls it NFS.
"""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.facts.server import Command
from pyinfra.operations import apt, systemd

from roles._lib import Unsupported, consumed, digest_of, install, run_when_changed

PROBE = ("if grep -qw {fs} /proc/filesystems || modprobe -n -q {fs} 2>/dev/null; "
         "then echo yes; fi")


def kernel_has(fs: str) -> bool:
    return (host.get_fact(Command, PROBE.format(fs=fs)) or "").strip() == "yes"


@deploy("storage")
def storage() -> None:
    server_role = "storage" in (host.data.get("estate_roles") or [])
    fs = "nfsd" if server_role else "nfs"
    if not kernel_has(fs):
        raise Unsupported(
            f"this kernel ({host.get_fact(Command, 'uname -r').strip()}) has no "
            f"{'NFS server (nfsd)' if server_role else 'NFS client'} and cannot load one; "
            "NFS needs nodes with their own kernel (VMs or hardware), not containers")
    paths = consumed("storage/*")
    if not paths:
        raise OperationError(f"{host.name}: no rendered storage artifacts for this node "
                             "(estate.render.storage renders exports and mounts)")
    apt.packages(name="Install NFS", packages=["nfs-kernel-server" if server_role
                                               else "nfs-common"], update=True, cache_time=3600)
    for p in paths:
        install(p)
    if server_role:
        systemd.service(name="Run the NFS server", service="nfs-server", running=True,
                        enabled=True)
        run_when_changed(name="Export", command="exportfs -ra",
                         stamp="/var/lib/estate/applied/exports", digest=digest_of(paths))
    else:
        run_when_changed(name="Mount", command="mount -a -t nfs,nfs4",
                         stamp="/var/lib/estate/applied/mounts", digest=digest_of(paths))
