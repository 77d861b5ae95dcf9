"""stacks/lab.yaml on real Slurm: what Slurm reports equals the spec, GPU jobs get
exactly their GPUs, jobs span workers, accounting carries the spec's fair share; and
faults that heal: a killed slurmctld recovers its jobs, a stopped slurmd is named with
what to do and returns when restarted. The fault tests come last and leave every
daemon running."""
from __future__ import annotations

import signal
import time

import pytest

from estate.importer.accounts import associations, read
from estate.importer.report import ImportReport
from estate.model.slurm import node_lines
from estate.render.slurm import unset_by_release
from estate.spec.load import load
from estate.spec.resolved import Estate
from estate.verify import slurm_view
from tests.live_slurm.conftest import ROOT, SAVE_MAX_WAIT, assert_view_matches, lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = ROOT / "stacks/lab.yaml"
lab = lab_on_each_release(SPEC)


def test_slurm_view_matches_the_spec(lab):
    assert_view_matches(lab, ["sacctmgr", "--version"])


def test_the_comparison_sees_a_spec_that_differs(lab, tmp_path):
    """The same running cluster against a spec with other memory and features."""
    text = SPEC.read_text().replace("real_memory_mb: 7680, features: [a100, ib]",
                                    "real_memory_mb: 7000, features: [a100]")
    assert "7000" in text
    other = tmp_path / "lab.yaml"
    other.write_text(text)
    mismatches = slurm_view.compare(Estate(load(other).spec), lab.view())
    got = {(m.subject, m.field, m.actual) for m in mismatches}
    # DefMemPerGPU derives from RealMemory: the partitions' job defaults differ too
    assert got == {(f"node {n}", f, v) for n in ("gpu1", "gpu2")
                   for f, v in (("RealMemory", "7680"), ("AvailableFeatures", "a100,ib"))} | {
        (f"partition {p}", "JobDefaults", "DefCpuPerGPU=2,DefMemPerGPU=3840")
        for p in ("gpu", "urgent")}


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


MPI_HELLO = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "print(c.Get_rank(), MPI.Get_processor_name(), c.allreduce(c.Get_rank() + 1))")


def test_mpi_hello_over_pmix_spans_both_workers(lab):
    """As a user: an Open MPI program launched by srun (MpiDefault=pmix: Slurm's PMIx
    plugin wires the ranks up, no mpirun) on both workers, whose ranks reduce together."""
    assert lab.estate.spec.slurm.mpi_default.startswith("pmix")
    proc = lab.as_user("alice", ["srun", "-N2", "-n2", "--ntasks-per-node=1", "-t", "2",
                                 "/usr/bin/python3", "-c", MPI_HELLO])
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = sorted(line.split() for line in proc.stdout.splitlines() if line.strip())
    assert [r[0] for r in ranks] == ["0", "1"], proc.stdout
    assert sorted(r[1] for r in ranks) == sorted(lab.workers())
    assert {r[2] for r in ranks} == {"3"}, f"allreduce of 1 + 2: {proc.stdout}"


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
    assert any(a.parent != "root" and a.qos for a in lab.slurm.accounts), \
        "the lab spec must keep a child account with its own QOS (the accounts.cfg bug)"
    qos = lab.run(ctl, ["sacctmgr", "-n", "-P", "show", "qos",
                        "format=Name,Priority,MaxTRESPU"]).stdout.splitlines()
    for q in lab.slurm.qos:
        limit = "" if q.max_gpus_per_user is None else f"gres/gpu={q.max_gpus_per_user}"
        assert f"{q.name}|{q.priority}|{limit}" in qos, qos


def test_every_account_has_its_qos(lab):
    """Each account's association, and its users', carry exactly the spec's QOS: a
    child account's too (accounts.cfg once dropped them)."""
    rows = lab.run(lab.slurm.controllers[0], ["sacctmgr", "-n", "-P", "show", "assoc",
                                              "format=Account,User,QOS"]).stdout.splitlines()
    qos = {(a, u): set(filter(None, q.split(","))) for a, u, q in (r.split("|") for r in rows)}
    for acct in lab.slurm.accounts:
        for user in ["", *acct.users]:
            assert qos.get((acct.name, user)) == set(acct.qos), (acct.name, user, rows)


