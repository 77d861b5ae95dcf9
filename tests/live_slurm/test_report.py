"""`estate report`'s Slurm plane on real slurmdbd accounting (stacks/lab.yaml, both
releases): a 2-GPU job run as alice under research is charged 2 x its own ElapsedRaw,
and a period inside the job only the overlap (sacct's -S/-E window and the clipping)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from estate.operate.report.logic import SACCT_ENV, SACCT_TIME, UTC, slurm_gpu_hours
from tests.live_slurm.conftest import ROOT, lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = ROOT / "stacks/lab.yaml"
lab = lab_on_each_release(SPEC)


def accounted(lab, job: str, timeout: float = 30) -> list[str]:
    """ElapsedRaw, State, Start, End (UTC) of the job once slurmdbd has its end."""
    argv = [*SACCT_ENV, "sacct", "-n", "-P", "-X", "-j", job, "-o",
            "ElapsedRaw,State,Start,End"]
    deadline = time.monotonic() + timeout
    while True:
        fields = lab.run(lab.client(), argv).stdout.strip().split("|")
        if fields[-1:] != ["Unknown"] and len(fields) == 4 or time.monotonic() > deadline:
            return fields
        time.sleep(0.5)


@pytest.fixture(scope="module")
def gpu_job(lab):
    """(job id, ElapsedRaw, Start, before, after) of `srun -A research --gres=gpu:2`."""
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    proc = lab.as_user("alice", ["srun", "--chdir=/tmp", "-A", "research", "--gres=gpu:2",
                                 "-t", "2", "sh", "-c", 'echo "$SLURM_JOB_ID"; sleep 3'])
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.split()[0]
    elapsed, state, start, end = accounted(lab, job)
    assert state == "COMPLETED" and end != "Unknown", (state, end)
    after = datetime.now(UTC) + timedelta(seconds=1)
    return job, int(elapsed), datetime.strptime(start, SACCT_TIME).replace(tzinfo=UTC), \
        before, after


def run_on(lab):
    return lambda argv: lab.run(lab.client(), argv).stdout


def gpu_hours(lab, start, end, timeout: float = 15) -> dict:
    """slurm_gpu_hours once slurmdbd answers the window: it records a job's end a moment
    after `sacct -j` shows it (measured on 22.05: a window query right after the job found
    nothing, one second later the job)."""
    deadline = time.monotonic() + timeout
    while not (hours := slurm_gpu_hours(run_on(lab), start, end)) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    return hours


def test_the_job_is_charged_its_gpus_times_its_elapsed_time(lab, gpu_job):
    job, elapsed, _, before, after = gpu_job
    assert elapsed >= 3, f"job {job} ran {elapsed} s, not the 3 s it slept"
    hours = gpu_hours(lab, before, after)
    assert hours == {"research": pytest.approx(2 * elapsed / 3600)}


def test_a_period_inside_the_job_counts_its_overlap_only(lab, gpu_job):
    _, _, start, _, _ = gpu_job
    hours = gpu_hours(lab, start + timedelta(seconds=1), start + timedelta(seconds=2))
    assert hours == {"research": pytest.approx(2 * 1 / 3600)}
