"""storage: NFS exports/mounts where the kernel has NFS; 'unsupported here' where not."""
from __future__ import annotations

import pytest

from roles.storage.tasks import PROBE

ROLE = "storage"


def test_kernel_nfs(host, node, ctx):
    server = "storage" in ctx.nodes[node].roles
    fs = "nfsd" if server else "nfs"
    if host.run(PROBE.format(fs=fs)).stdout.strip() != "yes":
        pytest.skip(f"unsupported here: kernel {host.run('uname -r').stdout.strip()} has no "
                    f"{'NFS server (nfsd)' if server else 'NFS client'}; NFS needs VMs or hardware")
    if server:
        assert host.service("nfs-server").is_running
        assert host.run("exportfs -v").rc == 0
    else:
        assert any(m for m in host.mount_point.get_mountpoints() if m.type.startswith("nfs"))