def test_import_reads_the_spec_back_from_slurmdbd(lab):
    """`estate import --accounting`'s reader on real sacctmgr and slurmdbd: the accounts
    (parents, fair share, users, QOS) and the QOS (priority, MaxWall, GPUs per user) the
    spec applied come back as the spec has them; the bridge's user, whose associations are
    per partition, joins its account with the change reported."""
    ctl = lab.slurm.controllers[0]
    dbd = read(lab.slurm.cluster_name, run=lambda argv: lab.run(ctl, argv).stdout)
    doc, report = {"slurm": {"partitions": []}}, ImportReport()
    associations(doc, dbd, report)
    got = {a["name"]: a for a in doc["slurm"]["accounts"]}
    bridged = {t.bridge.user: t.bridge.account for t in lab.estate.spec.kubernetes.tenants
               if t.bridge}
    for acct in lab.slurm.accounts:
        a = got[acct.name]
        assert (a["parent"], a["fairshare"], set(a.get("qos", []))) == \
            (acct.parent, acct.fairshare, set(acct.qos)), a
        assert a.get("users", []) == acct.users + [u for u, n in bridged.items()
                                                   if n == acct.name], a
    assert set(got) == {a.name for a in lab.slurm.accounts}
    qos = {q["name"]: q for q in doc["slurm"]["qos"]}
    for q in lab.slurm.qos:
        assert qos[q.name].get("priority", 0) == q.priority
        assert qos[q.name].get("max_gpus_per_user") == q.max_gpus_per_user
        assert (qos[q.name].get("max_wall") is None) == (q.max_wall is None)
    assert {d.text.split(" partition=")[0] for d in report.dropped} == {
        f"association {u}@{n}" for u, n in bridged.items()}


def test_a_user_in_two_accounts_has_one_default(lab):
    """DefaultAccount is the first account that lists the user, once."""
    rows = lab.run(lab.slurm.controllers[0], ["sacctmgr", "-n", "-P", "show", "user",
                                              "format=User,DefaultAccount"]).stdout.splitlines()
    defaults = dict(r.split("|") for r in rows)
    members = account_members(lab)
    assert len({a for a, u in members if u == "alice"}) == 2, "lab.yaml lost alice's 2nd account"
    for account, user in members:
        assert defaults[user] == next(a for a, u in members if u == user), rows


def test_cluster_settings_reach_slurmctld(lab):
    """The typed settings, the InfiniBand MEMLOCK default and slurm.extra, as the running
    slurmctld reports them (`scontrol show config`)."""
    out = lab.run(lab.client(), ["scontrol", "show", "config"]).stdout
    config = {k.strip(): v.strip() for k, _sep, v in
              (line.partition("=") for line in out.splitlines()) if v}
    slurm, t = lab.slurm, lab.slurm.timeouts
    want = {"SlurmctldTimeout": f"{t.slurmctld} sec", "SlurmdTimeout": f"{t.slurmd} sec",
            "MessageTimeout": f"{t.message} sec", "KillWait": f"{t.kill_wait} sec",
            "UnkillableStepTimeout": f"{t.unkillable_step} sec",
            "PropagateResourceLimitsExcept": "MEMLOCK",
            "SchedulerParameters": "bf_continue,bf_interval=10",
            "PreemptType": "preempt/partition_prio", "PreemptMode": "REQUEUE",
            "PriorityWeightTRES": "GRES/gpu=2000", "PriorityFlags": "MAX_TRES",
            # 24.11 has no mpi/none: MpiDefault=none is left unset, which it reports so
            "MpiDefault": "(null)" if unset_by_release(slurm.version, "MpiDefault",
                                                       slurm.mpi_default) else slurm.mpi_default,
            "SelectTypeParameters": "CR_CORE_MEMORY",
            **{k: str(v) for k, v in slurm.extra.items()}}
    assert {k: config.get(k) for k in want} == want


def test_partition_policy_reaches_slurmctld(lab):
    """DefaultTime (derived: 1 hour under a 1-day MaxTime), the per-GPU job defaults
    derived from the node class, and the policy fields, as `scontrol show partition` says."""
    parts = lab.view().partitions
    gpu, urgent = parts["gpu"], parts["urgent"]
    assert gpu["DefaultTime"] == "01:00:00" and gpu["MaxTime"] == "1-00:00:00", gpu
    assert gpu["JobDefaults"] == "DefCpuPerGPU=2,DefMemPerGPU=3840", gpu
    # the grace time sits on gpu, whose jobs urgent preempts (slurm.grace_time_unused)
    assert (gpu["OverSubscribe"], gpu["PreemptMode"], gpu["GraceTime"]) == \
        ("NO", "REQUEUE", "10"), gpu
    assert {k: urgent[k] for k in ("DefaultTime", "Hidden", "PreemptMode", "GraceTime",
                                   "MaxMemPerNode", "DenyAccounts", "AllowQos",
                                   "TRESBillingWeights")} == {
        "DefaultTime": "00:20:00", "Hidden": "YES", "PreemptMode": "OFF", "GraceTime": "0",
        "MaxMemPerNode": "7680", "DenyAccounts": "vision", "AllowQos": "normal,debug",
        "TRESBillingWeights": "CPU=1,GRES/gpu=4"}, urgent


