"""`estate handoff` on real slurmctld and slurmd (tests/live_slurm/handoff.yaml), on both
releases Estate renders for (22.05 from the host, 24.11 from its Debian 13 root).

What is proven, in order on one lab (each test needs the one before it):
- a handoff that meets a running job drains the node, waits, and at a short deadline with
  the policy `stop` changes nothing else and says so (re-runnable: the next run goes on);
- run again while the job still runs, it waits; a job asking for the node meanwhile does
  not land there; the running job completes; the node leaves the partition, slurmctld no
  longer lists it, and Slurm's view equals the spec with its overlay; the Kubernetes half
  is reported as skipped (no cluster here) with the commands it would run;
- `estate plan`'s budget before and after shows the node's GPUs moving from the Slurm
  plane (and the partition) to the Kubernetes plane (the tenant's quota, the a100 flavor);
- a handoff back returns the node to the partition and to IDLE, the overlay file is gone
  and the budget is the original one; run once more, every step finds nothing to do.

The Slurm side runs through estate.operate.handoff.live.NetnsSlurm: the same commands the
production runner sends over ssh, in the lab controller's namespace.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from estate.cli import app
from estate.operate.handoff.logic import Options, handoff
from estate.operate.handoff.live import Kubectl, NetnsSlurm
from estate.spec.handoff_overlay import path_for
from estate.verify import slurm_view
from tests.live_slurm.conftest import lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("handoff.yaml")
lab = lab_on_each_release(SPEC)
NODE = "gpu2"


@pytest.fixture(scope="module")
def sides(lab, monkeypatch_module):
    monkeypatch_module.delenv("ESTATE_KUBECONFIG", raising=False)
    return NetnsSlurm(lab), Kubectl([], "k8s1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def state():
    return {}


def planes(spec: Path) -> dict:
    """What `estate plan SPEC --output json` says of the planes, the partition, the tenant."""
    out = CliRunner().invoke(app, ["plan", str(spec), "--output", "json"])
    assert out.exit_code == 0, out.output
    b = json.loads(out.output)
    return {"planes": b["planes"], "gpu": b["partitions"].get("gpu", {}).get("gpus", 0),
            "serve": b["tenants"]["serve"]["gpus"]}


def statuses(result) -> dict[str, str]:
    for s in result.steps:     # shown with -s: what each step did on this release
        print(f"  {result.to:<10} {s.name:<12} {s.status:<8} {s.detail[:300]}")
    return {s.name: s.status for s in result.steps}


def test_a_deadline_with_stop_leaves_the_node_drained_and_nothing_else(lab, sides, state):
    spec = lab.spec_path
    state["before"] = planes(spec)
    assert state["before"] == {"planes": {"slurm": 4, "kubernetes": 0}, "gpu": 4, "serve": 0}
    job = lab.sbatch("-w", NODE, "--gres=gpu:1", "--wrap", "sleep 10")
    assert lab.wait_jobs([job], "RUNNING", 20)[job].startswith("RUNNING")
    state["job"] = job
    result = handoff(spec, [NODE], "kubernetes", *sides,
                     Options(deadline_s=1, at_deadline="stop", tenant="serve", poll_s=0.5))
    assert not result.ok and statuses(result)["wait"] == "waiting", result.as_dict()
    node = lab.view().nodes[NODE]
    assert "DRAIN" in node["State"] and node["Reason"].startswith("estate handoff"), node
    assert not path_for(spec).exists()                       # the spec is unchanged
    assert lab.job_states([job])[job].startswith("RUNNING")  # and the job untouched


def test_run_again_it_waits_for_the_job_and_no_new_job_lands(lab, sides, state):
    spec, job = lab.spec_path, state["job"]
    done: dict = {}
    t0 = time.monotonic()
    worker = threading.Thread(target=lambda: done.setdefault("r", handoff(
        spec, [NODE], "kubernetes", *sides, Options(tenant="serve", poll_s=0.5))))
    worker.start()
    try:
        newcomer = lab.sbatch("-w", NODE, "--wrap", "true")
        time.sleep(2)
        states = lab.job_states([job, newcomer])
        assert worker.is_alive(), "the handoff did not wait for the running job"
        assert states[job].startswith("RUNNING"), states
        assert states[newcomer].startswith("PENDING"), states      # drained: it cannot land
        lab.run(lab.client(), ["scancel", newcomer])
    finally:
        worker.join(timeout=90)
    result = done["r"]
    assert result.ok, result.as_dict()
    assert time.monotonic() - t0 >= 3     # it waited for the job's end
    st = statuses(result)
    assert st["drain"] == "already" and st["wait"] == "done" and st["overlay"] == "done"
    assert st["controllers"] == "done" and st["kubernetes"] == "skipped"
    skipped = next(s for s in result.steps if s.name == "kubernetes").detail
    assert "ESTATE_KUBECONFIG" in skipped and f"kubectl uncordon {NODE}" in skipped
    assert f"kubectl taint --overwrite node {NODE}" in skipped, skipped
    finished = lab.job_states([job])
    assert finished[job].startswith("COMPLETED"), finished
    state["after"] = planes(spec)


def test_the_node_left_the_partition_and_slurm(lab):
    view = lab.view()
    assert slurm_view._names(view.partitions["gpu"]["Nodes"]) == {"gpu1"}
    assert NODE not in view.nodes
    assert lab.mismatches() == []     # Slurm's view equals the spec with its overlay
    assert lab.srun("-p", "gpu", "-N1", "hostname").strip() == "gpu1"


def test_the_plan_shows_the_gpus_moving_between_planes(state):
    assert state["after"] == {"planes": {"slurm": 2, "kubernetes": 2}, "gpu": 2, "serve": 2}


def test_a_handoff_back_returns_the_node_to_idle(lab, state):
    """Through the command line this time: `estate handoff SPEC gpu2 --to slurm --netns`."""
    spec = lab.spec_path
    out = CliRunner().invoke(app, ["handoff", str(spec), NODE, "--to", "slurm", "--netns",
                                   "--output", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    for s in doc["steps"]:
        print(f"  slurm      {s['step']:<12} {s['status']:<8} {s['detail'][:300]}")
    assert [s["status"] for s in doc["steps"]][-3:] == ["done", "done", "done"], doc
    assert doc["gpus"]["after"]["planes"] == state["before"]["planes"]
    assert not path_for(spec).exists()          # the spec file alone holds again
    lab.load()                                  # the fixture's lab reads the spec again
    node = lab.view().nodes[NODE]
    assert node["State"] == "IDLE", node
    assert slurm_view._names(lab.view().partitions["gpu"]["Nodes"]) == {"gpu1", NODE}
    assert lab.mismatches() == []
    assert planes(spec) == state["before"]
    out = lab.srun("-w", NODE, "--gres=gpu:2", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"')
    assert out.strip() == "0,1"


def test_run_once_more_every_step_finds_nothing_to_do(lab, sides):
    result = handoff(lab.spec_path, [NODE], "slurm", *sides, Options(poll_s=0.5))
    assert result.ok, result.as_dict()
    details = {s.name: s.detail for s in result.steps}
    assert statuses(result)["overlay"] == "already"
    assert "nothing restarted" in details["controllers"], details
    assert details["slurmd"] == f"{NODE}: slurmd running", details
    assert lab.view().nodes[NODE]["State"] == "IDLE"
