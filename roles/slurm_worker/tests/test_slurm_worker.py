"""slurm_worker: slurmd up, configless config fetched from slurmctld, GPU device files.

Checks that apply to only some workers are collected only for them (estate.verify's
on_nodes), so a worker never reports a check as passed that did not run there."""
from __future__ import annotations

import hashlib
import shlex

from estate.verify.plugin import on_nodes

ROLE = "slurm_worker"


def test_slurmd_running_and_enabled(host, node):
    svc = host.service("slurmd")
    assert svc.is_running and svc.is_enabled


@on_nodes(lambda ctx: [n for n in ctx.with_deploy(ROLE) if n in ctx.gpu_nodes()])
def test_gpu_device_files(host, node, ctx):
    devices = ctx.gpu_devices(node)
    assert devices, f"{node} consumes a GPU device list with no devices"
    for d in devices:
        out = host.run(f"stat -c '%F %t:%T' -- {shlex.quote(d['path'])}").stdout.strip()
        assert out == f"character special file {d['major']:x}:{d['minor']:x}", out


def _configless(ctx) -> list[str]:
    """Workers that read slurm.conf from slurmctld, not from an installed copy."""
    return [n for n in ctx.with_deploy(ROLE) if "slurm/slurm.conf" not in ctx.nodes[n].consumes]


@on_nodes(_configless)
def test_configless_config_is_the_rendered_one(host, node, ctx):
    """The slurm.conf slurmd fetched from slurmctld is the one the estate rendered."""
    want = hashlib.sha256(ctx.rendered("slurm/slurm.conf")).hexdigest()
    out = host.run("sha256sum /var/spool/slurmd/conf-cache/slurm.conf")
    assert out.rc == 0, "slurmd has no configless cache: did it reach slurmctld?"
    assert out.stdout.split()[0] == want, "slurmd runs on a slurm.conf other than the rendered one"
