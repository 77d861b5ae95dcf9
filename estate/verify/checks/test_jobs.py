"""Jobs that span nodes (docs/jobs.md), as a user would run them: a batch job whose srun
step puts rank 0 on one worker and rank 1 on another, rank 1 reaching rank 0 at torchrun's
port and at an ephemeral port (by hostname, and on the fabric); each task sees the
rendered interface variables; a two-node Open MPI job over TCP launched with mpirun under
salloc on a login node; and from here (an admin host) a worker's job port is dropped."""
from __future__ import annotations

import json
import shlex
import socket
import time

import pytest

from estate.model import jobs
from estate.verify.plugin import on_nodes
from estate.verify.reachability import LISTENER

ROLE = "cluster"
PORTS = (29500, 45123)     # torchrun's MASTER_PORT; an ephemeral port (NCCL, Open MPI)

# Each task: print its rendered variables; rank 0 listens, rank 1 connects to every target.
RANKS = r"""
import json, os, socket, sys, time
targets, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rank = int(os.environ["SLURM_PROCID"])
env = {n: os.environ.get(n) for n in names}
if rank == 0:
    socks = []
    for port in sorted({p for _, p in targets}):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port)); s.listen(16); s.settimeout(0.2); socks.append(s)
    end, accepted = time.time() + 25, 0   # until rank 1 has tried every target
    while time.time() < end and accepted < len(targets):
        for s in socks:
            try:
                s.accept()[0].close()
                accepted += 1
            except OSError:
                pass
    print(json.dumps({"rank": 0, "env": env}), flush=True)
else:
    got = {}
    for addr, port in targets:
        got[f"{addr}:{port}"] = "timeout"
        end = time.time() + 15
        while time.time() < end:
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((addr, port)); got[f"{addr}:{port}"] = "open"; break
            except ConnectionRefusedError:
                time.sleep(0.5)       # rank 0 is not listening yet
            except OSError:
                break                 # dropped: a timeout
            finally:
                s.close()
    print(json.dumps({"rank": 1, "env": env, "got": got}), flush=True)
"""

MPI = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
       "print(c.Get_rank(), MPI.Get_processor_name(), c.allreduce(c.Get_rank() + 1))")


def _two_workers(ctx) -> list[str]:
    workers = ctx.with_deploy("slurm_worker")[:2]
    if len(workers) < 2:
        pytest.skip("fewer than two workers among the nodes checked")
    return workers


def _as_user(ctx, node: str, command: str, timeout: int = 120):
    user = ctx.job_user()
    return ctx.host(node).run(f"cd /tmp && timeout {shlex.quote(str(timeout))} runuser -u "
                              f"{shlex.quote(user)} -- "
                              f"sh -c {shlex.quote(command)}")


def _ended(ctx, node: str, job: str, timeout: float = 90) -> str:
    """The job's state once it has ended (sacct), or the last one seen."""
    end, state = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        state = ctx.host(node).run(f"sacct -X -n -P -o State -j {shlex.quote(job)}") \
            .stdout.strip()
        if state and state not in ("PENDING", "RUNNING", "REQUEUED"):
            break
        time.sleep(0.5)
    return state


def _expected_env(ctx, worker: str) -> dict[str, str]:
    from estate.render.jobs import variables
    cls = ctx.estate.group_of(worker).node_class
    return {v.name: v.value for v in variables(ctx.estate, cls)}


