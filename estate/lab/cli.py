"""`estate lab`: the three labs, each a driver of the one pipeline on this host.

- `estate lab up|down|status`: the Vagrant lab (docker provider): the spec's nodes as
  systemd containers, provisioned by roles/ and checked by `estate verify`.
- `estate lab netns up|status|down`: real slurmctld/slurmd/munged, one network namespace
  per Slurm node, on the rendered files (seconds, no images).
- `estate lab vm up|down`: QEMU VMs with Debian's kernel, for what containers can't do
  (kernel NFS).
`estate lab down --all` removes what any of them left.
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from estate import paths
from estate.output import Output, help_markup, output_option
from estate.provision.cli import (DEFAULT_SPEC, LAB_RENDER, _connection, _fail, _say, console,
                                  do_apply, err, print_apply)

app = typer.Typer(help="Labs on this host: Vagrant containers, network namespaces, QEMU VMs.",
                  no_args_is_help=True, rich_markup_mode=help_markup())
netns_app = typer.Typer(help="Real Slurm daemons in one network namespace per node.",
                        no_args_is_help=True, rich_markup_mode=help_markup())
vm_app = typer.Typer(help="QEMU VMs with their own kernels (the VM tier's machines).",
                     no_args_is_help=True, rich_markup_mode=help_markup())
app.add_typer(netns_app, name="netns")
app.add_typer(vm_app, name="vm")


def register(parent: typer.Typer) -> None:
    """`estate lab` and its subcommands (estate.cli.LAZY)."""
    parent.add_typer(app, name="lab")


def _log(message: str) -> None:
    err.print(f"[dim]{message}[/dim]")


@app.command("up")
def docker_up(spec: Path = typer.Argument(DEFAULT_SPEC),
           out: Path = typer.Option(LAB_RENDER, "-o", "--out"),
           nodes: str = typer.Option(None, "--nodes", help="Only these nodes (hostlist); "
                                     "default: every node the lab starts."),
           provision: bool = typer.Option(True, "--provision/--no-provision"),
           verify: bool = typer.Option(True, "--verify/--no-verify"),
           report: Path = typer.Option(Path(".lab/last-up.json"), "--report"),
           output: Output = output_option()):
    """Bring the lab up from SPEC through Vagrant, provision it, verify it."""
    import time

    from estate.provision.secrets import LAB_SECRETS
    from estate.lab.vagrant import LabError, up
    from estate.pipeline import NotRendered
    from estate.spec.hostlist import Hostlist
    t0 = time.monotonic()
    only = list(Hostlist.parse(nodes)) if nodes else None
    try:
        result, started, timings = up(spec, out, only,
                                      log=_log)
    except (LabError, NotRendered) as exc:
        _fail(str(exc))
    summary = {"spec": str(spec), "nodes": [n["name"] for n in started],
               "steps": timings.steps}
    ok = True
    if provision:
        t = time.monotonic()
        conn = _connection(True, None, "root", False)
        res = do_apply(result.estate, out, conn, ",".join(summary["nodes"]), LAB_SECRETS)
        summary["steps"]["apply"] = round(time.monotonic() - t, 2)
        summary["apply"] = res.as_dict()
        if output is not Output.json:  # the summary below carries it
            print_apply(res, "lab apply", output)
        ok = res.ok
    if verify and provision:
        from estate.verify.run import run_verify
        t = time.monotonic()
        report_v = run_verify(result.estate, out, lab=True, limit=",".join(summary["nodes"]),
                              outdir=Path(".lab/verify"), output=output)
        summary["steps"]["verify"] = round(time.monotonic() - t, 2)
        summary["verify"] = report_v.totals()
        if report_v.reachability is not None:
            summary["reachability"] = {k: len(v) if k == "violations" else v
                                       for k, v in report_v.reachability.items()}
        ok = ok and report_v.ok
    summary["seconds"] = round(time.monotonic() - t0, 2)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(summary, indent=2) + "\n")
    if output is Output.json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _say(f"lab up in {summary['seconds']} s: " +
             ", ".join(f"{k} {v} s" for k, v in summary["steps"].items()), output)
    raise typer.Exit(0 if ok else 1)

@app.command("down")
def docker_down(out: Path = typer.Option(LAB_RENDER, "-o", "--out"),
                every: bool = typer.Option(False, "--all", help="Also the namespace and VM "
                                           "labs: nothing of any lab remains.")):
    """Remove the lab's machines, networks and their iptables rules; exit 1 if any remain."""
    import time

    from estate.lab.vagrant import down
    t0 = time.monotonic()
    remaining = _other_labs_down() if every else {}
    left = down(out, log=_log)
    remaining |= {k: v for k, v in left.items() if v}
    if remaining:
        for kind, items in remaining.items():
            err.print(f"[red]left behind[/red] {kind}: {', '.join(items[:10])}")
        raise typer.Exit(1)
    console.print(f"lab down in {time.monotonic() - t0:.1f} s: no containers, networks, "
                  "bridges or iptables rules of the lab remain")


