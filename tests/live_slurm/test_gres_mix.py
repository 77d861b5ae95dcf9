"""Node sets and GPU kinds on real Slurm (tests/live_slurm/gres_mix.yaml, no accounting), on
both releases Estate renders for (22.05 from the host, 24.11 from its Debian 13 root).

What is proven: slurmctld accepts NodeSet lines (a class's nodes written as a hostlist, a
feature) and partitions that name them, and `scontrol show partition` lists the node
sets' nodes; Slurm's view of nodes and partitions equals the spec's (estate verify's
comparison)."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.verify import slurm_view
from tests.live_slurm.conftest import RELEASES, running_lab, spec_on

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("gres_mix.yaml")


@pytest.fixture(scope="module", params=RELEASES)
def lab(request, tmp_path_factory):
    yield from running_lab(spec_on(SPEC, request.param,
                                   tmp_path_factory.mktemp(f"slurm-{request.param}")))


def test_slurm_view_matches_the_spec(lab):
    version = lab.run(lab.client(), ["srun", "--version"]).stdout
    assert version.startswith(f"slurm-wlm {lab.slurm.version}."), version
    view = lab.view()
    assert set(view.nodes) == set(lab.workers())
    assert slurm_view.compare(lab.estate, view) == []


def test_partitions_list_their_node_sets_nodes(lab):
    parts = lab.view().partitions
    assert slurm_view._names(parts["gpu"]["Nodes"]) == {"gpu1", "gpu2", "gpu3"}
    assert slurm_view._names(parts["mixed"]["Nodes"]) == {"gpu1", "gpu3"}


def test_a_job_in_a_node_set_partition_runs_on_its_nodes(lab):
    nodes = set(lab.srun("-p", "mixed", "-N2", "hostname").split())
    assert nodes == {"gpu1", "gpu3"}
