"""Run Estate's ReFrame suite (estate/acceptance/estate_checks.py) and read its outcome.

ReFrame runs on the submit node (a login node) as the job user, never as root, with the
configuration and checks the slurm_login role installed, its stage and output directories
under /tmp (ReFrame's own prefix per user). Its JSON report (--report-file) says which
check passed, failed or was skipped, and why.

What each tag needs (the checks' module docstring says why):
- quick: nothing shared; every tier runs it (`estate verify`, the Docker lab);
- shared-fs: a stage directory on a filesystem the login node and the workers share:
  `run_suite(..., tags=("shared-fs",), stage=NFS_DIR)`, the VM tier;
- driver: root on a node for part of it: `requeue(ctx)` kills slurmd on the node of the
  requeue check's job, waits for ReFrame's verdict, then starts slurmd and resumes the node;
- bridge: an admin host with a tenant's token: `bridge(...)` runs ReFrame here.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from estate.model import reframe

# Tags the Docker lab cannot run, and the tier that does (said beside the quick summary).
LEFT_TO = {"shared-fs": "the VM tier (NFS on real kernels: ReFrame's stage directory)",
           "driver": "the lab/VM tier driver (it kills slurmd on the requeue job's node)",
           "bridge": "an admin host with a tenant's token (estate.verify.reframe.bridge)"}
REQUEUE_JOB = "estate-requeue"     # the requeue check's job name (estate_checks.py)
BROKEN = "ESTATE_REFRAME_BROKEN"


@dataclass(frozen=True)
class Outcome:
    check: str
    result: str          # pass | fail | skip | abort (ReFrame's words)
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.result == "pass"


def outcomes(report: dict) -> list[Outcome]:
    """Each test case's result in a ReFrame JSON report (its last run: the retries')."""
    runs = report.get("runs") or []
    if not runs:
        return []
    return [Outcome(tc["name"], tc.get("result") or "?",
                    (tc.get("fail_reason") or "").strip())
            for tc in runs[-1].get("testcases", [])]


def summary(found: list[Outcome], left: tuple[str, ...] = ()) -> str:
    """One line per check, and what this tier left to another."""
    lines = [f"{o.result.upper():5} {o.check}" + (f": {o.reason}" if o.reason else "")
             for o in found]
    lines += [f"LEFT  tag {tag}: to {LEFT_TO[tag]}" for tag in left]
    return "\n".join(lines)


def command(system: str, tags: tuple[str, ...], prefix: str, report: str,
            broken: tuple[str, ...] = (), reframe_bin: str = reframe.REFRAME,
            settings: str | None = None, checks: str | None = None,
            names: tuple[str, ...] = ()) -> str:
    """The shell command that runs the suite (as whoever runs the shell)."""
    argv = [reframe_bin, "-C", settings or reframe.settings_path(),
            "-c", checks or reframe.checks_path(), "--system", system, "-r",
            "--prefix", prefix, "--report-file", report, "--nocolor"]
    for tag in tags:
        argv += ["--tag", tag]
    if names:
        argv += ["-n", "^(" + "|".join(names) + ")$"]
    env = f"{BROKEN}={shlex.quote(','.join(broken))} " if broken else ""
    return env + shlex.join(argv)


def shared_stage(estate, node: str, user: str) -> str | None:
    """A stage directory for the shared-fs checks: the user's folder under the first NFS
    mount that the node and every Slurm worker have (the VM tier makes it, owned by the
    user, on the server: root is squashed on the clients); None if there is none."""
    from estate.spec.hostlist import Hostlist
    workers = set(estate.role_hosts("slurm_worker"))
    storage = estate.spec.storage
    for m in (storage.mounts if storage else ()):
        clients = set(Hostlist.parse(m.clients))
        if node in clients and workers <= clients:
            return f"{m.path.rstrip('/')}/{user}/reframe"
    return None


def _cluster(ctx) -> str:
    return ctx.estate.spec.slurm.cluster_name.replace(".", "_")


def _prefix(user: str) -> str:
    return f"/tmp/estate-reframe-{user}"


def run_suite(ctx, tags: tuple[str, ...] = ("quick",), broken: tuple[str, ...] = (),
        stage: str | None = None, timeout: int = 900,
        names: tuple[str, ...] = ()) -> list[Outcome]:
    """Run the checks with these tags on the submit node as the job user; their outcomes.
    stage: a directory the workers share (shared-fs checks), else /tmp on the node."""
    node, user = ctx.submit_node(), ctx.job_user()
    prefix = stage or _prefix(user)
    report = f"{prefix}/report.json"
    cmd = command(f"{_cluster(ctx)}:login" if "shared-fs" not in tags else _cluster(ctx),
                  tags, prefix, report, broken, names=names)
    host = ctx.host(node)
    host.run(f"runuser -u {shlex.quote(user)} -- rm -f {shlex.quote(report)}")
    host.run(f"cd /tmp && timeout {shlex.quote(str(timeout))} runuser -u "
             f"{shlex.quote(user)} -- sh -c {shlex.quote(cmd)}")
    return _read_report(host, report)


def _read_report(host, report: str) -> list[Outcome]:
    out = host.run(f"cat {shlex.quote(report)}")
    if out.rc != 0:
        raise RuntimeError(f"ReFrame wrote no report ({report}): {out.stderr.strip()}")
    return outcomes(json.loads(out.stdout))


def requeue(ctx, timeout: int = 900) -> list[Outcome]:
    """The requeue check: ReFrame submits a requeueable job and judges it; meanwhile this
    kills slurmd (and its steps) on the job's node, as root there, as a node dies. Once
    ReFrame has its verdict, slurmd starts again and the node is resumed."""
    node, user = ctx.submit_node(), ctx.job_user()
    prefix = _prefix(user) + "-driver"
    report = f"{prefix}/report.json"
    cmd = command(f"{_cluster(ctx)}:login", ("driver",), prefix, report)
    host = ctx.host(node)
    host.run(f"runuser -u {shlex.quote(user)} -- rm -f {shlex.quote(report)}")
    log = shlex.quote(prefix + ".log")
    host.run(f"cd /tmp && (timeout {shlex.quote(str(timeout))} runuser -u "
             f"{shlex.quote(user)} -- sh -c {shlex.quote(cmd)} >{log} 2>&1 &)")
    victim = _job_node(host, user, REQUEUE_JOB)
    killed = ctx.host(victim)
    try:
        killed.run("systemctl kill --signal=KILL slurmd.service")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and host.run(f"test -s {shlex.quote(report)}").rc:
            time.sleep(5)
    finally:
        killed.run("systemctl start slurmd.service")
        ctl = ctx.controller()
        if ctl:
            ctx.host(ctl[0]).run(f"scontrol update nodename={shlex.quote(victim)} "
                                 "state=resume")
    return _read_report(host, report)


def _job_node(host, user: str, name: str, wait_s: int = 180) -> str:
    """The node the user's running job of that name is on."""
    for _ in range(wait_s):
        out = host.run(f"squeue -h -u {shlex.quote(user)} -n {shlex.quote(name)} -t R "
                       "-o %N").stdout.split()
        if out:
            return out[0]
        time.sleep(1)
    raise RuntimeError(f"no running job {name} of {user} within {wait_s} s")


