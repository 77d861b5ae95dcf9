"""Node sets and GPU kinds on real Slurm (tests/live_slurm/gres_mix.yaml, no accounting), on
both releases Estate renders for (22.05 from the host, 24.11 from its Debian 13 root).

What is proven: slurmctld accepts NodeSet lines (a class's nodes written as a hostlist, a
feature) and partitions that name them, and `scontrol show partition` lists the node
sets' nodes; slurmd accepts a node of two GPU types (Gres=gpu:a100:2,gpu:t4:2, gres.conf
per type and socket) and a job asking for one type gets a device of that type; Slurm's
view of nodes and partitions equals the spec's (estate verify's comparison)."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.verify import slurm_view
from tests.live_slurm.conftest import assert_view_matches, lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("gres_mix.yaml")
lab = lab_on_each_release(SPEC)


def test_slurm_view_matches_the_spec(lab):
    assert_view_matches(lab, ["srun", "--version"])


def test_partitions_list_their_node_sets_nodes(lab):
    parts = lab.view().partitions
    assert slurm_view._names(parts["gpu"]["Nodes"]) == {"gpu1", "gpu2", "gpu3"}
    assert slurm_view._names(parts["mixed"]["Nodes"]) == {"gpu1", "gpu3"}


def test_a_job_in_a_node_set_partition_runs_on_its_nodes(lab):
    nodes = set(lab.srun("-p", "mixed", "-N2", "hostname").split())
    assert nodes == {"gpu1", "gpu3"}


def test_a_node_of_two_gpu_types_shows_both(lab):
    gres = lab.view().nodes["gpu1"]["Gres"]
    assert gres == "gpu:a100:2(S:0-1),gpu:t4:2(S:0-1)", gres


@pytest.mark.parametrize("kind,devices", [("a100", {"0", "1"}), ("t4", {"2", "3"})])
def test_a_job_asking_for_a_type_gets_a_device_of_that_type(lab, kind, devices):
    """gres.conf gives the a100s /dev/nvidia[0-1] and the t4s /dev/nvidia[2-3]: the device
    Slurm hands out (SLURM_STEP_GPUS: its index) says which type the job got."""
    out = lab.srun("-w", "gpu1", f"--gres=gpu:{kind}:1", "sh", "-c", 'echo "$SLURM_STEP_GPUS"')
    assert out.strip() in devices, out
    both = lab.srun("-w", "gpu1", f"--gres=gpu:{kind}:2", "sh", "-c", 'echo "$SLURM_STEP_GPUS"')
    assert set(both.strip().split(",")) == devices, both
