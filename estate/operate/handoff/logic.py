"""`estate handoff SPEC NODES --to kubernetes|slurm`: lend GPU workers to the other plane.

One command, safe to interrupt and to run again: every step first reads the live state it
would change (the node's Slurm state, its jobs, the overlay, the installed configs) and
does nothing where that is already as the step leaves it, so a second run finishes what
the first began. At every step both planes are consistent: the node is either schedulable
on the plane the spec (with its overlay) gives it, or drained/cordoned and idle.

Slurm -> Kubernetes: drain (reason "estate handoff to kubernetes"), wait for the running
jobs (at the deadline: stop, requeue or cancel, as --at-deadline says), stop slurmd, write
the overlay (estate.spec.handoff_overlay: the node leaves the partitions, its GPUs go to
the pool's Kueue flavor and the tenant's quota), install the controllers' Slurm configs
and restart/reconfigure as the slurm_controller role does, then join or uncordon the node
in Kubernetes with the pool's labels and taints and apply the rendered Kueue queues.
Kubernetes -> Slurm: cordon and drain (kubectl drain evicts through the Eviction API, so
PodDisruptionBudgets hold), the overlay, the Kueue queues, the controllers, slurmd, resume,
wait until the node is idle.

Before anything changes, the resulting spec must pass `estate check` (capacity, quotas,
boundaries); otherwise nothing is done and the findings say why. The planes are reached
through two small interfaces (SlurmSide, KubeSide): estate.operate.handoff.live has the
production ones (ssh to the controller, `estate apply`, kubectl through ESTATE_KUBECONFIG)
and the netns lab's (its controller's namespace). Without a cluster the Kubernetes half is
reported as skipped, with the commands it would run.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from estate.spec import handoff_overlay as overlay_mod
from estate.spec.handoff_overlay import Lent, Overlay

PLANES = ("slurm", "kubernetes")
REASON = "estate handoff to {to}"
# squeue states in which a job still holds (or is about to hold) the node
HOLDING = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED,SIGNALING"
POLICIES = ("stop", "requeue", "cancel")


class Answer(Protocol):
    returncode: int
    stdout: str
    stderr: str


class SlurmSide(Protocol):
    where: str

    def run(self, argv: list[str]) -> Answer:
        """A Slurm client command on the controller."""

    def apply_controllers(self, spec: Path) -> str:
        """The spec's Slurm configs onto the controllers, slurmctld restarted where they
        changed and the configless slurmds reconfigured (the slurm_controller role)."""

    def stop_slurmd(self, host: str) -> str: ...

    def start_slurmd(self, host: str, spec: Path) -> str: ...


class KubeSide(Protocol):
    def unavailable(self) -> str | None:
        """Why no cluster is reachable (None: it is)."""

    def kubectl(self, argv: list[str]) -> Answer: ...

    def join(self, host: str, spec: Path) -> str: ...

    def leave(self, host: str) -> str:
        """On the node: kubeadm reset and the kubelet stopped (else it registers again)."""

    def apply_queues(self, spec: Path) -> str: ...


@dataclass
class Step:
    name: str
    status: str          # done | already | skipped | planned | waiting | failed | refused
    detail: str = ""

    def as_dict(self) -> dict:
        return {"step": self.name, "status": self.status, "detail": self.detail}


@dataclass
class Result:
    hosts: list[str]
    to: str
    steps: list[Step] = field(default_factory=list)
    before: dict | None = None       # estate.capacity budgets
    after: dict | None = None

    @property
    def ok(self) -> bool:
        return all(s.status not in ("failed", "refused", "waiting") for s in self.steps)

    def add(self, name: str, status: str, detail: str = "", log=None) -> Step:
        step = Step(name, status, detail)
        self.steps.append(step)
        if log:
            log(step)
        return step

    def as_dict(self) -> dict:
        return {"hosts": self.hosts, "to": self.to, "ok": self.ok,
                "steps": [s.as_dict() for s in self.steps],
                "gpus": {"before": self.before, "after": self.after}}


@dataclass
class Options:
    deadline_s: float | None = None   # None: wait for the jobs however long they run
    at_deadline: str = "stop"         # POLICIES
    reason: str = ""
    tenant: str | None = None
    partitions: list[str] = field(default_factory=list)
    poll_s: float = 1.0
    register_timeout_s: float = 90.0  # a returning slurmd's registration
    dry_run: bool = False


class Refused(Exception):
    pass


def read_overlay(spec: Path):
    from estate.spec import load
    return overlay_mod.read(spec, load)


def write_overlay(spec: Path, overlay: Overlay) -> Path:
    """Atomically (on failure the old file stays); an overlay without entries is removed:
    the spec file alone holds again."""
    from estate.render.artifacts import write_file
    path = overlay_mod.path_for(spec)
    if overlay.nodes:
        write_file(overlay_mod.dump(spec, overlay), path)
    else:
        path.unlink(missing_ok=True)
    return path


# --- the plan: what the overlay becomes, and whether the result checks -----------------------

def origin_planes(spec: Path) -> dict[str, str | None]:
    """host -> its plane in the spec file alone (without the overlay)."""
    from estate.spec.load import decode, load_text
    from estate.spec.resolved import Estate
    text, _ = decode(spec.read_bytes(), str(spec))
    loaded = load_text(text or "", str(spec))
    if loaded.spec is None:
        raise Refused(f"{spec} does not load without its overlay: run `estate check {spec}`")
    est = Estate(loaded.spec)
    return {name: est.spec.nodes[n.group].plane for name, n in est.nodes.items()}


def proposed_overlay(spec: Path, hosts: list[str], to: str, opts: Options) -> Overlay:
    current, found = read_overlay(spec)
    if found:
        raise Refused("; ".join(f"{f.location}: {f.message}" for f in found))
    entries = dict(current.nodes) if current else {}
    origin = origin_planes(spec)
    for host in hosts:
        if host not in origin:
            raise Refused(f"{host} is not a node of {spec}")
        if origin[host] == to:
            entries.pop(host, None)        # back where the spec file puts it
        else:
            old = entries.get(host)
            if old is not None and old.plane == to:
                continue                   # a re-run: the entry already says so
            entries[host] = Lent(plane=to, partitions=opts.partitions if to == "slurm"
                                 else [], tenant=opts.tenant,
                                 reason=opts.reason or REASON.format(to=to))
    return Overlay(nodes=entries)


def preflight(spec: Path, hosts: list[str], to: str, opts: Options):
    """(current build, resulting build, new overlay); Refused with the reasons where the
    nodes cannot move or the resulting spec does not pass estate check."""
    from estate.findings import Severity
    from estate.pipeline import build
    now = build(spec)
    if now.estate is None:
        raise Refused(_errors(now, f"{spec} does not load"))
    for host in hosts:
        group = now.estate.group_of(host)
        if group is None:
            raise Refused(f"{host} is not a node of {spec}")
        if group.plane != to:
            problem = overlay_mod.movable(group, host, to)
            if problem:
                raise Refused(problem)
    new = proposed_overlay(spec, hosts, to, opts)
    with overlay_mod.proposed(spec, new):
        after = build(spec)
    errors = [f for f in after.findings if f.severity is Severity.ERROR]
    if errors or not after.ok:
        why = _errors(after, f"with {', '.join(hosts)} on the {to} plane, `estate check "
                      f"{spec}` fails; nothing was changed")
        if not opts.tenant and any(f.id.startswith("boundaries.tenant_gpus") for f in errors):
            why += "\n  (--tenant NAME moves the nodes' GPUs into or out of that tenant's quota)"
        raise Refused(why)
    return now, after, new


def _errors(result, head: str) -> str:
    from estate.findings import Severity
    lines = [f"  {f.location or f.path}: {f.id} [{f.path}]: {f.message} ({f.hint})"
             for f in result.findings if f.severity is Severity.ERROR]
    return head + (":\n" + "\n".join(lines[:20]) if lines else "")


def budget(build_result) -> dict | None:
    from estate.capacity import gpu_budget
    return gpu_budget(build_result.estate).as_dict() if build_result.estate else None


# --- the run ------------------------------------------------------------------------------

@contextmanager
def locked(spec: Path):
    """One handoff of a spec at a time: the overlay is read, changed and written whole.
    The lock is on the spec file itself (flock on a read-only descriptor): no lock file
    is left beside it, and handoffs of two specs in one directory do not wait on each
    other."""
    try:
        fd = os.open(spec, os.O_RDONLY)
    except OSError as exc:
        raise Refused(f"cannot read {spec}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another estate handoff of {spec} is running (it holds a lock "
                          "on the spec file); let it finish, then run this again") from None
        yield
    finally:
        os.close(fd)


def handoff(spec: Path, hosts: list[str], to: str, slurm: SlurmSide, kube: KubeSide,
            opts: Options = Options(), log: Callable[[Step], None] | None = None) -> Result:
    result = Result(hosts, to)
    if to not in PLANES:
        result.add("plan", "refused", f"--to must be one of {', '.join(PLANES)}", log)
        return result
    try:    # the drain reason reaches scontrol and the overlay: the spec's free-text rules
        Lent(plane=to, reason=opts.reason)
    except ValueError as exc:
        result.add("plan", "refused", f"--reason: {exc.errors()[0]['msg']}"
                   if hasattr(exc, "errors") else f"--reason: {exc}", log)
        return result
    if opts.at_deadline not in POLICIES:
        result.add("plan", "refused", f"--at-deadline must be one of {', '.join(POLICIES)}",
                   log)
        return result
    try:
        with locked(spec):
            now, after, new = preflight(spec, hosts, to, opts)
            result.before, result.after = budget(now), budget(after)
            result.add("check", "done", f"the spec with {', '.join(hosts)} on the {to} "
                       "plane passes estate check", log)
            steps = TO_KUBERNETES if to == "kubernetes" else TO_SLURM
            ctx = _Ctx(spec, hosts, to, slurm, kube, opts, new, after, result, log)
            for step in steps:
                if opts.dry_run:
                    result.add(step.__name__.strip("_"), "planned",
                               " ".join(step.__doc__.split()), log)
                    continue
                if not step(ctx):
                    break
    except Refused as exc:
        result.add("check", "refused", str(exc), log)
    return result


@dataclass
class _Ctx:
    spec: Path
    hosts: list[str]
    to: str
    slurm: SlurmSide
    kube: KubeSide
    opts: Options
    overlay: Overlay
    after: Any             # the resulting build (estate.pipeline.Result)
    result: Result
    log: Callable | None

    def add(self, name: str, status: str, detail: str = "") -> bool:
        self.result.add(name, status, detail, self.log)
        return status not in ("failed", "waiting", "refused")

    @property
    def reason(self) -> str:
        return self.opts.reason or REASON.format(to=self.to)


# --- reading Slurm ----------------------------------------------------------------------

def node_record(slurm: SlurmSide, host: str) -> dict[str, str] | None:
    """scontrol's record of the node; None where Slurm has no such node."""
    from estate.verify.slurm_view import parse_record
    ans = slurm.run(["scontrol", "show", "node", host, "-o"])
    if ans.returncode:
        if "not found" in (ans.stderr + ans.stdout).lower():
            return None
        raise StepError(f"scontrol show node {host} on {slurm.where}: "
                        f"{(ans.stderr or ans.stdout).strip()[-300:]}")
    for line in ans.stdout.splitlines():
        rec = parse_record(line.strip())
        if rec.get("NodeName") == host:
            return rec
    return None


