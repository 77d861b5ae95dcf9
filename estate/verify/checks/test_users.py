"""The estate as its users use it: jobs submitted from a login node as a user with a Slurm
account (never root), the way job scripts run them, and what Slurm's governance does to
them (cgroups: GPUs, memory, cores; accounting).

Batch jobs run with `sbatch --wait`; their states come from sacct, and what their steps
print is read from the file the batch script's node wrote (the lab has no shared
filesystem: /tmp on the job's first node)."""
from __future__ import annotations

import errno
import shlex
import time

import pytest

from estate.model.monitoring import JOB_MAP_DIR
from estate.verify.plugin import on_nodes

ROLE = "cluster"
WAIT = "timeout 180"
ENDS = 120   # seconds a check's job may take to end
# A step that opens every fake GPU of its node and prints each open's errno (0: opened).
OPEN_GPUS = ("import errno, glob, os\n"
             "for d in sorted(glob.glob('{prefix}[0-9]*')):\n"
             "    try:\n"
             "        os.close(os.open(d, os.O_RDWR)); print(d, 0)\n"
             "    except OSError as e:\n"
             "        print(d, e.errno)\n")


def _login(ctx) -> str:
    node = ctx.submit_node()
    if node is None:
        pytest.skip("no login node or controller among the nodes checked")
    return node


def _as_user(ctx, command: str):
    user = ctx.job_user()
    return ctx.host(_login(ctx)).run(f"cd /tmp && runuser -u {shlex.quote(user)} -- {command}")


def _workers(ctx, n: int = 2) -> list[str]:
    workers = [w for w in ctx.gpu_nodes() if w in ctx.with_deploy("slurm_worker")][:n]
    if len(workers) < n:
        pytest.skip(f"fewer than {n} GPU workers among the nodes checked")
    return workers


def _sbatch(ctx, options: str, script: str) -> str:
    """Submit a batch job as the user and wait until it and its steps have ended (sacct
    polled here: `sbatch --wait` sleeps 2, then 8, then 32 s between its own polls)."""
    out = _as_user(ctx, f"sbatch --parsable -t 3 -D /tmp -o /tmp/estate-verify-%j.out "
                        f"{options} --wrap {shlex.quote(script)}")
    job = out.stdout.strip().split(";")[0]
    assert job.isdigit(), f"sbatch refused the job: {out.stderr.strip()}"
    assert _sacct(ctx, job), f"job {job} did not end in {ENDS} s"
    return job


def _sacct(ctx, job: str, fields: str = "JobID,State,ExitCode,NodeList") -> list[list[str]]:
    """sacct's rows of the job and its steps once all have ended (State is fields[1])."""
    end = time.monotonic() + ENDS
    while time.monotonic() < end:
        out = _as_user(ctx, f"sacct -j {shlex.quote(job)} -n -P --format={fields}")
        rows = [r.split("|") for r in out.stdout.split()] if out.rc == 0 else []
        if rows and all(r[1] not in ("PENDING", "RUNNING", "REQUEUED", "") for r in rows):
            return rows
        time.sleep(0.5)
    return []


def _output(ctx, node: str, job: str) -> str:
    return ctx.host(node).run(f"cat /tmp/estate-verify-{shlex.quote(job)}.out").stdout


@on_nodes(lambda ctx: ctx.controller())
def test_a_batch_job_runs_srun_steps_on_two_nodes(node, ctx):
    """The commonest job script: a batch job whose steps are srun on the job's nodes."""
    a, b = _workers(ctx)
    job = _sbatch(ctx, f"-N2 -w {a},{b}", "srun -N2 -n2 hostname; srun -N2 -n2 true")
    rows = _sacct(ctx, job)
    assert rows and all(r[1] == "COMPLETED" for r in rows), rows
    assert sorted(_output(ctx, a, job).split()) == sorted([a, b])


@on_nodes(lambda ctx: ctx.controller())
def test_two_steps_with_one_gpu_each(node, ctx):
    """Two steps side by side in one 2-GPU allocation, each given one GPU of its own."""
    a, = _workers(ctx, 1)
    job = _sbatch(ctx, f"-N1 -w {a} -n2 --gres=gpu:2",
                  "for i in 1 2; do srun -n1 --gres=gpu:1 --exact sh -c "
                  "'echo step $SLURM_STEP_ID gpu $CUDA_VISIBLE_DEVICES' & done; wait")
    rows = _sacct(ctx, job)
    assert rows and all(r[1] == "COMPLETED" for r in rows), rows
    steps = [line.split() for line in _output(ctx, a, job).splitlines() if line.startswith("step")]
    assert len(steps) == 2 and all(s[3] == "0" for s in steps), steps


@on_nodes(lambda ctx: ctx.controller())
def test_a_job_array_completes(node, ctx):
    job = _sbatch(ctx, "--array=1-3 -N1", "srun hostname")
    rows: list = []
    for _ in range(20):   # slurmdbd may hold one task's end before the others'
        rows = [r for r in _sacct(ctx, job) if "." not in r[0]]
        if len(rows) == 3:
            break
        time.sleep(0.5)
    assert len(rows) == 3 and all(r[1] == "COMPLETED" for r in rows), rows


