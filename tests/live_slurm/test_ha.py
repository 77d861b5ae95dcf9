"""Two controllers on one StateSaveLocation (tests/live_slurm/ha.yaml) on real Slurm: the
primary is killed while a job runs and another waits; the backup takes over after
SlurmctldTimeout with both jobs, schedules new work, and hands control back when the
primary returns.

The controllers share the state through one directory of this host, bound at the mount
point in each controller's namespace: the lab's stand-in for the NFS export the spec
declares (the VM tier mounts real NFS; kernel NFS does not run in namespaces here)."""
from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from estate.model.slurm import state_mount
from estate.verify import slurm_view
from tests.live_slurm.conftest import SAVE_MAX_WAIT, running_lab

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("ha.yaml")


@pytest.fixture(scope="module")
def lab():
    yield from running_lab(SPEC)


def ping(lab) -> dict[str, str]:
    """Controller -> UP/DOWN as `scontrol ping` reports them
    ("Slurmctld(primary) at ctl1 is UP")."""
    out = lab.run(lab.client(), ["scontrol", "ping"], check=False).stdout
    found = (re.search(r" at (\S+) is (\S+)", line) for line in out.splitlines())
    return {m.group(1): m.group(2) for m in found if m}


def backup_log(lab) -> str:
    """The end of ctl2's slurmctld log: why a backup did not answer."""
    path = lab.host_path("ctl2", "/var/log/slurm/slurmctld.log")
    return "".join(path.read_text().splitlines(True)[-30:]) if path.exists() else "(none)"


def until(what, timeout: float):
    end = time.monotonic() + timeout
    while not (result := what()) and time.monotonic() < end:
        time.sleep(1)
    return result


def test_both_controllers_see_one_state_and_slurm_matches_the_spec(lab):
    assert state_mount(lab.estate).export == "slurm-state"
    shared = [lab.host_path(c, lab.daemon_path("StateSaveLocation")) for c in ("ctl1", "ctl2")]
    assert shared[0] == shared[1]
    # the backup answers once it has started in standby (seconds; longer on a loaded host)
    assert until(lambda: ping(lab) == {"ctl1": "UP", "ctl2": "UP"}, 30), \
        f"{ping(lab)}; ctl2's slurmctld log:\n{backup_log(lab)}"
    assert slurm_view.compare(lab.estate, lab.view()) == []


def test_the_backup_takes_over_with_the_primarys_jobs(lab):
    running = lab.sbatch("-w", "gpu1", "--gres=gpu:2", "--wrap", "sleep 300")
    waiting = lab.sbatch("-w", "gpu1", "--gres=gpu:1", "--wrap", "sleep 1")
    try:
        # running, and past its prolog (PrologFlags=Alloc: the reason reads Prolog until the
        # allocation's prolog ends, seconds on a loaded host)
        before = lab.wait_jobs([running], "RUNNING None", timeout=30)
        assert before[running] == "RUNNING None gpu1", before
        time.sleep(SAVE_MAX_WAIT + 1)
        lab.stop("ctl1", "slurmctld", signal.SIGKILL)
        # the backup answers once SlurmctldTimeout (10 s) has passed without the primary
        assert until(lambda: ping(lab).get("ctl2") == "UP" and ping(lab).get("ctl1") ==
                     "DOWN" and lab.run(lab.client(), ["squeue"], check=False).returncode == 0,
                     60), f"{ping(lab)}; ctl2's slurmctld log:\n{backup_log(lab)}"
        after = lab.job_states([running, waiting])
        assert after[running] == before[running], after
        assert after[waiting].startswith("PENDING"), after
        # the backup schedules: new work runs on the other worker
        new = lab.sbatch("-w", "gpu2", "--gres=gpu:1", "--wrap", "true")
        done = lab.wait_jobs([new], "COMPLETED", timeout=60)
        assert done[new].startswith("COMPLETED"), (done, lab.tail("ctl2", "slurmctld"))
        assert not lab.pids("ctl1", "slurmctld")      # no one else could have run it
    finally:
        if not lab.pids("ctl1", "slurmctld"):
            lab.start_slurmctld("ctl1")
        lab.run(lab.client(), ["scancel", running, waiting], check=False)


def test_the_primary_takes_control_back(lab):
    assert until(lambda: ping(lab) == {"ctl1": "UP", "ctl2": "UP"}, 60), ping(lab)
    job = lab.sbatch("-w", "gpu1", "--gres=gpu:1", "--wrap", "true")
    done = lab.wait_jobs([job], "COMPLETED", timeout=60)
    assert done[job].startswith("COMPLETED"), (done, lab.tail("ctl1", "slurmctld"))