def jobs_on(slurm: SlurmSide, hosts: list[str]) -> list[str]:
    """Ids of the jobs that hold any of the nodes (only nodes Slurm knows are asked)."""
    known = [h for h in hosts if node_record(slurm, h) is not None]
    if not known:
        return []
    ans = slurm.run(["squeue", "-h", "-w", ",".join(known), "-t", HOLDING, "-o", "%i"])
    if ans.returncode:
        raise StepError(f"squeue on {slurm.where}: {(ans.stderr or ans.stdout).strip()[-300:]}")
    return sorted(set(ans.stdout.split()))


def in_partitions(slurm: SlurmSide, host: str) -> list[str]:
    from estate.verify.slurm_view import _names, _records
    ans = slurm.run(["scontrol", "show", "partition", "-o"])
    if ans.returncode:
        raise StepError(f"scontrol show partition: {(ans.stderr or ans.stdout).strip()[-300:]}")
    return sorted(name for name, rec in _records(ans.stdout, "PartitionName").items()
                  if host in _names(rec.get("Nodes", "")))


class StepError(RuntimeError):
    pass


def _guard(step):
    """A step's StepError (a command that failed) as a failed step; the run stops there
    and running it again resumes."""
    def run(ctx: _Ctx) -> bool:
        try:
            return step(ctx)
        except StepError as exc:
            return ctx.add(step.__name__.strip("_"), "failed", f"{exc}; fix it and run the "
                           "same handoff again: it resumes here")
    run.__name__, run.__doc__ = step.__name__, step.__doc__
    return run


