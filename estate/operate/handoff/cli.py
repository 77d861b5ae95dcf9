"""`estate handoff SPEC NODES --to kubernetes|slurm` (estate.operate.handoff.logic does the work)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import typer

from estate.output import (
    Output, lab_option, output_option, ssh_key_option, ssh_user_option, strict_host_keys_option)

_DURATION = re.compile(r"^(\d+)([smhd]?)$")


def parse_duration(text: str | None) -> float | None:
    """30, 90s, 15m, 2h, 1d -> seconds; none/empty -> None (no deadline)."""
    if text is None or text.lower() in ("", "none"):
        return None
    m = _DURATION.match(text.strip())
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration: use e.g. 90s, 15m, 2h or none")
    return float(int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def _hosts(expr: str) -> list[str]:
    from estate.spec.hostlist import Hostlist, HostlistError
    try:
        return list(Hostlist.parse(expr))
    except HostlistError as exc:
        raise typer.BadParameter(str(exc)) from None


def register(app: typer.Typer) -> None:
    @app.command()
    def handoff(spec: Path = typer.Argument(..., help="Path to the estate spec."),
                nodes: str = typer.Argument(..., help="Hostlist of workers, e.g. gpu[3-4]."),
                to: str = typer.Option(..., "--to", help="The plane they move to: "
                                       "kubernetes or slurm."),
                deadline: str = typer.Option("none", "--deadline", help="How long to wait "
                                             "for the running jobs (or pod evictions): 90s, "
                                             "15m, 2h; none waits for them to end."),
                at_deadline: str = typer.Option("stop", "--at-deadline", help="At the "
                                                "deadline: stop (the nodes stay drained; run "
                                                "again to go on), requeue or cancel the jobs."),
                tenant: str = typer.Option(None, "--tenant", help="The Kubernetes tenant "
                                           "whose GPU quota the nodes' GPUs join (to "
                                           "kubernetes) or leave (to slurm)."),
                partition: list[str] = typer.Option([], "--partition", help="To slurm: a "
                                                    "partition the nodes join besides those "
                                                    "whose node sets select them "
                                                    "(repeatable)."),
                reason: str = typer.Option("", "--reason", help="The drain reason (default: "
                                           "'estate handoff to PLANE')."),
                dry_run: bool = typer.Option(False, "--dry-run", help="Check the resulting "
                                             "spec and show the steps; change nothing."),
                netns: bool = typer.Option(False, "--netns", help="Reach Slurm in the running "
                                           "netns lab (estate lab netns up SPEC)."),
                lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
                ssh_user: str = ssh_user_option(),
                strict_host_keys: bool = strict_host_keys_option(),
                output: Output = output_option()) -> None:
        """Move workers between the planes: drain (Slurm) or cordon and drain (Kubernetes),
        wait for the work, change the spec's overlay (SPEC's NAME.handoff.yaml), apply the
        controllers, and join the other plane. Safe to interrupt and run again. Refused,
        with the reasons, unless the resulting spec passes estate check."""
        from estate.operate.handoff.logic import Options, gpu_moves, handoff as run_handoff
        opts = Options(deadline_s=parse_duration(deadline), at_deadline=at_deadline,
                       reason=reason, tenant=tenant, partitions=list(partition),
                       dry_run=dry_run)
        slurm, kube = _sides(spec, netns, lab, ssh_key, ssh_user, strict_host_keys)
        echo = None if output is Output.json else _echo(output)
        result = run_handoff(spec, _hosts(nodes), to, slurm, kube, opts, echo)
        if output is Output.json:
            typer.echo(json.dumps(result.as_dict(), indent=2))
        else:
            for line in gpu_moves(result):
                typer.echo(f"GPUs: {line}")
        raise typer.Exit(0 if result.ok else 1)


def _echo(output: Output):
    """One line a step, as it ends: a long wait shows where it is."""
    def show(step) -> None:
        typer.echo(f"{step.name:<12} {step.status:<8} {step.detail}")
    return show


def _sides(spec: Path, netns: bool, lab: bool, ssh_key, ssh_user, strict: bool):
    """(SlurmSide, KubeSide) for the command line's options. The Slurm side is built
    lazily: a refused or dry run reaches no node."""
    conn_args = (["--lab"] if lab else
                 [*(["--ssh-key", ssh_key] if ssh_key else []), "--ssh-user", ssh_user,
                  "--strict-host-keys" if strict else "--no-strict-host-keys"])
    slurm = _LazySlurm(spec, netns, lab, ssh_key, ssh_user, strict, conn_args)
    return slurm, _LazyKube(spec, conn_args, None if netns else slurm)


class _LazySlurm:
    def __init__(self, spec, netns, lab, ssh_key, ssh_user, strict, conn_args):
        self._args = (spec, netns, lab, ssh_key, ssh_user, strict, conn_args)
        self._side = None

    def _get(self):
        if self._side is None:
            spec, netns, lab, ssh_key, ssh_user, strict, conn_args = self._args
            if netns:
                from estate.operate.handoff.live import NetnsSlurm
                from estate.lab.netns import Lab
                running = Lab(None)
                if running.spec_path is None or \
                        running.spec_path.resolve() != Path(spec).resolve():
                    raise typer.BadParameter(f"the netns lab is not up with {spec} (estate "
                                             f"lab netns up {spec})")
                self._side = NetnsSlurm(running)
            else:
                from estate.operate.handoff.live import SshSlurm
                from estate.pipeline import build
                from estate.provision.inventory import connection
                self._side = SshSlurm(build(spec, render=False).estate,
                                      connection(lab, ssh_key, ssh_user, strict and not lab),
                                      conn_args)
        return self._side

    def __getattr__(self, name):
        return getattr(self._get(), name)


class _LazyKube:
    def __init__(self, spec, conn_args, slurm):
        self._args = (spec, conn_args, slurm)
        self._side = None

    def __getattr__(self, name):
        if self._side is None:
            from estate.operate.handoff.live import Kubectl
            from estate.pipeline import build
            spec, conn_args, slurm = self._args
            est = build(spec, render=False).estate
            k8s = est.spec.kubernetes if est else None
            on_node = (lambda host, argv: slurm._ssh(host, argv)) if slurm else None
            self._side = Kubectl(conn_args, k8s.control_plane[0] if k8s else None, on_node)
        return getattr(self._side, name)
