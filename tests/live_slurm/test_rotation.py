"""`estate rotate` on real Slurm daemons (the namespace lab, the host's release): a job runs
while the munge key and then the JWT key rotate, in estate.operate.rotate.logic's order, carried out by
estate.lab.netns_rotate; the job completes; a new job runs; a tenant's call over the bridge
with a token minted after the rotation is accepted, and one minted before is refused (the
key really changed). The keys are compared by hash, never printed."""
from __future__ import annotations

import hashlib

import pytest

from estate.operate.rotate import logic as rotate
from estate.lab import netns_bridge
from estate.lab.netns_rotate import NetnsRunner, secrets_dir
from estate.model.services import jwt_key_path
from tests.live_slurm.conftest import ROOT, running_lab, spec_on
from tests.live_slurm.test_bridge import Client, job_id, refused, wait_done

pytestmark = pytest.mark.live_slurm
HOST_RELEASE = "22.05"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    yield from running_lab(spec_on(ROOT / "stacks/lab.yaml", HOST_RELEASE,
                                   tmp_path_factory.mktemp("rotation")))


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rotate(lab, secret: str, log: list) -> None:
    """What `estate rotate --netns` does: a new key, then the plan, on the lab."""
    d = secrets_dir(lab, secret)
    rotate.new_secret(d, secret)
    rotate.carry_out(lab.estate, rotate.plan(lab.estate, lab.artifacts, secret), d,
                     NetnsRunner(lab), log.append)


def _job_through(lab, secret: str) -> list[str]:
    """A job running on gpu1 while the secret rotates; it completes, and a new one runs."""
    running = lab.sbatch("-w", "gpu1", "--gres=gpu:1", "--wrap", "sleep 20")
    before = lab.wait_jobs([running], "RUNNING", timeout=30)
    assert before[running].startswith("RUNNING"), before
    log: list[str] = []
    _rotate(lab, secret, log)
    assert lab.job_states([running])[running].startswith(("RUNNING", "COMPLETED")), \
        lab.job_states([running])
    done = lab.wait_jobs([running], "COMPLETED", timeout=90)
    assert done[running].startswith("COMPLETED"), (done, lab.tail("gpu1", "slurmd"))
    new = lab.sbatch("-w", "gpu2", "--gres=gpu:1", "--wrap", "true")
    after = lab.wait_jobs([new], "COMPLETED", timeout=60)
    assert after[new].startswith("COMPLETED"), after
    return log


def test_a_job_runs_through_a_munge_key_rotation(lab):
    key = lab.state / "secret" / "munge.key"
    old = _digest(key)
    log = _job_through(lab, "munge-key")
    assert _digest(key) != old
    assert [line.split()[1:3] for line in log][:2] == [["put", "munge"],
                                                        ["restart", "munge"]]
    assert "".join(log).isprintable() and key.read_bytes().hex() not in "".join(log)


def test_a_job_runs_through_a_jwt_rotation_and_only_new_tokens_pass(lab):
    ctl = lab.slurm.controllers[0]
    path = lab.host_path(ctl, jwt_key_path(lab.estate.spec))
    tokens = netns_bridge.mint(lab)
    stale = tokens["inference"].read_text().strip()          # minted with the old key
    old = _digest(path)
    _job_through(lab, "jwt-key")
    assert _digest(path) != old
    client = Client(lab, netns_bridge.client(lab, "k8s2"), tokens)
    fresh = client.token("inference")                       # the rotation minted it again
    assert fresh != stale
    answer = client.submit(fresh, "svc-inference", qos="normal")
    job = job_id(answer)
    assert job, answer
    assert wait_done(lab, job)["state"] == "COMPLETED"
    refused(client.submit(stale, "svc-inference", qos="normal"))