# --- the steps, Slurm side -----------------------------------------------------------------

@_guard
def _drain(ctx: _Ctx) -> bool:
    """Drain the nodes in Slurm with a reason: no new job lands there."""
    done, already = [], []
    for host in ctx.hosts:
        rec = node_record(ctx.slurm, host)
        if rec is None:
            already.append(f"{host} is not a Slurm node")
            continue
        if "DRAIN" in rec.get("State", ""):
            already.append(f"{host} drained ({rec.get('Reason', '')})")
            continue
        ans = ctx.slurm.run(["scontrol", "update", f"NodeName={host}", "State=DRAIN",
                             f"Reason={ctx.reason}"])
        if ans.returncode:
            raise StepError(f"scontrol update NodeName={host} State=DRAIN: "
                            f"{(ans.stderr or ans.stdout).strip()}")
        done.append(host)
    return ctx.add("drain", "done" if done else "already",
                   "; ".join([f"drained {', '.join(done)} (Reason={ctx.reason})"] * bool(done)
                             + already))


@_guard
def _wait_jobs(ctx: _Ctx) -> bool:
    """Wait for the jobs on the nodes to end (at the deadline: --at-deadline)."""
    t0 = time.monotonic()
    jobs = jobs_on(ctx.slurm, ctx.hosts)
    if not jobs:
        return ctx.add("wait", "already", "no job runs on " + ", ".join(ctx.hosts))
    first, acted = list(jobs), ""
    while jobs:
        waited = time.monotonic() - t0
        if ctx.opts.deadline_s is not None and waited >= ctx.opts.deadline_s and not acted:
            policy = ctx.opts.at_deadline
            if policy == "stop":
                return ctx.add("wait", "waiting", f"jobs {', '.join(jobs)} still run on "
                               f"{', '.join(ctx.hosts)} after {waited:.0f} s; the nodes stay "
                               "drained. Run the handoff again to keep waiting, or with "
                               "--at-deadline requeue|cancel")
            argv = (["scontrol", "requeue", ",".join(jobs)] if policy == "requeue"
                    else ["scancel", *jobs])
            ans = ctx.slurm.run(argv)
            if ans.returncode:
                raise StepError(f"{' '.join(argv)}: {(ans.stderr or ans.stdout).strip()}")
            acted = f"; at the deadline ({ctx.opts.deadline_s:.0f} s) {policy}d {', '.join(jobs)}"
        time.sleep(ctx.opts.poll_s)
        jobs = jobs_on(ctx.slurm, ctx.hosts)
    return ctx.add("wait", "done", f"jobs {', '.join(first)} ended after "
                   f"{time.monotonic() - t0:.0f} s{acted}")


