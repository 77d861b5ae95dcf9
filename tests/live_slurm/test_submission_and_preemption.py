"""Jobs that can never run, and preemption, on real Slurm, both releases (issue 44 §2, §3),
stacks/lab.yaml as rendered: EnforcePartLimits=ALL, DependencyParameters=
kill_invalid_depend, and the gpu partition's grace time (gpu is what urgent preempts).

Every job is alice's, submitted as alice: sbatch refuses at submission, with Slurm's
reason, an account the partition denies, a time above MaxTime and memory above
MaxMemPerNode; a job depending on a failed one ends; and a preempted job gets the grace
time, measured from inside it: SIGTERM to its step at the preemption, SIGTERM again when
the grace time is over (the requeue), SIGKILL KillWait later (the urgent job then starts).
"""
from __future__ import annotations

import time

import pytest

from estate.model.slurm import node_lines
from tests.live_slurm.conftest import ROOT, lab_on_each_release

pytestmark = pytest.mark.live_slurm

lab = lab_on_each_release(ROOT / "stacks/lab.yaml")


def sbatch_as_alice(lab, *args: str):
    return lab.as_user("alice", ["sbatch", "--parsable", "-o", "/dev/null", *args])


def partition(lab, name: str):
    return next(p for p in lab.slurm.partitions if p.name == name)


@pytest.mark.parametrize("args, reason", [
    # urgent denies vision (DenyAccounts=vision)
    (("-p", "urgent", "-A", "vision", "--wrap", "true"), "account"),
    # gpu's MaxTime is one day
    (("-p", "gpu", "-A", "research", "-t", "2-0", "--wrap", "true"), "time limit"),
    # urgent's MaxMemPerNode is 7680 MB
    (("-p", "urgent", "-A", "research", "--mem", "7681", "--wrap", "true"), "memory"),
], ids=["denied-account", "time-above-maxtime", "memory-above-maxmempernode"])
def test_sbatch_refuses_a_job_that_can_never_run(lab, args, reason):
    proc = sbatch_as_alice(lab, *args)
    assert proc.returncode != 0, f"accepted as job {proc.stdout.strip()}"
    assert "Batch job submission failed" in proc.stderr, proc.stderr
    assert reason in proc.stderr.lower(), proc.stderr
    print(f"\n{lab.slurm.version} {' '.join(args[:4])}: {proc.stderr.strip()}")


def test_a_job_whose_dependency_failed_ends(lab):
    failed = sbatch_as_alice(lab, "-p", "gpu", "-A", "research", "--wrap", "false")
    assert failed.returncode == 0, failed.stderr
    first = failed.stdout.strip().split(";")[0]
    after = sbatch_as_alice(lab, "-p", "gpu", "-A", "research", "-d", f"afterok:{first}",
                            "--wrap", "true")
    assert after.returncode == 0, after.stderr
    second = after.stdout.strip().split(";")[0]
    states = lab.wait_jobs([second], "CANCELLED", timeout=60)
    assert states[second].startswith("CANCELLED"), (states, lab.job_states([first]))


# The preempted job's step: notes its start and every SIGTERM, and never ends by itself.
TRAP = """\
trap 'echo TERM $(date +%s.%N) >> {log}' TERM
echo START $(date +%s.%N) >> {log}
while :; do sleep 0.1; done
"""


def test_a_preempted_job_gets_the_grace_time(lab):
    """A gpu job whose step traps SIGTERM and notes the time; an urgent job (tier 2) that
    needs its GPUs preempts it. Slurm sends its step SIGTERM at once, requeues it when
    gpu's GraceTime is over (SIGTERM again), and SIGKILLs it KillWait later."""
    node = lab.workers()[0]
    gpus = max(line.gres_count for line in node_lines(lab.estate))
    grace = partition(lab, "gpu").grace_time_s
    kill_wait = lab.slurm.timeouts.kill_wait
    spool = lab.host_path(node, "/var/spool/estate-preempt")
    spool.mkdir(mode=0o1777, exist_ok=True)
    spool.chmod(0o1777)
    log = "/var/spool/estate-preempt/steps.log"
    (spool / "steps.log").unlink(missing_ok=True)
    (spool / "trap.sh").write_text(TRAP.format(log=log))
    low = sbatch_as_alice(lab, "-p", "gpu", "-A", "research", "-w", node, f"--gres=gpu:{gpus}",
                          "--wrap", "srun sh /var/spool/estate-preempt/trap.sh")
    assert low.returncode == 0, low.stderr
    low_id, high_id = low.stdout.strip().split(";")[0], None
    try:
        deadline = time.monotonic() + 30
        while "START" not in _read(spool / "steps.log") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "START" in _read(spool / "steps.log"), lab.job_states([low_id])
        high = sbatch_as_alice(lab, "-p", "urgent", "-A", "research", "-w", node,
                               f"--gres=gpu:{gpus}", "--wrap",
                               f"echo URGENT $(date +%s.%N) >> {log}; sleep 300")
        assert high.returncode == 0, high.stderr
        high_id = high.stdout.strip().split(";")[0]
        states = lab.wait_jobs([high_id], "RUNNING", timeout=grace + kill_wait + 60)
        assert states[high_id].startswith("RUNNING"), (states, lab.job_states([low_id]))
        deadline = time.monotonic() + 10
        while "URGENT" not in _read(spool / "steps.log") and time.monotonic() < deadline:
            time.sleep(0.2)
        marks = _marks(_read(spool / "steps.log"))
        terms, urgent = marks.get("TERM", []), marks["URGENT"][0]
        assert len(terms) >= 2, marks
        gap, killed = terms[1] - terms[0], urgent - terms[1]
        print(f"\n{lab.slurm.version}: GraceTime={grace}: SIGTERM at preemption, again "
              f"{gap:.1f} s later, urgent job started {killed:.1f} s after that "
              f"(KillWait={kill_wait})")
        # at least the grace time: the requeue comes at the first pass that finds it over,
        # job_time_limit's every PERIODIC_TIMEOUT (30 s, slurmctld.h) at the latest
        # (measured for GraceTime=10: 15.2-20.4 s on 22.05, 19.6-20.0 s on 24.11)
        assert grace - 1 <= gap <= grace + 31, marks
        # the step ignored SIGTERM: only SIGKILL, KillWait later, ended it
        assert kill_wait - 1 <= killed <= kill_wait + 15, marks
        record = lab.run(lab.client(), ["scontrol", "show", "job", "-o", low_id]).stdout
        assert "Restarts=1" in record, record
    finally:
        lab.run(lab.client(), ["scancel", low_id, *([high_id] if high_id else [])],
                check=False)


def _read(path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _marks(text: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        word, _, when = line.partition(" ")
        try:
            out.setdefault(word, []).append(float(when))
        except ValueError:
            continue
    return out
