"""`estate pulumi ...`: the Pulumi program's node step, and its graph run without the engine.

Registered on the main app as a sub-app (one line in estate/cli.py).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

app = typer.Typer(help="The Pulumi program's node steps, and a dry run of its graph.",
                  no_args_is_help=True)


def register(parent: typer.Typer) -> None:
    """`estate pulumi` and its subcommands (estate.cli.LAZY)."""
    parent.add_typer(app, name="pulumi")


def _fail(message: str) -> None:
    _log(f"error: {message}")
    raise typer.Exit(1)


def _log(message: str) -> None:
    # Plain lines, never re-wrapped: the engine shows them as they are, and people grep them.
    typer.echo(message, err=True)


@app.command()
def step(spec: Path = typer.Argument(..., help="Path to the estate spec."),
         node: str = typer.Argument(..., help="The node this step provisions."),
         accept_unsupported: list[str] = typer.Option(
             [], "--accept-unsupported", metavar="ROLE",
             help="A role whose 'unsupported here' does not fail the step (repeatable)."),
         revoke_join: bool = typer.Option(False, "--revoke-join", help="Only delete the join "
                                          "token of $ESTATE_KUBEADM_TOKEN on this control "
                                          "plane (after the workers joined)."),
         lab: bool = typer.Option(False, "--lab", help="Connect as the lab does."),
         ssh_key: str = typer.Option(None, "--ssh-key"),
         ssh_user: str = typer.Option("root", "--ssh-user"),
         strict_host_keys: bool = typer.Option(True, "--strict-host-keys/--no-strict-host-keys")):
    """Provision NODE as one step of `pulumi up`: JSON outputs on stdout, exit 1 on failure
    or on an unsupported role the stack does not accept."""
    from estate.provision.envsecrets import secrets_from_env, spec_secrets
    from estate.provision.inventory import connection
    from estate.spec.load import load
    from estate.provision.secrets import LAB_SECRETS
    from estate.pulumi.step import join_from_env, run_step, scrub_environment
    scrub_environment(os.environ)
    if revoke_join and not join_from_env().get("token"):
        typer.echo(json.dumps({"node": node, "revoked": None, "ok": True,
                               "why": "no join token was handed out (nothing to revoke)"}))
        return
    conn = connection(lab, ssh_key, ssh_user, strict_host_keys)
    try:
        loaded = load(spec).spec   # a spec that does not load fails in run_step, named
        with secrets_from_env(named=spec_secrets(loaded) if loaded else None) as from_env:
            chosen = from_env or (LAB_SECRETS if lab else None)
            outputs, verdict = run_step(spec, node, conn, chosen, tuple(accept_unsupported),
                                        revoke_join, log=_log)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    for line in verdict.accepted:
        _log(f"accepted by the stack: {line}")
    _log(f"{node}: {outputs['status']}, {outputs['changed']} change(s)")
    typer.echo(json.dumps(outputs))
    if not verdict.ok:
        for line in verdict.reasons:
            _log(f"error: {line}")
        raise typer.Exit(1)


@app.command("dry-run")
def dry_run(stack: str = typer.Argument(..., help="The stack (stacks/Pulumi.STACK.yaml)."),
            secrets: Path = typer.Option(None, "--secrets", help="Keys directory standing in "
                                         "for the stack's RandomBytes (created if missing). "
                                         "Default: .lab/secrets for a lab stack, else "
                                         "build/pulumi-dry-run/STACK/secrets."),
            json_out: Path = typer.Option(None, "--json", help="Write the run as JSON."),
            applied_tree: Path = typer.Option(None, "--applied-tree", help="Where the run "
                                              "keeps the tree it applied, the old side of "
                                              "the next run's worker batches. Default: "
                                              "build/pulumi-dry-run/STACK/applied-tree.")):
    """Run the stack's graph without the engine: each node's step command, in dependency
    order (the workers a change restarts in `estate diff`'s batches), with the environment
    the engine would give it. Exit 1 if a step failed."""
    from estate.pulumi.dryrun import DryRunError, dry_run as run
    try:
        report = run(stack, secrets=secrets, log=_log,
                     tree=str(applied_tree.absolute()) if applied_tree else None)
    except DryRunError as exc:
        _fail(str(exc))
    for s in report.steps:
        _log(f"{s.name:22} {s.outcome:8} {s.seconds:6.1f} s  {s.summary}")
    if json_out:
        json_out.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    if not report.ok:
        _fail(f"{stack}: {', '.join(s.name for s in report.steps if s.outcome == 'failed')} "
              "failed (their reasons are above); `pulumi up` would stop there too")
    sys.stdout.flush()
