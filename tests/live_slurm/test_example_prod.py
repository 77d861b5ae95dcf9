"""stacks/example-prod.yaml on a real Slurm 24.11 slurmctld (its slurm.version, from the
Debian 13 root): 128 8-GPU nodes in eight blocks (topology/block), HA controllers,
accounting, node sets, preemption tiers. One machine cannot run 128 slurmd's, so the lab
runs the primary controller with slurmdbd and MariaDB (and the login node as the client)
and no worker: what is proven is that slurmctld loads the rendered slurm.conf, gres.conf
and topology.conf, registers the accounts, and that `scontrol show node/partition/
topology` equal the spec (estate verify's comparison) for everything slurmctld knows
before a slurmd registers."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.model import model
from estate.verify import slurm_view
from tests.live_slurm.conftest import running_lab, unregistered

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).resolve().parents[2] / "stacks" / "example-prod.yaml"


@pytest.fixture(scope="module")
def lab():
    yield from running_lab(SPEC, controllers_only=True)


def test_slurmctld_24_11_loads_example_prod(lab):
    assert lab.slurm.version == "24.11"
    ctl = lab.slurm.controllers[0]
    assert lab.run(ctl, ["slurmctld", "-V"]).stdout.startswith("slurm-wlm 24.11.")
    assert lab.pids(ctl, "slurmctld")


def test_nodes_partitions_and_blocks_equal_the_spec(lab):
    view = lab.view()
    assert len(view.nodes) == 128 and set(view.nodes) == set(lab.workers())
    assert set(view.partitions) == {p.name for p in lab.slurm.partitions}
    assert set(view.blocks) == {b.name for b in lab.estate.spec.topology.blocks}
    left = [m for m in slurm_view.compare(lab.estate, view) if not unregistered(m)]
    assert left == []


def test_the_batch_partition_is_its_node_set(lab):
    batch = lab.view().partitions["batch"]
    assert slurm_view._names(batch["Nodes"]) == set(model(lab.estate).nodesets["h100-nodes"]
                                                     .members.hostlist())
