"""Power-managed nodes on real Slurm (tests/live_slurm/power.yaml): gpu1 is always on,
gpu[2-3] are cloud nodes slurmctld powers up on demand with the site's resume program and
down again with its suspend program, gpu4 is a future node. The programs record what
slurmctld asks; the test plays the machine room and starts (or stops) the slurmd."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from estate.verify import slurm_view
from tests.live_slurm.conftest import running_lab

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("power.yaml")


@pytest.fixture(scope="module")
def lab():
    yield from running_lab(SPEC)


def asked(lab, program: str) -> str:
    log = lab.host_path("ctl1", f"/var/log/slurm/power-{program}.log")
    return log.read_text() if log.exists() else ""


def until(what, timeout: float):
    end = time.monotonic() + timeout
    while not (result := what()) and time.monotonic() < end:
        time.sleep(0.5)
    return result


def test_cloud_nodes_start_powered_down_and_future_nodes_wait(lab):
    nodes = lab.view().nodes
    assert nodes["gpu1"]["State"] == "IDLE"
    assert {nodes[n]["State"] for n in ("gpu2", "gpu3")} == {"IDLE+CLOUD+POWERED_DOWN"}
    assert nodes["gpu4"]["State"] == "FUTURE"
    assert slurm_view.compare(lab.estate, lab.view()) == []
    assert asked(lab, "resume") == ""


def test_a_job_on_a_cloud_node_powers_it_up_through_the_resume_program(lab):
    job = lab.sbatch("-w", "gpu2", "--gres=gpu:1", "--wrap", "true")
    assert until(lambda: "gpu2" in asked(lab, "resume"), 30), lab.tail("ctl1", "slurmctld")
    assert lab.job_states([job])[job].startswith(("CONFIGURING", "PENDING")), \
        lab.job_states([job])
    # the machine room: the node boots (its boot time must follow the resume request, as
    # slurmctld checks: the lab waits a moment, as a real boot would take minutes)
    time.sleep(2)
    lab.start_slurmd("gpu2", booted=True)
    done = lab.wait_jobs([job], "COMPLETED", timeout=60)
    assert done[job].startswith("COMPLETED"), (done, lab.tail("ctl1", "slurmctld", 80),
                                                lab.tail("gpu2", "slurmd", 40))
    assert asked(lab, "resume").split() == ["gpu2"]


def test_an_idle_cloud_node_is_powered_down_through_the_suspend_program(lab):
    # SuspendTime is 5 s; slurmctld's power thread looks about every 10 s
    assert until(lambda: "gpu2" in asked(lab, "suspend"), 60), lab.tail("ctl1", "slurmctld")
    assert "gpu1" not in asked(lab, "suspend")      # SuspendExcNodes keeps it on
    lab.stop("gpu2", "slurmd")
    state = until(lambda: "POWERED_DOWN" in lab.view().nodes["gpu2"]["State"] and
                  lab.view().nodes["gpu2"]["State"], 60)
    assert state and "CLOUD" in state, lab.view().nodes["gpu2"]


def test_a_future_node_is_brought_into_service_by_hand(lab):
    lab.run(lab.client(), ["scontrol", "update", "NodeName=gpu4", "State=RESUME"])
    lab.start_slurmd("gpu4", booted=True)
    state = until(lambda: slurm_view.usable(lab.view().nodes["gpu4"]["State"]) and
                  lab.view().nodes["gpu4"]["State"], 30)
    assert state, lab.view().nodes["gpu4"]
    # the spec still says future: verify names the difference
    assert [(m.subject, m.field) for m in slurm_view.compare(lab.estate, lab.view())] == \
        [("node gpu4", "State"), ("node gpu4", "sinfo partition")]