def bridge(settings: Path, checks: Path, cluster: str, token: str, ca: Path,
           broken: tuple[str, ...] = (), timeout: int = 600) -> list[Outcome]:
    """The bridge check, run here (an admin host, which may reach slurmrestd's front) with
    ReFrame from this interpreter's environment; the token is handed over in a file only
    this user reads, never in argv."""
    with tempfile.TemporaryDirectory(prefix="estate-reframe-bridge-") as tmp:
        token_file = Path(tmp) / "token"
        token_file.touch(mode=0o600)
        token_file.write_text(token)
        report = Path(tmp) / "report.json"
        argv = shlex.split(command(f"{cluster}:bridge", ("bridge",), f"{tmp}/rfm",
                                   str(report), reframe_bin="reframe",
                                   settings=str(settings), checks=str(checks)))
        env = dict(os.environ, ESTATE_BRIDGE_TOKEN_FILE=str(token_file),
                   ESTATE_BRIDGE_CA=str(ca), **({BROKEN: ",".join(broken)} if broken else {}))
        here = str(Path(sys.executable).parent / "reframe")   # this venv's ReFrame
        # a local process (argv, no shell); its exit status is the report's to tell
        subprocess.call([here, *argv[1:]], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=timeout)
        return outcomes(json.loads(report.read_text()))
