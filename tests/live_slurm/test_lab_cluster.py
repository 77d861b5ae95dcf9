"""stacks/lab.yaml on real Slurm: what Slurm reports equals the spec, GPU jobs get
exactly their GPUs, jobs span workers, accounting carries the spec's fair share."""
from __future__ import annotations

import pytest

from estate.spec.load import load
from estate.spec.resolved import Estate
from estate.verify import slurm_view
from tests.live_slurm.conftest import ROOT, running_lab

pytestmark = pytest.mark.live_slurm

SPEC = ROOT / "stacks/lab.yaml"


@pytest.fixture(scope="module")
def lab():
    yield from running_lab(SPEC)


def test_slurm_view_matches_the_spec(lab):
    view = lab.view()
    assert set(view.nodes) == set(lab.workers())
    assert slurm_view.compare(lab.estate, view) == []


def test_the_comparison_sees_a_spec_that_differs(lab, tmp_path):
    """The same running cluster against a spec with other memory and features."""
    text = SPEC.read_text().replace("real_memory_mb: 7680, features: [a100, ib]",
                                    "real_memory_mb: 7000, features: [a100]")
    assert "7000" in text
    other = tmp_path / "lab.yaml"
    other.write_text(text)
    mismatches = slurm_view.compare(Estate(load(other).spec), lab.view())
    got = {(m.subject, m.field, m.actual) for m in mismatches}
    assert got == {(f"node {n}", f, v) for n in ("gpu1", "gpu2")
                   for f, v in (("RealMemory", "7680"), ("AvailableFeatures", "a100,ib"))}


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_job_sees_exactly_the_gpus_it_asked_for(lab, gpus):
    out = lab.srun(f"--gres=gpu:{gpus}", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"')
    devices = out.strip().split(",")
    assert len(devices) == len(set(devices)) == gpus, out


def test_more_gpus_than_a_node_has_is_refused(lab):
    proc = lab.run(lab.client(), ["srun", "--gres=gpu:3", "true"], check=False)
    assert proc.returncode != 0
    assert "Requested node configuration is not available" in proc.stderr


def test_a_job_spans_both_workers(lab):
    out = lab.srun("-N2", "--ntasks-per-node=1", "hostname")
    assert sorted(out.split()) == sorted(lab.workers())


def test_two_one_gpu_jobs_share_a_two_gpu_node(lab):
    """Each GPU of a node is schedulable: a 1-GPU job must not hold the whole node."""
    node = lab.workers()[0]
    jobs = [lab.sbatch("-w", node, "--gres=gpu:1", "--wrap", "sleep 30") for _ in range(2)]
    try:
        states = lab.wait_jobs(jobs, "RUNNING", timeout=10)
        assert all(s.startswith("RUNNING") for s in states.values()), states
    finally:
        lab.run(lab.client(), ["scancel", *jobs])


def test_fair_share_comes_from_the_spec(lab):
    out = lab.run(lab.client(), ["sshare", "-a", "-P", "-n", "-o", "Account,User,RawShares"]
                  ).stdout
    rows = {(a.strip(), u): s for a, u, s in (line.split("|") for line in out.splitlines())}
    for acct in lab.slurm.accounts:
        assert rows.get((acct.name, "")) == str(acct.fairshare), out
        for user in acct.users:
            assert (acct.name, user) in rows, out


def test_associations_and_qos_come_from_the_spec(lab):
    ctl = lab.slurm.controllers[0]
    assoc = lab.run(ctl, ["sacctmgr", "-n", "-P", "show", "assoc",
                          "format=Account,User,ParentName,Fairshare"]).stdout.splitlines()
    for acct in lab.slurm.accounts:
        assert f"{acct.name}||{acct.parent}|{acct.fairshare}" in assoc, assoc
        for user in acct.users:
            assert any(line.startswith(f"{acct.name}|{user}|") for line in assoc), assoc
    qos = lab.run(ctl, ["sacctmgr", "-n", "-P", "show", "qos",
                        "format=Name,Priority,MaxTRESPU"]).stdout.splitlines()
    for q in lab.slurm.qos:
        limit = "" if q.max_gpus_per_user is None else f"gres/gpu={q.max_gpus_per_user}"
        assert f"{q.name}|{q.priority}|{limit}" in qos, qos


def test_workers_run_configless(lab):
    """slurmd got slurm.conf from slurmctld (--conf-server), not from a local file."""
    rendered = lab.artifacts["slurm/slurm.conf"].content
    for node in lab.workers():
        assert not (lab.node_dir(node) / "etc/slurm/slurm.conf").exists()
        cached = lab.host_path(node, lab.conf["SlurmdSpoolDir"]) / "conf-cache/slurm.conf"
        assert cached.read_bytes() == rendered


def account_members(lab) -> list[tuple[str, str]]:
    return [(a.name, u) for a in lab.slurm.accounts for u in a.users]


def test_jobs_are_charged_to_the_users_account(lab):
    for account, user in account_members(lab):
        proc = lab.as_user(user, ["srun", "--chdir=/tmp", "sh", "-c",
                                  'echo "$(id -un) $SLURM_JOB_ACCOUNT"'])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [user, account]


def test_a_user_cannot_charge_an_account_they_are_not_in(lab):
    members = account_members(lab)
    account, user = next((a, u) for a, _ in members for b, u in members if a != b)
    proc = lab.as_user(user, ["srun", "--chdir=/tmp", "-A", account, "true"])
    assert proc.returncode != 0
    assert "Invalid account" in proc.stderr, proc.stderr
