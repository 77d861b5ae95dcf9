"""Two leaf switches on real Slurm (tests/live_slurm/two_leaf.yaml, no accounting):
topology/tree places a --switches=1 job under one leaf, and only topology explains
where jobs land. On both releases Estate renders for: the host's 22.05, and 24.11 from its
Debian 13 root (the same spec with slurm.version 24.11; see test_slurm_2411.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.model import model
from estate.verify import slurm_view
from tests.live_slurm.conftest import RELEASES, running_lab, spec_on

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("two_leaf.yaml")


@pytest.fixture(scope="module", params=RELEASES)
def lab(request, tmp_path_factory):
    yield from running_lab(spec_on(SPEC, request.param,
                                   tmp_path_factory.mktemp(f"slurm-{request.param}")))


@pytest.fixture(scope="module")
def leaves(lab):
    return {name: set(hl) for name, hl in model(lab.estate).switch_nodes.items()}


def test_slurm_view_matches_the_spec(lab, leaves):
    version = lab.run(lab.client(), ["srun", "--version"]).stdout
    assert version.startswith(f"slurm-wlm {lab.slurm.version}."), version
    view = lab.view()
    assert slurm_view.compare(lab.estate, view) == []
    assert {n for n in view.switches if view.switches[n].get("Level") == "0"} == set(leaves)


def test_switches_one_lands_under_one_leaf(lab, leaves):
    nodes = set(lab.srun("-N2", "--switches=1", "hostname").split())
    assert len(nodes) == 2 and any(nodes <= members for members in leaves.values()), nodes


def test_only_topology_keeps_a_job_from_spanning_leaves(lab, leaves):
    """With one node busy under each leaf, --switches=1 cannot start but the same job
    without it runs across both leaves."""
    busy = [sorted(members)[0] for members in leaves.values()]
    blockers = [lab.sbatch("-w", n, "--exclusive", "--wrap", "sleep 60") for n in busy]
    try:
        assert all(s.startswith("RUNNING") for s in
                   lab.wait_jobs(blockers, "RUNNING", timeout=15).values())
        held = lab.sbatch("-N2", "--switches=1@10:00", "--wrap", "true")
        state = lab.wait_jobs([held], "PENDING Resources", timeout=10)[held]
        assert state.startswith("PENDING Resources"), state
        lab.run(lab.client(), ["scancel", held])
        spread = set(lab.srun("-N2", "hostname").split())
        assert spread == set().union(*leaves.values()) - set(busy)
    finally:
        lab.run(lab.client(), ["scancel", *blockers])


def test_a_partition_restricted_to_one_class(lab):
    out = lab.srun("-p", "l4", "--gres=gpu:1", "sh", "-c",
                   'echo "$(hostname) $CUDA_VISIBLE_DEVICES"')
    host, devices = out.split()
    assert host in {"gpu3", "gpu4"} and devices == "0"