def _other_labs_down() -> dict[str, list[str]]:
    """Take the namespace and VM labs down; what either left, so that one lab's trouble
    never stops the others' teardown."""
    from estate.lab import netns, vm
    remaining = {f"netns {k}": v for k, v in netns.down(log=_log).items() if v}
    typer.echo("netns lab stopped")
    try:
        left = vm.Lab(None, [], [], lock=vm.hold_lock()).close(log=_log)
    except vm.VMError as exc:
        return remaining | {"vm lab": [str(exc)]}
    return remaining | {f"vm {k}": v for k, v in left.items() if v}


@app.command("status")
def docker_status(output: Output = output_option()):
    """What of the lab exists on this host."""
    from estate.lab.vagrant import leftovers
    left = leftovers()
    if output is Output.json:
        typer.echo(json.dumps(left, indent=2))
        return
    for kind, items in left.items():
        _say(f"{kind}: {len(items)}" + (f" ({', '.join(items[:8])})" if items else ""), output)


@netns_app.command("up")
def netns_up(spec: Path = typer.Argument(DEFAULT_SPEC),
             job: bool = typer.Option(False, "--job", help="Then run a GPU job with srun.")):
    """Start the spec's Slurm nodes in namespaces, wait until Slurm reports them, report."""
    from estate.lab import netns
    try:
        ok = netns.up(spec, job, log=typer.echo)
    except netns.LabError as exc:
        _fail(f"netns lab: {exc}")
    raise typer.Exit(0 if ok else 1)


@netns_app.command("status")
def netns_status():
    """What Slurm sees of the namespace lab, against the spec."""
    from estate.lab import netns
    try:
        ok = netns.status(log=typer.echo)
    except netns.LabError as exc:
        _fail(f"netns lab: {exc}")
    raise typer.Exit(0 if ok else 1)


@netns_app.command("down")
def netns_down():
    """Stop every lab daemon; remove namespaces, bridge, firewall rules and secrets."""
    from estate.lab import netns
    netns.down()
    typer.echo("netns lab stopped")


@vm_app.command("up")
def vm_up(spec: Path = typer.Argument(..., help="e.g. tests/vm/nfs.yaml"),
          nodes: str = typer.Argument(..., help="Hostlist of the spec's nodes, e.g. nfs1,client1")):
    """Start VMs for NODES of SPEC; they stay up for use by hand until `estate lab vm down`."""
    from estate.lab import vm
    from estate.pipeline import NotRendered
    from estate.spec.hostlist import Hostlist
    try:
        lab = vm.lab_from_spec(spec, paths.work() / "build" / spec.stem,
                               list(Hostlist.parse(nodes)), log=_log)
    except (vm.VMError, NotRendered) as exc:
        _fail(f"vm lab: {exc}")
    vm.release(lab.lock)  # the next run's up() cleans them
    typer.echo(json.dumps({"timings": lab.timings,
                           "vms": {v.name: v.management for v in lab.vms}}, indent=2))


@vm_app.command("down")
def vm_down():
    """Stop the VMs; remove their bridges, taps and iptables rules; exit 1 if any remain."""
    from estate.lab import vm
    try:
        left = vm.Lab(None, [], [], lock=vm.hold_lock()).close(log=_log)
    except vm.VMError as exc:
        _fail(f"vm lab: {exc}")
    remaining = {k: v for k, v in left.items() if v}
    if remaining:
        _fail(f"vm lab: left behind: {remaining}")
    typer.echo("vm lab: nothing of the tier remains")