def test_a_gpu_job_gets_the_gpus_share_of_the_node(lab):
    """--gres=gpu:1 on a 4-CPU, 2-GPU node with 7680 MB: 2 CPUs and 3840 MB (not 1 CPU),
    and the partition's DefaultTime rather than its MaxTime."""
    out = lab.srun("--gres=gpu:1", "sh", "-c", "scontrol show job -o $SLURM_JOB_ID")
    job = slurm_view.parse_record(out.strip())
    assert job["NumCPUs"] == "2", job
    # the allocated TRES: 'TRES' in 22.05's scontrol, 'AllocTRES' in 24.11's
    assert "mem=3840M" in job.get("AllocTRES", job.get("TRES", "")).split(","), job
    assert job["TimeLimit"] == "01:00:00", job


def test_an_urgent_job_requeues_a_gpu_job(lab):
    """PreemptType=preempt/partition_prio: a job in urgent (tier 2) that needs the GPUs a
    gpu-partition job (tier 1, PreemptMode=REQUEUE) holds starts once gpu's GraceTime is
    over, and the other job goes back to the queue (Restarts=1; the grace time itself is
    measured in test_submission_and_preemption.py)."""
    node = lab.workers()[0]
    gpus = max(line.gres_count for line in node_lines(lab.estate))
    low = lab.sbatch("-p", "gpu", "-w", node, f"--gres=gpu:{gpus}", "--wrap", "sleep 300")
    high = None
    try:
        assert lab.wait_jobs([low], "RUNNING", timeout=15)[low].startswith("RUNNING")
        high = lab.sbatch("-p", "urgent", "-w", node, f"--gres=gpu:{gpus}", "--wrap",
                          "sleep 300")
        grace = next(p.grace_time_s or 0 for p in lab.slurm.partitions if p.name == "gpu")
        states = lab.wait_jobs([high], "RUNNING", timeout=grace + 60)
        assert states[high].startswith("RUNNING"), (states, lab.job_states([low]))
        job = slurm_view.parse_record(lab.run(lab.client(), [
            "scontrol", "show", "job", "-o", low]).stdout.strip())
        assert job["JobState"] in ("PENDING", "REQUEUED"), job
        assert job["Restarts"] == "1", job
    finally:
        lab.run(lab.client(), ["scancel", low, *([high] if high else [])], check=False)


def test_workers_run_configless(lab):
    """slurmd got slurm.conf from slurmctld (--conf-server), not from a local file."""
    rendered = lab.artifacts["slurm/slurm.conf"].content
    for node in lab.workers():
        assert not (lab.node_dir(node) / "etc/slurm/slurm.conf").exists()
        cached = lab.host_path(node, lab.daemon_path("SlurmdSpoolDir")) / "conf-cache/slurm.conf"
        assert cached.read_bytes() == rendered


def account_members(lab) -> list[tuple[str, str]]:
    return [(a.name, u) for a in lab.slurm.accounts for u in a.users]


def test_jobs_are_charged_to_the_users_account(lab):
    """Without -A a job goes to the user's default account (the first listing them);
    with -A to any other account they are in."""
    members = account_members(lab)
    for account, user in members:
        default = next(a for a, u in members if u == user)
        choose = [] if account == default else [f"--account={account}"]
        proc = lab.as_user(user, ["srun", "--chdir=/tmp", *choose, "sh", "-c",
                                  'echo "$(id -un) $SLURM_JOB_ACCOUNT"'])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [user, account]


def test_a_user_cannot_charge_an_account_they_are_not_in(lab):
    members = account_members(lab)
    account, user = next((a, u) for a, _ in members for _, u in members
                         if (a, u) not in members)
    proc = lab.as_user(user, ["srun", "--chdir=/tmp", "-A", account, "true"])
    assert proc.returncode != 0
    assert "Invalid account" in proc.stderr, proc.stderr


# --- faults that heal (last: each restarts what it stopped) ----------------------------



def poll(what, until, timeout: float, every: float = 0.5):
    """Call what() until until(result) or the timeout; return the last result."""
    end = time.monotonic() + timeout
    while True:
        result = what()
        if until(result) or time.monotonic() > end:
            return result
        time.sleep(every)


