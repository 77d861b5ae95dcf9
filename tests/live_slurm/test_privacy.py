"""Tenants see their own work only (issue 38 §2), on real slurmctld, slurmdbd and
slurmrestd, both releases, with stacks/lab.yaml's default privacy (three accounts and a
bridge tenant: PrivateData=accounts,jobs,usage,users in slurm.conf and slurmdbd.conf).

Every listing is run as the user it is about (setpriv on the login node, or the tenant's
token over REST), never as root: alice (research's coordinator) lists research's jobs
only; svc-inference, over REST and on the command line, its own only; bob, an operator,
everyone's. The readers that must see everything say who they read as: `estate report`
runs sacct as its ssh user (root by default), the Slurm exporter as SlurmUser."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest

from estate.lab import netns_bridge
from estate.model.services import SLURM_USER
from estate.render.monitoring import SLURM_EXPORTER_CONFIG
from estate.operate.report.logic import UTC, slurm_gpu_hours
from estate.telemetry import slurm_exporter as exporter
from tests.live_slurm.conftest import ROOT, lab_on_each_release
from tests.live_slurm.test_bridge import Client

pytestmark = pytest.mark.live_slurm

lab = lab_on_each_release(ROOT / "stacks/lab.yaml")

# (user, account): one held job each, so they stay listed while the tests look
SUBMITTERS = (("alice", "research"), ("bob", "ops"), ("svc-inference", "ops"))


@pytest.fixture(scope="module")
def jobs(lab) -> dict[str, str]:
    """user -> the id of a held job it submitted in partition gpu."""
    out = {}
    for user, account in SUBMITTERS:
        proc = lab.as_user(user, ["sbatch", "--parsable", "-H", "-o", "/dev/null", "-p", "gpu",
                                  "-A", account, "--wrap", "sleep 60"], check=True)
        out[user] = proc.stdout.strip().split(";")[0]
    yield out
    lab.run(lab.client(), ["scancel", *out.values()], check=False)


def squeue_as(lab, user: str) -> dict[str, tuple[str, str]]:
    """job id -> (user, account) of every job `squeue` shows the user."""
    out = lab.as_user(user, ["squeue", "-h", "-t", "all", "-o", "%i|%u|%a"], check=True).stdout
    return {i: (u, a) for i, u, a in (line.split("|") for line in out.splitlines())}


def test_slurm_runs_with_the_specs_privacy(lab):
    config = lab.run(lab.client(), ["scontrol", "show", "config"]).stdout
    line = next(l for l in config.splitlines() if l.startswith("PrivateData"))
    for value in ("accounts", "jobs", "usage", "users"):
        assert value in line, line


def test_a_user_lists_only_its_accounts_jobs(lab, jobs):
    seen = squeue_as(lab, "alice")
    assert jobs["alice"] in seen, seen
    assert {a for _, a in seen.values()} <= {"research", "vision"}, seen
    assert not {jobs["bob"], jobs["svc-inference"]} & set(seen), seen


def test_a_bridge_user_lists_only_its_own_jobs(lab, jobs):
    seen = squeue_as(lab, "svc-inference")
    assert set(seen) == {jobs["svc-inference"]}, seen


def test_a_bridge_user_over_rest_lists_only_its_own_jobs(lab, jobs):
    """GET /slurm/<api>/jobs with the inference tenant's token: its own job only (before,
    it listed research's user, account, partition and job name)."""
    rest = Client(lab, netns_bridge.client(lab, "k8s2", name="privacy"),
                  netns_bridge.mint(lab))
    answer = rest.call("/jobs", rest.token("inference"), "svc-inference")
    listed = answer["answer"]["jobs"]
    assert {str(j["job_id"]) for j in listed} == {jobs["svc-inference"]}, listed
    assert {j["user_name"] for j in listed} == {"svc-inference"}


def test_an_operator_lists_everyones_jobs(lab, jobs):
    levels = lab.run(lab.client(), ["sacctmgr", "-n", "-P", "show", "user", "bob",
                                    "format=adminlevel"]).stdout.split()
    assert levels == ["Operator"], levels
    seen = squeue_as(lab, "bob")
    assert set(jobs.values()) <= set(seen), seen


def test_usage_and_associations_are_the_users_own(lab, jobs):
    """sshare (slurmctld, PrivateData=usage) and sacctmgr's associations (slurmdbd,
    PrivateData=users): alice sees research's and its sub-account's, which she
    coordinates, and nobody of ops."""
    shares = lab.as_user("alice", ["sshare", "-a", "-n", "-P", "-o", "Account,User"],
                         check=True).stdout
    users = {line.split("|")[1] for line in shares.splitlines()} - {""}
    assert users == {"alice"}, shares
    assoc = lab.as_user("alice", ["sacctmgr", "-n", "-P", "show", "assoc",
                                  "format=account,user"], check=True).stdout
    assert "bob" not in assoc and "svc-inference" not in assoc, assoc
    assert "alice" in assoc, assoc
    coord = lab.run(lab.client(), ["sacctmgr", "-n", "-P", "show", "account", "research",
                                   "withcoord", "format=account,coordinators"]).stdout
    assert coord.split() == ["research|alice"], coord


def _as_slurm_user(lab, argv: list[str]) -> str:
    ctl = lab.slurm.controllers[0]
    return lab.run(ctl, ["setpriv", f"--reuid={SLURM_USER}", f"--regid={SLURM_USER}",
                         "--clear-groups", *argv]).stdout


def test_the_exporter_as_slurm_user_counts_every_tenants_jobs(lab, jobs):
    """The exporter's unit runs it as SlurmUser (roles/slurm_exporter): it still counts
    alice's, bob's and svc-inference's pending jobs."""
    ctl = lab.slurm.controllers[0]
    states = json.loads(lab.artifacts[f"{SLURM_EXPORTER_CONFIG}{ctl}.json"].content)[
        "node_states"]
    got = exporter.collect(lambda argv: _as_slurm_user(lab, argv), states)
    pending = {(k[2], k[3]) for k, n in got["slurm_jobs"].items() if k[0] == "pending" and n}
    assert {("research", "alice"), ("ops", "bob"), ("ops", "svc-inference")} <= pending, got


def test_estate_report_still_charges_every_account(lab):
    """sacct -a as `estate report` runs it (its ssh user, root by default: here root on
    the controller) charges research and ops; the same call as alice sees research only,
    which is why report must read as root, SlurmUser or an operator."""
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    for user, account in SUBMITTERS[:2]:
        proc = lab.as_user(user, ["srun", "--chdir=/tmp", "-p", "gpu", "-A", account,
                                  "--gres=gpu:1", "-t", "2", "sleep", "2"])
        assert proc.returncode == 0, proc.stderr
    after = datetime.now(UTC) + timedelta(seconds=2)
    ctl = lab.slurm.controllers[0]
    deadline, hours = time.monotonic() + 30, {}
    while set(hours) != {"research", "ops"} and time.monotonic() < deadline:
        hours = slurm_gpu_hours(lambda argv: lab.run(ctl, argv).stdout, before, after)
        time.sleep(0.5)
    assert set(hours) == {"research", "ops"}, hours
    assert all(h > 0 for h in hours.values()), hours
    as_alice = slurm_gpu_hours(lambda argv: lab.as_user("alice", argv, check=True).stdout,
                               before, after)
    assert set(as_alice) == {"research"}, as_alice