@on_nodes(lambda ctx: ctx.gpu_nodes()[:1])
def test_a_job_opens_its_own_gpu_and_not_the_other(node, ctx):
    """ConstrainDevices: a 1-GPU step's devices cgroup lets it open its own GPU and refuses
    the other with EPERM. The lab's GPUs have no driver, so an open the cgroup allows ends
    in ENXIO (no such device): the cgroup is asked first, the driver after."""
    if ctx.estate.spec.slurm.process_tracking != "cgroup":
        pytest.skip("slurm.process_tracking is linuxproc: no devices cgroup")
    devices = ctx.gpu_devices(node)
    if len(devices) < 2:
        pytest.skip(f"{node} has fewer than two GPUs")
    prefix = ctx.estate.spec.slurm.gpu_device_path
    out = _as_user(ctx, f"{WAIT} srun -t 2 -N1 -w {shlex.quote(node)} --gres=gpu:1 python3 -c "
                        f"{shlex.quote(OPEN_GPUS.format(prefix=prefix))}")
    assert out.rc == 0, out.stderr.strip()
    codes = [int(line.split()[1]) for line in out.stdout.splitlines()]
    assert len(codes) == len(devices) and codes.count(errno.ENXIO) == 1 and \
        codes.count(errno.EPERM) == len(devices) - 1, out.stdout


@on_nodes(lambda ctx: ctx.gpu_nodes()[:1])
def test_a_step_over_its_memory_ends_out_of_memory(node, ctx):
    if ctx.estate.spec.slurm.process_tracking != "cgroup":
        pytest.skip("slurm.process_tracking is linuxproc: no memory cgroup")
    job = _sbatch(ctx, f"-N1 -w {shlex.quote(node)} --mem=100M",
                  "srun python3 -c 'b = bytearray(400 << 20); import time; time.sleep(2)'")
    states = {r[1] for r in _sacct(ctx, job)}
    assert "OUT_OF_MEMORY" in states, states


@on_nodes(lambda ctx: ctx.gpu_nodes()[:1])
def test_tasks_are_bound_to_their_cores_and_accounted(node, ctx):
    """task/affinity with ConstrainCores: a 1-CPU task sees one CPU; accounting records
    the step's peak memory (sacct MaxRSS), and seff reports it."""
    if ctx.estate.spec.slurm.process_tracking != "cgroup":
        pytest.skip("slurm.process_tracking is linuxproc: no cpuset cgroup")
    job = _sbatch(ctx, f"-N1 -w {shlex.quote(node)} -n1 -c1",
                  "srun -c1 python3 -c 'b = bytearray(50 << 20); import time; time.sleep(2); "
                  "print([l for l in open(\"/proc/self/status\") if "
                  "l.startswith(\"Cpus_allowed_list\")][0].split()[1])'")
    cpus = _output(ctx, node, job).split()
    assert len(cpus) == 1 and cpus[0].isdigit(), f"Cpus_allowed_list {cpus}: not one CPU"
    rss = [r[2] for r in _sacct(ctx, job, "JobID,State,MaxRSS") if r[0].endswith(".0")]
    assert rss and rss[0] not in ("", "0"), f"sacct MaxRSS of the step: {rss}"
    # and seff, as users ask for it, from the same accounting
    eff = _as_user(ctx, f"seff {shlex.quote(job)}")
    assert eff.rc == 0 and "CPU Efficiency:" in eff.stdout and \
        "Memory Utilized: 0.00 B" not in eff.stdout, eff.stdout + eff.stderr


@on_nodes(lambda ctx: ctx.controller())
def test_every_node_of_a_job_runs_the_prolog(node, ctx):
    """PrologFlags=Alloc: the GPU job map that Estate's prolog writes is on both nodes of a
    2-node GPU job while it runs, not only on the first."""
    if "Alloc" not in ctx.estate.spec.slurm.hooks.prolog_flags:
        pytest.skip("slurm.hooks.prolog_flags has no Alloc")
    a, b = _workers(ctx)
    if not any(p.endswith("estate-prolog") for p in ctx.nodes[a].consumes):
        pytest.skip("no GPU job map (spec.monitoring) on the workers")
    out = _as_user(ctx, f"sbatch --parsable -t 2 -o /dev/null -N2 -w {a},{b} --gres=gpu:1 "
                        "--wrap 'sleep 60'")
    job = out.stdout.strip().split(";")[0]
    assert job.isdigit(), out.stderr
    try:
        found = {}
        for _ in range(40):
            found = {n: ctx.host(n).run(f"ls {shlex.quote(JOB_MAP_DIR)}").stdout.split()
                     for n in (a, b)}
            if all(found.values()):
                break
            time.sleep(1)
        assert all(found.values()), f"GPU job map on each node of job {job}: {found}"
    finally:
        _as_user(ctx, f"scancel {shlex.quote(job)}")
