"""Apply the roles to an inventory with pyinfra's API, phase by phase, and count changes.

Using the API rather than the pyinfra CLI gives exact per-host results: which
operations changed something, which failed and why. "A second run changes
nothing" is then a plain assertion on ``Result.changed``.

A role may declare a node unsupported (roles._lib.Unsupported, e.g. NFS where the
kernel has none): that is reported as such, never as success.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from estate import paths
from estate.catalogue import LOCKSTEP_PHASES, PHASE_ARGS, phases as ordered_phases

if TYPE_CHECKING:
    from estate.provision.inventory import Inventory

CONNECT_RETRIES = 2   # more tries, 3 s apart, before a node is reported unreachable


@dataclass
class HostResult:
    changed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    ops: int = 0

    @property
    def status(self) -> str:
        if self.failed:
            return "failed"
        if self.unsupported:
            return "unsupported"
        return "changed" if self.changed else "unchanged"


SLOWEST = 15   # operations kept in Result.slowest: where an apply's time went


@dataclass
class Result:
    hosts: dict[str, HostResult]
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    # (seconds, phase, host, operation), the longest first
    slowest: list[tuple[float, str, str, str]] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, list[str]]:
        return {h: r.changed for h, r in self.hosts.items() if r.changed}

    @property
    def failed(self) -> dict[str, list[str]]:
        return {h: r.failed for h, r in self.hosts.items() if r.failed}

    @property
    def unsupported(self) -> dict[str, list[str]]:
        return {h: r.unsupported for h, r in self.hosts.items() if r.unsupported}

    @property
    def ok(self) -> bool:
        return not self.failed

    def as_dict(self) -> dict:
        return {"seconds": round(self.seconds, 2), "phases": self.phases,
                "slowest": [{"seconds": t, "phase": p, "host": h, "operation": o}
                            for t, p, h, o in self.slowest],
                "hosts": {h: {"status": r.status, "ops": r.ops, "changed": r.changed,
                              "failed": r.failed, "unsupported": r.unsupported}
                          for h, r in self.hosts.items()}}


def _deploy_func(name: str):
    module = paths.role_module(f"{name}.tasks")
    return getattr(module, name)


class _ErrorLog(logging.Handler):
    """Collect pyinfra's error lines per host so failures can be reported with a reason."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _op_name(state, host, op_hash: str) -> str:
    """The operation's name on this host: pyinfra's op_meta names gather every name that
    shares the hash, which operations of different deploys on other hosts may."""
    data = state.ops[host].get(op_hash)
    named = data.global_arguments.get("name") if data else None
    return named or ", ".join(sorted(state.op_meta[op_hash].names)) or op_hash


def _timings(phase: str, into: list):
    """A pyinfra state callback that appends each operation's time on each host to into,
    as (seconds, phase, host, operation): Result.slowest says where an apply's time went."""
    from pyinfra.api.state import BaseStateCallback
    started: dict = {}

    class Timings(BaseStateCallback):
        @staticmethod
        def operation_host_start(state, host, op_hash):
            started[host.name, op_hash] = time.monotonic()

        @staticmethod
        def operation_host_success(state, host, op_hash, *args, **kwargs):
            t0 = started.pop((host.name, op_hash), None)
            if t0 is not None:
                into.append((round(time.monotonic() - t0, 2), phase, host.name,
                             _op_name(state, host, op_hash)))

        operation_host_error = operation_host_success

    return Timings()


def _connect_again(state, attempts: int = CONNECT_RETRIES, pause: float = 3.0) -> None:
    """Ask a node that did not answer again before calling it unreachable: sshd or a
    container may still be starting, and one refused connection is not an outage."""
    for _ in range(attempts):
        missing = [h for h in state.inventory if h not in state.activated_hosts]
        if not missing:
            return
        time.sleep(pause)
        for host in missing:
            host.connect(show_errors=False)
            if host.connected:
                state.failed_hosts.discard(host)
                state.activate_host(host)


def _run_phase(phase: str, inv: Inventory, deploys: list[str],
               results: dict[str, HostResult], errors: _ErrorLog, parallel: int | None,
               timings: list) -> None:
    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.deploy import add_deploy
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.api.operations import run_ops
    Unsupported = paths.role_module("_lib").Unsupported

    state = State(check_for_changes=False)
    state.init(inv.pyinfra(), Config(PARALLEL=parallel or 0, FAIL_PERCENT=None))
    state.add_callback_handler(_timings(phase, timings))
    try:
        connect_all(state)
    except PyinfraError:
        pass  # no host reachable: each is reported as failed just below
    _connect_again(state)
    for host in state.inventory:
        if host not in state.activated_hosts or host in state.failed_hosts:
            results[host.name].failed.append(f"connect: cannot reach {host.name} "
                                             f"({host.data.get('ssh_hostname', host.name)})")
    for name in deploys:
        func = _deploy_func(name)
        for host in list(state.active_hosts):
            if name not in host.data.estate_deploys:
                continue
            try:
                add_deploy(state, func, host=host, **PHASE_ARGS.get((phase, name), {}))
            except Unsupported as exc:
                # Only this deploy stops: what it queued before (e.g. containerd before
                # the unreachable kubelet repository) still runs, and so do the others.
                if f"{name}: {exc}" not in results[host.name].unsupported:  # k8s_join re-runs
                    results[host.name].unsupported.append(f"{name}: {exc}")
            except Exception as exc:  # a role refused this host: report, go on with others
                results[host.name].failed.append(f"{name}: {exc}")
                state.active_hosts.discard(host)
    if state.active_hosts:
        try:
            # Phases carry the cross-node order; within one, each host runs its own operations
            # without waiting at each for the others (the controller's dozens and a login
            # node's few overlap), except where a phase hands one host's result to another.
            with _host_failures_quiet():
                run_ops(state, no_wait=phase not in LOCKSTEP_PHASES)
        except PyinfraError as exc:  # every host failed
            errors.lines.append(str(exc))
    _collect(state, results, errors)
    disconnect_all(state)


