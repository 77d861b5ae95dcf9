"""Two leaf switches on real Slurm (tests/live_slurm/two_leaf.yaml, no accounting):
topology/tree places a --switches=1 job under one leaf, and only topology explains
where jobs land. The same cluster proves node settings: GPUs bound to their sockets and
shared as shards, a feature with a value as a constraint, CoreSpecCount/MemSpecLimit taken
out of what jobs get, and the site's node hooks: a prolog and an epilog that ran, a health
check that drained a node. On both releases Estate renders for: the host's 22.05, and 24.11
from its Debian 13 root (the same spec with slurm.version 24.11; see test_slurm_2411.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from estate.model import model
from tests.live_slurm.conftest import assert_view_matches, lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("two_leaf.yaml")
lab = lab_on_each_release(SPEC)


@pytest.fixture(scope="module")
def leaves(lab):
    return {name: set(hl) for name, hl in model(lab.estate).switch_nodes.items()}


def test_slurm_view_matches_the_spec(lab, leaves):
    view = assert_view_matches(lab, ["srun", "--version"])
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


def test_a_feature_with_a_value_is_a_constraint(lab):
    nodes = set(lab.srun("-N2", "--constraint=cpu_gen:zen3", "hostname").split())
    assert nodes == {"gpu3", "gpu4"}, nodes


def test_specialized_cores_and_memory_are_not_the_jobs(lab):
    # gpu-1x: 4 cores, 4096 MB; CoreSpecCount=1, MemSpecLimit=512 -> 3 CPUs, 3584 MB per GPU
    part = lab.view().partitions["l4"]
    assert "DefCpuPerGPU=3,DefMemPerGPU=3584" in part["JobDefaults"], part
    job = lab.sbatch("-p", "l4", "--gres=gpu:1", "--wrap", "sleep 30")
    assert lab.wait_jobs([job], "RUNNING", 30)[job].startswith("RUNNING")
    shown = lab.run(lab.client(), ["scontrol", "show", "job", job]).stdout
    assert "NumCPUs=3 " in shown and "TRES=cpu=3,mem=3.50G," in shown, shown
    lab.run(lab.client(), ["scancel", job])
    # all four cores are not there for jobs: the node offers 3
    out = lab.run(lab.client(), ["sbatch", "--parsable", "-p", "l4", "-N1", "-w", "gpu3", "-n", "4",
                           "--wrap", "true"], check=False)
    assert out.returncode != 0 and "not available" in out.stderr, (out.stdout, out.stderr)

def test_the_sites_prolog_and_epilog_ran(lab):
    job = lab.sbatch("-p", "l4", "-w", "gpu3", "-N1", "--wrap", "true")
    assert lab.wait_jobs([job], "COMPLETED", 30)[job].startswith("COMPLETED")
    marks = lab.host_path("gpu3", "/run/estate-hooks")
    deadline = time.monotonic() + 10     # the epilog runs after the job is reported done
    while not (marks / f"epilog-{job}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (marks / f"prolog-{job}").read_text().split() == [job, "root"]
    assert (marks / f"epilog-{job}").read_text().strip() == job


def test_the_sites_health_check_drains_a_node(lab):
    flag = lab.host_path("gpu4", "/run/estate-hooks/unhealthy")
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text("fake ECC errors")
    try:
        deadline, node = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            node = lab.view().nodes["gpu4"]
            if "DRAIN" in node.get("State", ""):
                break
            time.sleep(1)
        assert "DRAIN" in node["State"] and node["Reason"].startswith(
            "health check: fake ECC errors"), node
    finally:
        flag.unlink()
        lab.run(lab.client(), ["scontrol", "update", "NodeName=gpu4", "State=RESUME"],
                check=False)



def test_gpus_are_bound_to_their_sockets_and_shared_as_shards(lab):
    node = lab.view().nodes["gpu1"]
    assert node["Gres"] == "gpu:a100:2(S:0-1),shard:a100:8(S:0-1)", node
    # three jobs share one node's GPUs through shards, each seeing one GPU
    jobs = [lab.sbatch("-p", "gpu", "-w", "gpu1", "--gres=shard:2", "--wrap", "sleep 5")
            for _ in range(3)]
    states = lab.wait_jobs(jobs, "RUNNING", 20)
    assert all(s.startswith("RUNNING") for s in states.values()), states
    out = lab.srun("-p", "gpu", "-w", "gpu1", "--gres=shard:1", "sh", "-c",
                   "echo $CUDA_VISIBLE_DEVICES")
    assert out.strip() in ("0", "1"), out
    lab.run(lab.client(), ["scancel", *jobs], check=False)