def test_jobs_survive_a_killed_slurmctld(lab):
    """SIGKILL slurmctld while a batch job holds every GPU of a node and a second job
    waits for one; the controller restarted as the lab starts it recovers both from its
    StateSaveLocation: the same job still runs, the other still waits and runs after."""
    ctl, node = lab.slurm.controllers[0], lab.workers()[0]
    gpus = max(line.gres_count for line in node_lines(lab.estate))
    t_submit = time.time()
    running = lab.sbatch("-w", node, f"--gres=gpu:{gpus}", "--wrap", "sleep 120")
    waiting = lab.sbatch("-w", node, "--gres=gpu:1", "--wrap", "sleep 2")
    try:
        # running, and past its prolog (PrologFlags=Alloc: the reason reads Prolog until the
        # allocation's prolog ends, seconds on a loaded host)
        before = lab.wait_jobs([running], "RUNNING None", timeout=30)
        assert before[running] == f"RUNNING None {node}", before
        assert lab.job_states([waiting])[waiting].startswith("PENDING"), before
        # slurmctld writes a change to its state files at most SAVE_MAX_WAIT (5 s) later
        # (src/slurmctld/state_save.c): kill it once what the jobs did has been written
        time.sleep(SAVE_MAX_WAIT + 1)
        saved = lab.host_path(ctl, lab.daemon_path("StateSaveLocation")) / "job_state"
        assert saved.stat().st_mtime >= int(t_submit), "no job state saved since the submit"
        lab.stop(ctl, "slurmctld", signal.SIGKILL)
        ping = lab.run(lab.client(), ["scontrol", "ping"], check=False)
        assert "DOWN" in ping.stdout, ping.stdout + ping.stderr
        lab.start_slurmctld(ctl)
        lab.wait_slurmctld(time.monotonic() + 30)
        after = lab.job_states([running, waiting])
        assert after[running] == before[running], after
        assert after[waiting].startswith("PENDING"), after
        lab.run(lab.client(), ["scancel", running])
        # Under load the restarted controller can take a while to hear the job's end from
        # slurmstepd (a fresh-clone make test once saw it still RUNNING after 30 s).
        done = lab.wait_jobs([waiting], "COMPLETED", timeout=120)
        assert done[waiting].startswith("COMPLETED"), (done, lab.tail(ctl, "slurmctld"))
    finally:
        if not lab.pids(ctl, "slurmctld"):
            lab.start_slurmctld(ctl)
            lab.wait_slurmctld(time.monotonic() + 30)
        lab.run(lab.client(), ["scancel", running, waiting], check=False)


def test_a_stopped_slurmd_is_named_with_what_to_do(lab):
    """A worker's slurmd stops: the comparison `estate verify` runs names that node, its
    state and what to do; once slurmd runs again the node returns and the mismatch goes.
    slurmctld pings nodes only every SlurmdTimeout/3 (100 s with the default 300 s; it
    had not noticed after 20 s); `scontrol reconfigure` contacts every slurmd at once
    and flags the silent one NOT_RESPONDING (measured: at once; a slurmctld restart
    takes 15 s, its nodes UNKNOWN until they register). On 24.11 `scontrol reconfigure`
    restarts slurmctld itself: every node is UNKNOWN until it registers again (the live
    ones within 2 s, measured), the silent one stays UNKNOWN+NOT_RESPONDING."""
    node = lab.workers()[-1]
    lab.stop(node, "slurmd")
    try:
        lab.run(lab.client(), ["scontrol", "reconfigure"])
        # 24.11's restarted slurmctld marks the silent node only once its ping of it fails
        # (under load: over 10 s, as make test-live-slurm on main showed)
        seen = poll(lab.mismatches, lambda ms: [(m.subject, "NOT_RESPONDING" in m.actual)
                                                for m in ms] == [(f"node {node}", True)],
                    timeout=60)
        assert [(m.subject, m.field) for m in seen] == [(f"node {node}", "State")], seen
        [m] = seen
        assert "NOT_RESPONDING" in m.actual, m
        assert f"slurmd on {node} is not responding: start slurmd on {node}" in str(m), m
        assert f"`scontrol update nodename={node} state=resume`" in str(m), m
    finally:
        if not lab.pids(node, "slurmd"):
            lab.start_slurmd(node)
    back = poll(lab.mismatches, lambda ms: ms == [], timeout=30)
    assert back == [], back
    lab.wait_workers(time.monotonic() + 10)