@on_nodes(lambda ctx: ctx.controller())
def test_a_batch_jobs_ranks_reach_each_other(node, ctx):
    w0, w1 = _two_workers(ctx)
    submit = ctx.submit_node()
    targets = [(w0, p) for p in PORTS]          # by hostname: the Slurm address segment
    for seg in jobs.fabrics(ctx.estate):
        addr = ctx.estate.address(w0, seg)
        targets += [(str(addr), p) for p in PORTS] if addr else []
    want = _expected_env(ctx, w0)
    names = sorted(set(want) | {"NCCL_SOCKET_IFNAME"})
    step = (f"srun -N2 -n2 --ntasks-per-node=1 -w {w0},{w1} --distribution=block "
            f"python3 -c {shlex.quote(RANKS)} {shlex.quote(json.dumps(targets))} "
            f"{shlex.quote(json.dumps(names))}")
    out = _as_user(ctx, submit, f"sbatch --parsable -N2 -w {w0},{w1} -t 3 "
                                f"-o /tmp/estate-jobs-%j.out --wrap {shlex.quote(step)}")
    assert out.rc == 0, f"sbatch refused the job: {out.stderr.strip()}"
    job = out.stdout.strip().split(";")[0]
    state = _ended(ctx, submit, job)   # polled: `sbatch --wait` sleeps 2, 8, 32 s
    assert state == "COMPLETED", f"the batch job ended {state}"
    text = ctx.host(w0).run(f"cat /tmp/estate-jobs-{shlex.quote(job)}.out").stdout
    ranks = {r["rank"]: r for r in map(json.loads, (line for line in text.splitlines()
                                                    if line.startswith("{")))}
    assert set(ranks) == {0, 1}, f"job {job} printed {text!r}"
    bad = {t: g for t, g in ranks[1]["got"].items() if g != "open"}
    assert not bad, f"rank 1 on {w1} could not reach rank 0 on {w0}: {bad}"
    for rank in (0, 1):
        env = {k: v for k, v in ranks[rank]["env"].items() if k in want}
        assert env == want, f"rank {rank}'s environment {env} is not the rendered {want}"


@on_nodes(lambda ctx: ctx.controller())
def test_an_open_mpi_job_over_tcp_from_a_login_node(node, ctx):
    w0, w1 = _two_workers(ctx)
    submit = ctx.submit_node()
    missing = [submit] if ctx.host(submit).run("command -v mpirun").rc != 0 else []
    missing += [n for n in (w0, w1) if ctx.host(n).run("python3 -c 'import mpi4py'").rc != 0]
    if missing:
        pytest.skip(f"Open MPI or mpi4py missing on {', '.join(missing)}: apt-get install "
                    "openmpi-bin python3-mpi4py there")
    # mpirun runs here, on the login node, and its daemons on the workers call back to it
    out = _as_user(ctx, submit, f"salloc -N2 -w {w0},{w1} -t 3 mpirun --mca pml ob1 "
                                f"--mca btl tcp,self -np 2 --map-by node "
                                f"python3 -c {shlex.quote(MPI)}")
    assert out.rc == 0, f"mpirun over TCP failed: {out.stderr.strip()[-600:]}"
    lines = sorted(out.stdout.split("\n"))
    ranks = [line.split() for line in lines if line.strip()]
    assert [r[0] for r in ranks] == ["0", "1"] and {r[1] for r in ranks} == {w0, w1}, lines
    assert all(r[2] == "3" for r in ranks), f"allreduce gave {lines}"


@on_nodes(lambda ctx: ctx.controller() if ctx.reachability_probe else [])
def test_a_workers_job_port_is_dropped_from_here(node, ctx):
    """From the admin host (where verify runs in the lab), a worker's ephemeral port."""
    w0 = _two_workers(ctx)[0]
    seg = ctx.estate.spec.slurm.address_segment
    addr = str(ctx.estate.address(w0, seg))
    started = ctx.host(w0).run(f"python3 -c {shlex.quote(LISTENER)} "
                               f"{shlex.quote(json.dumps([['tcp', PORTS[1]]]))} 30")
    assert started.rc == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((addr, PORTS[1]))
            got = "open"
        except ConnectionRefusedError:
            got = "refused"
        except OSError:
            got = "timeout"
        finally:
            s.close()
    finally:
        ctx.host(w0).run(f"kill {shlex.quote(str(int(pid)))}")
    assert got == "timeout", f"from this host to {w0} {addr}:{PORTS[1]}: {got}"
