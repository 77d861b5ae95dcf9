"""Slurm 24.11 live: tests/live_slurm/two_block.yaml (slurm.version 24.11, two blocks of
two GPU nodes, no accounting) on the real 24.11 daemons of Debian 13.

This host is Debian 12 (Slurm 22.05), so the lab runs every node from a debootstrapped
trixie root (scripts/slurm-root.sh, cached under build/slurm-root/, 2-4 minutes cold):
each node's mount namespace binds /proc, /sys, /dev and its private paths into the root
and chroots there (estate/lab/netns.py). Why a chroot and not containers or VMs: the
namespace lab's whole design (a network namespace per node, one munged, per-node bind
mounts, daemons found by their namespace) carries over unchanged, only the Slurm binaries
and libraries differ, nothing is needed that the host lacks (no image registry, no
dockerd), and a cold root costs minutes, built once, where a VM image costs more and every
boot under TCG more again. The other modules here (test_lab_cluster.py with accounting,
test_topology.py) run on both releases, 22.05 from the host's own packages.

What is proven: slurmctld and slurmd 24.11 accept the rendered files (TopologyPlugin=
topology/block and topology.conf's BlockName lines among them), Slurm's view of nodes,
partitions and blocks equals the spec, a GPU job gets its GPUs, and a --segment job stays
inside one block of the spec as `scontrol show topology` reports it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.model.slurm import block_topology
from estate.verify import slurm_view
from tests.live_slurm.conftest import running_lab

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("two_block.yaml")


@pytest.fixture(scope="module")
def lab():
    yield from running_lab(SPEC)


@pytest.fixture(scope="module")
def blocks(lab):
    """Block name -> its nodes, as the running slurmctld reports them."""
    view = lab.view()
    return {name: slurm_view._names(rec["Nodes"]) for name, rec in view.blocks.items()}


def test_every_node_runs_slurm_24_11_from_the_root(lab):
    assert lab.root != "/" and block_topology(lab.estate)
    assert lab.run(lab.client(), ["srun", "--version"]).stdout.startswith("slurm-wlm 24.11.")
    ctl = lab.slurm.controllers[0]
    assert lab.run(ctl, ["slurmctld", "-V"]).stdout.startswith("slurm-wlm 24.11.")
    for name in lab.workers():
        assert lab.pids(name, "slurmd"), f"slurmd is not running on {name}"


def test_slurm_view_matches_the_spec(lab, blocks):
    view = lab.view()
    assert set(view.nodes) == set(lab.workers())
    assert set(view.partitions) == {p.name for p in lab.slurm.partitions}
    assert slurm_view.compare(lab.estate, view) == []
    assert blocks == {"b1": {"gpu1", "gpu2"}, "b2": {"gpu3", "gpu4"}}


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_job_sees_exactly_the_gpus_it_asked_for(lab, gpus):
    out = lab.srun("-w", "gpu1", f"--gres=gpu:{gpus}", "sh", "-c",
                   'echo "$(hostname) $CUDA_VISIBLE_DEVICES"')
    host, devices = out.split()
    assert host == "gpu1" and len(set(devices.split(","))) == gpus, out


def test_a_segment_lands_inside_one_block(lab, blocks):
    nodes = set(lab.srun("-N2", "--segment=2", "hostname").split())
    assert len(nodes) == 2 and any(nodes <= members for members in blocks.values()), nodes


def test_a_segment_goes_to_the_block_that_has_room(lab, blocks):
    """One node of b1 busy: a 2-node segment takes both nodes of b2. One node of each block
    busy: no 2-node job fits in one block, so --segment=2 cannot start, and neither can a
    plain -N2 (topology/block keeps a job of the base size in one block, measured on
    24.11.5), while --segment=1 lets the job span both blocks."""
    b1, b2 = sorted(blocks["b1"]), sorted(blocks["b2"])
    blockers = [lab.sbatch("-w", b1[0], "--exclusive", "--wrap", "sleep 60")]
    try:
        assert lab.wait_jobs(blockers, "RUNNING", timeout=15)[blockers[0]].startswith("RUNNING")
        assert set(lab.srun("-N2", "--segment=2", "hostname").split()) == set(b2)
        blockers.append(lab.sbatch("-w", b2[0], "--exclusive", "--wrap", "sleep 60"))
        assert lab.wait_jobs(blockers, "RUNNING", timeout=15)[blockers[1]].startswith("RUNNING")
        for args in (["--segment=2"], []):
            proc = lab.run(lab.client(), ["srun", "--immediate=3", "-N2", *args, "hostname"],
                           check=False)
            assert proc.returncode != 0 and "busy" in proc.stderr, (args, proc.stderr)
        spread = set(lab.srun("-N2", "--segment=1", "hostname").split())
        assert spread == {b1[1], b2[1]}
    finally:
        lab.run(lab.client(), ["scancel", *blockers])


def test_a_segment_larger_than_the_base_block_is_refused(lab):
    proc = lab.run(lab.client(), ["srun", "-N2", "--segment=3", "true"], check=False)
    assert proc.returncode != 0
    assert "topology configuration is not available" in proc.stderr
