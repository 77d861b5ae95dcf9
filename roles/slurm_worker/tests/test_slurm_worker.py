"""slurm_worker: slurmd up, configless config fetched from slurmctld, GPU device files."""
from __future__ import annotations

import hashlib

ROLE = "slurm_worker"


def test_slurmd_running_and_enabled(host, node):
    svc = host.service("slurmd")
    assert svc.is_running and svc.is_enabled


def test_gpu_device_files(host, node, ctx):
    for path in ctx.nodes[node].consumes:
        if not path.startswith("slurm/gpu-devices/"):
            continue
        for d in ctx.rendered_json(path)["devices"]:
            out = host.run(f"stat -c '%F %t:%T' {d['path']}").stdout.strip()
            assert out == f"character special file {d['major']:x}:{d['minor']:x}", out


def test_configless_config_is_the_rendered_one(host, node, ctx):
    """The slurm.conf slurmd fetched from slurmctld is the one the estate rendered."""
    if "slurm/slurm.conf" in ctx.nodes[node].consumes:
        return  # this node reads its own copy (checked with the installed files)
    want = hashlib.sha256(ctx.rendered("slurm/slurm.conf")).hexdigest()
    out = host.run("sha256sum /var/spool/slurmd/conf-cache/slurm.conf")
    assert out.rc == 0, "slurmd has no configless cache: did it reach slurmctld?"
    assert out.stdout.split()[0] == want, "slurmd runs on a slurm.conf other than the rendered one"