@_guard
def _stop_slurmd(ctx: _Ctx) -> bool:
    """Stop slurmd on the nodes (their jobs have ended)."""
    return ctx.add("slurmd", "done", "; ".join(ctx.slurm.stop_slurmd(h) for h in ctx.hosts))


def _write_overlay(ctx: _Ctx) -> bool:
    """Write the overlay: the spec now gives the nodes to the other plane."""
    current, _ = read_overlay(ctx.spec)
    path = overlay_mod.path_for(ctx.spec)
    if (current or Overlay()) == ctx.overlay:
        return ctx.add("overlay", "already", f"{path} already says so")
    write_overlay(ctx.spec, ctx.overlay)
    lent = ", ".join(f"{h}={e.plane}" for h, e in sorted(ctx.overlay.nodes.items()))
    return ctx.add("overlay", "done", f"wrote {path} ({lent})" if ctx.overlay.nodes else
                   f"removed {path}: the spec file alone holds")


@_guard
def _controllers(ctx: _Ctx) -> bool:
    """Install the controllers' Slurm configs, restart slurmctld where they changed,
    reconfigure."""
    detail = ctx.slurm.apply_controllers(ctx.spec)
    if ctx.to == "kubernetes":
        left = {h: in_partitions(ctx.slurm, h) for h in ctx.hosts}
        stay = {h: p for h, p in left.items() if p}
        if stay:
            raise StepError("still in partitions after the configs were applied: " +
                            "; ".join(f"{h}: {', '.join(p)}" for h, p in stay.items()))
        detail += f"; {', '.join(ctx.hosts)} in no partition"
    return ctx.add("controllers", "done", detail)