@contextmanager
def _host_failures_quiet():
    """Without waiting at each operation, pyinfra ends a host's run by raising PyinfraError
    in its greenlet, and gevent's hub prints that as a traceback. The failure is already
    logged with its host and reported by _collect: tell the hub (its documented NOT_ERROR
    setting) that this one is not a crash, for this run only."""
    import gevent
    from pyinfra.api.exceptions import PyinfraError
    hub = gevent.get_hub()
    before = hub.NOT_ERROR
    hub.NOT_ERROR = (*before, PyinfraError)
    try:
        yield
    finally:
        hub.NOT_ERROR = before


def _collect(state, results: dict[str, HostResult], errors: _ErrorLog) -> None:
    for host in state.inventory:
        r, stopped = results[host.name], ""
        for op_hash in state.get_op_order():
            data = state.ops[host].get(op_hash)
            if data is None:
                continue
            meta = data.operation_meta
            name = _op_name(state, host, op_hash)
            if not meta.is_complete():
                stopped = stopped or name
                continue
            r.ops += 1
            if not meta.did_succeed():
                out = meta._combined_output
                why = " | ".join(out.output_lines)[-400:] if out else ""
                r.failed.append(f"{name}: {why}".rstrip(": "))
            elif meta.did_change():
                r.changed.append(name)
        if stopped and not r.failed and host in state.activated_hosts:
            # a host's run ended early with no operation failing: never report it as done
            r.failed.append(f"{stopped}: not run (the run on {host.name} stopped before it; "
                            "see the log above)")


BATCHED_PHASE = "compute"   # the workers: restarted in batches where the change asks


def _parts(live: Inventory, batches: list[list[str]] | None) -> list[Inventory]:
    """The phase's hosts as batches: the first takes every host no batch names (they do
    not restart), each later one a batch of the diff's (estate.operate.diff.order.apply_order)."""
    if not batches or len(batches) < 2:
        return [live]
    named = {n for batch in batches for n in batch}
    first = [n for n, _ in live.hosts if n not in named or n in batches[0]]
    parts = [live.only(first)] + [live.only(n for n, _ in live.hosts if n in set(batch))
                                  for batch in batches[1:]]
    return [p for p in parts if p.hosts]


def apply(inv: Inventory, only: list[str] | None = None,
          parallel: int | None = None, log=print,
          batches: list[list[str]] | None = None) -> Result:
    """Run every phase's deploys on the hosts that have them; return per-host results.
    batches: the workers that restart, in the batches `estate diff` orders (each keeps a
    share of every partition up); the compute phase runs them one batch after another."""
    errors = _ErrorLog()
    logging.getLogger("pyinfra").addHandler(errors)
    results = {name: HostResult() for name, _ in inv.hosts}
    phases: dict[str, float] = {}
    timings: list[tuple[float, str, str, str]] = []
    start = time.monotonic()
    storage_first = bool(inv.data.get("estate_runtime", {}).get("slurm_state_mount"))
    try:
        for phase, deploys in ordered_phases(storage_first):
            deploys = [d for d in deploys if not only or d in only]
            live = inv.only(n for n, d in inv.hosts
                            if results[n].status != "failed"
                            and any(x in d["estate_deploys"] for x in deploys))
            if not live.hosts:
                continue
            t0 = time.monotonic()
            parts = _parts(live, batches) if phase == BATCHED_PHASE else [live]
            for i, part in enumerate(parts, 1):
                of = f", batch {i} of {len(parts)}" if len(parts) > 1 else ""
                log(f"apply: phase {phase} ({', '.join(deploys)}) on {len(part.hosts)} "
                    f"nodes{of}")
                _run_phase(phase, part, deploys, results, errors, parallel, timings)
            phases[phase] = round(time.monotonic() - t0, 2)
    finally:
        logging.getLogger("pyinfra").removeHandler(errors)
    return Result(results, time.monotonic() - start, phases,
                  sorted(timings, reverse=True)[:SLOWEST])
