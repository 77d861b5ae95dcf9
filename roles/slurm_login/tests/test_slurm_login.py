"""slurm_login: clients installed and talking to slurmctld (munge across nodes)."""
from __future__ import annotations

ROLE = "slurm_login"


def test_clients_reach_the_controller(host, node):
    assert host.package("slurm-client").is_installed
    out = host.run("sinfo -h -o %P")
    assert out.rc == 0, f"sinfo from {node} failed: {out.stderr.strip()}"