@_guard
def _start_slurmd(ctx: _Ctx) -> bool:
    """Start slurmd on the nodes (the slurm_worker role)."""
    return ctx.add("slurmd", "done",
                   "; ".join(ctx.slurm.start_slurmd(h, ctx.spec) for h in ctx.hosts))


@_guard
def _resume(ctx: _Ctx) -> bool:
    """Resume the nodes in Slurm (a drain of this handoff's) and wait until they are idle."""
    from estate.verify.slurm_view import usable
    end = time.monotonic() + ctx.opts.register_timeout_s
    notes, pending = [], set(ctx.hosts)
    while pending:
        for host in sorted(pending):
            rec = node_record(ctx.slurm, host) or {}
            state = rec.get("State", "")
            if "DRAIN" in state and rec.get("Reason", "").startswith("estate handoff"):
                ctx.slurm.run(["scontrol", "update", f"NodeName={host}", "State=RESUME"])
                notes.append(f"resumed {host}")
            elif "DRAIN" in state:
                return ctx.add("resume", "failed", f"{host} is drained by someone else "
                               f"(Reason={rec.get('Reason', '')}); resume it when its cause "
                               "is fixed")
            elif usable(state):
                pending.discard(host)
                notes.append(f"{host} {state}")
        if pending and time.monotonic() > end:
            return ctx.add("resume", "failed", f"{', '.join(sorted(pending))} not usable in "
                           f"Slurm after {ctx.opts.register_timeout_s:.0f} s (slurmd registers "
                           "with slurmctld): see slurmd's log on the node")
        if pending:
            time.sleep(ctx.opts.poll_s)
    parts = {h: in_partitions(ctx.slurm, h) for h in ctx.hosts}
    return ctx.add("resume", "done", "; ".join(notes) + "; partitions: " + "; ".join(
        f"{h}: {', '.join(p) or 'none'}" for h, p in parts.items()))


# --- the steps, Kubernetes side --------------------------------------------------------------

def kube_node_steps(ctx: _Ctx) -> list[list[str]]:
    """The kubectl commands that give the nodes the pool's labels and taints."""
    from estate.model.kubernetes import plane_nodes
    nodes = {n.name: n for n in plane_nodes(ctx.after.estate)}
    out = []
    for host in ctx.hosts:
        n = nodes[host]
        out.append(["kubectl", "uncordon", host])
        if n.labels:
            out.append(["kubectl", "label", "--overwrite", "node", host,
                        *(f"{k}={v}" for k, v in n.labels.items())])
        for t in n.taints:
            out.append(["kubectl", "taint", "--overwrite", "node", host, _taint(t)])
    return out


def _taint(t) -> str:
    if isinstance(t, dict):
        key, value, effect = t.get("key"), t.get("value"), t.get("effect")
    else:
        key, value, effect = t.key, getattr(t, "value", None), t.effect
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def _flavor_line(ctx: _Ctx) -> str:
    from estate.model.kubernetes import flavors
    return ", ".join(f"flavor {f.name}: {f.gpus} GPUs on {len(f.nodes)} nodes"
                     for f in flavors(ctx.after.estate)) or "no GPU flavors"


def _skipped(ctx: _Ctx, name: str, why: str, argv: list[list[str]]) -> bool:
    import shlex
    return ctx.add(name, "skipped", f"{why}; it would run: " +
                   " && ".join(shlex.join(a) for a in argv))


@_guard
def _kube_join(ctx: _Ctx) -> bool:
    """Join or uncordon the nodes in Kubernetes with the pool's labels and taints."""
    import shlex
    steps = kube_node_steps(ctx)
    join = [["estate", "apply", str(ctx.spec), "--limit", ",".join(ctx.hosts + _cps(ctx))]]
    why = ctx.kube.unavailable()
    if why:
        return _skipped(ctx, "kubernetes", why, join + steps)
    done = []
    for host in ctx.hosts:
        if ctx.kube.kubectl(["get", "node", host]).returncode:
            done.append(ctx.kube.join(host, ctx.spec))
    for argv in steps:
        ans = ctx.kube.kubectl(argv[1:])
        if ans.returncode:
            raise StepError(f"{shlex.join(argv)}: {(ans.stderr or ans.stdout).strip()}")
        done.append(shlex.join(argv))
    return ctx.add("kubernetes", "done", "; ".join(done))


def _cps(ctx: _Ctx) -> list[str]:
    k8s = ctx.after.estate.spec.kubernetes
    return list(k8s.control_plane[:1]) if k8s else []


@_guard
def _kube_queues(ctx: _Ctx) -> bool:
    """Apply the rendered Kueue flavors and queues: the nodes' GPUs change flavor."""
    line = _flavor_line(ctx)
    why = ctx.kube.unavailable()
    if why:
        return _skipped(ctx, "kueue", f"{why} ({line})",
                        [["estate", "apply", str(ctx.spec), "--limit", ",".join(_cps(ctx)),
                          "--only", "k8s_control_plane"]])
    return ctx.add("kueue", "done", f"{ctx.kube.apply_queues(ctx.spec)} ({line})")


@_guard
def _kube_drain(ctx: _Ctx) -> bool:
    """Cordon and drain the nodes in Kubernetes (evictions respect PodDisruptionBudgets)."""
    import shlex
    timeout = f"{int(ctx.opts.deadline_s)}s" if ctx.opts.deadline_s else "0s"
    steps = []
    for host in ctx.hosts:
        steps += [["kubectl", "cordon", host],
                  ["kubectl", "drain", host, "--ignore-daemonsets", "--delete-emptydir-data",
                   f"--timeout={timeout}"],
                  ["ssh", host, "kubeadm reset -f && systemctl disable --now kubelet"],
                  ["kubectl", "delete", "node", host]]
    why = ctx.kube.unavailable()
    if why:
        return _skipped(ctx, "kubernetes", why, steps)
    done = []
    for host in ctx.hosts:
        if ctx.kube.kubectl(["get", "node", host]).returncode:
            done.append(f"{host} not in the cluster")
            continue
        for argv in [a for a in steps if a[2 if a[0] == "kubectl" else 1] == host]:
            if argv[0] == "ssh":
                done.append(ctx.kube.leave(host))
                continue
            ans = ctx.kube.kubectl(argv[1:])
            if ans.returncode and "NotFound" not in ans.stderr:
                status = "waiting" if argv[1] == "drain" else "failed"
                return ctx.add("kubernetes", status, f"{shlex.join(argv)}: "
                               f"{(ans.stderr or ans.stdout).strip()[-300:]}; the node stays "
                               "cordoned: run the handoff again to go on")
            done.append(shlex.join(argv))
    return ctx.add("kubernetes", "done", "; ".join(done))


TO_KUBERNETES = [_drain, _wait_jobs, _stop_slurmd, _write_overlay, _controllers, _kube_join,
                 _kube_queues]
TO_SLURM = [_kube_drain, _write_overlay, _kube_queues, _controllers, _start_slurmd, _resume]


def gpu_moves(result: Result) -> list[str]:
    """Lines that say how the GPUs moved between planes, flavors and partitions."""
    if not (result.before and result.after):
        return []
    b, a = result.before, result.after
    out = [f"plane {p}: {b['planes'].get(p, 0)} -> {a['planes'].get(p, 0)} GPUs"
           for p in sorted(set(b["planes"]) | set(a["planes"]))]
    for kind in ("partitions", "tenants"):
        for name in sorted(set(b[kind]) | set(a[kind])):
            x, y = b[kind].get(name, {}).get("gpus", 0), a[kind].get(name, {}).get("gpus", 0)
            if x != y:
                out.append(f"{kind[:-1]} {name}: {x} -> {y} GPUs")
    return out
