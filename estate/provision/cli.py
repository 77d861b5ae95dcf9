"""CLI commands for provisioning: apply and inventory (verify: estate/verify/cli.py).

Registered on the main app by ``register(app)`` (one line in estate/cli.py), so the
shared CLI module only gains an import.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from estate.output import (
    LazyConsole, Output, annotation, lab_option, output_option, print_rows, ssh_key_option,
    ssh_user_option, strict_host_keys_option)

console = LazyConsole()
err = LazyConsole(stderr=True)

DEFAULT_SPEC = Path("stacks/lab.yaml")
LAB_RENDER = Path("build/lab")  # the Makefile's OUT, so `make render` and the lab agree


class InventoryFormat(str, Enum):
    pyinfra = "pyinfra"
    ansible = "ansible"
    json = "json"


def _fail(message: str) -> None:
    err.print(f"[red]error[/red]: {message}")
    raise typer.Exit(1)


def _render(spec: Path, out: Path):
    from estate.render import write_tree
    result = _rendered(spec)
    write_tree(result.artifacts, out)
    return result


def _rendered(spec: Path):
    from estate.pipeline import NotRendered, rendered
    try:
        return rendered(spec)
    except NotRendered as exc:
        _fail(str(exc))


def _connection(lab: bool, ssh_key: str | None, ssh_user: str, strict: bool):
    from estate.provision.inventory import connection
    return connection(lab, ssh_key, ssh_user, strict)


_COLOUR = {"unchanged": "green", "changed": "cyan", "failed": "red", "unsupported": "yellow"}


def print_apply(result, title: str = "apply", output: Output = Output.auto) -> None:
    if output is Output.json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
        return
    from rich.text import Text   # a coloured status on a terminal
    rows = []
    for name, r in result.hosts.items():
        detail = "; ".join(r.failed or r.unsupported or r.changed[:4] +
                           (["..."] if len(r.changed) > 4 else []))
        rows.append([name, Text(r.status, style=_COLOUR[r.status]), str(r.ops),
                     str(len(r.changed)), detail])
    print_rows(f"{title}: {result.seconds:.1f} s", ["node", "status", "ops", "changed", "detail"],
               rows, output, console)
    if output.resolve() is Output.github:
        for name, failed in result.failed.items():
            typer.echo(annotation("error", "; ".join(failed), title=f"{title} failed on {name}"))
    total = sum(len(r.changed) for r in result.hosts.values())
    _say(f"{total} change(s) on {len(result.changed)} node(s); "
         f"{len(result.failed)} failed; {len(result.unsupported)} unsupported here", output)


def _say(line: str, output: Output) -> None:
    # In a pipe, a plain echo: rich would still re-wrap or style it.
    if output.lines:
        typer.echo(line)
    else:
        console.print(line, markup=False)


def worker_batches(spec: Path, last: Path, keep_up: float | None,
                   result=None) -> list[list[str]] | None:
    """estate.operate.diff.logic.worker_batches, its warning on stderr; result: the spec's Build, so
    that the diff takes the render apply writes instead of rendering the spec again."""
    from estate.operate.diff.logic import worker_batches as batches
    from estate.operate.diff.order import KEEP_UP
    from estate.operate.diff.sides import built_side
    built = None if result is None else built_side(str(spec), result.estate,
                                                   result.artifacts)
    return batches(spec, last, KEEP_UP if keep_up is None else keep_up,
                   warn=lambda m: err.print(f"[yellow]warning[/yellow]: {m}"), built=built)


def do_apply(estate, render_dir: Path, conn, limit: str | None, secrets: Path | None,
             manifests: bool = True, only: list[str] | None = None,
             batches: list[list[str]] | None = None):
    from estate.catalogue import ORDER
    from estate.provision.apply import apply
    from estate.provision.inventory import pyinfra_inventory
    if unknown := sorted(set(only or ()) - set(ORDER)):
        _fail(f"--only: no deploy named {', '.join(unknown)}; deploys: {', '.join(ORDER)}")
    try:
        inv = pyinfra_inventory(estate, render_dir, secrets, conn, limit, manifests)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    return apply(inv, only=only, log=lambda m: err.print(f"[dim]{m}[/dim]"), batches=batches)


def register(app: typer.Typer) -> None:
    @app.command()
    def apply(spec: Path = typer.Argument(..., help="Path to the estate spec."),
              limit: str = typer.Option(None, "--limit", help="Hostlist of nodes, e.g. gpu[1-2]."),
              out: Path = typer.Option(None, "-o", "--out",
                                       help="Render directory (default: a private temporary "
                                       "one, so parallel runs never share a tree)."),
              secrets: Path = typer.Option(None, "--secrets",
                                           help="Directory with munge.key and jwt_hs256.key. "
                                           "Default: $ESTATE_*_KEY_B64, else .lab/secrets "
                                           "with --lab."),
              lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
              ssh_user: str = ssh_user_option(),
              strict_host_keys: bool = strict_host_keys_option(),
              json_out: Path = typer.Option(None, "--json", help="Write the results as JSON."),
              manifests: bool = typer.Option(True, "--manifests/--no-manifests",
                                             help="Apply the rendered Kubernetes manifests from "
                                             "the control plane. --no-manifests where another "
                                             "owner applies them (the Pulumi program's "
                                             "ConfigGroup): they get exactly one. The pod "
                                             "network's are applied either way."),
              only: str = typer.Option(None, "--only", help="Run only these deploys, e.g. "
                                       "common,storage (the others are not run on any node)."),
              keep_up: float = typer.Option(None, "--keep-up", min=0.0, max=0.99,
                                            help="With -o holding the last applied tree: "
                                            "the share of each partition kept up while the "
                                            "workers the change restarts go in batches "
                                            "(estate diff's order and default)."),
              output: Output = output_option()):
        """Render SPEC and apply the roles to its nodes (or --limit): controllers first, then
        the workers, those a change restarts in batches. Exit 1 if a node failed."""
        import shutil
        import tempfile

        from estate.provision.envsecrets import secrets_from_env, spec_secrets
        from estate.provision.secrets import LAB_SECRETS
        from estate.render import write_tree
        # Pulumi applies a stage's nodes in parallel: each run renders into its own tree.
        private = out is None
        out = out or Path(tempfile.mkdtemp(prefix=f"estate-apply-{spec.stem}-"))
        try:
            # rendered once: the diff against the tree last applied in `out`, then the
            # same render written over it
            result = _rendered(spec)
            batches = None if private else worker_batches(spec, out, keep_up, result)
            write_tree(result.artifacts, out)
            conn = _connection(lab, ssh_key, ssh_user, strict_host_keys)
            with secrets_from_env(named=spec_secrets(result.estate.spec)) as from_env:
                chosen = secrets or from_env or (LAB_SECRETS if lab else None)
                res = do_apply(result.estate, out, conn, limit, chosen, manifests,
                               only.split(",") if only else None, batches)
        except ValueError as exc:
            _fail(str(exc))
        finally:
            if private:
                shutil.rmtree(out, ignore_errors=True)
        print_apply(res, output=output)
        if json_out:
            json_out.write_text(json.dumps(res.as_dict(), indent=2) + "\n")
        raise typer.Exit(0 if res.ok else 1)

    @app.command()
    def inventory(spec: Path = typer.Argument(..., help="Path to the estate spec."),
                  fmt: InventoryFormat = typer.Option(InventoryFormat.pyinfra, "--format"),
                  out: Path = typer.Option(None, "-o", "--out",
                                           help="Render directory (default build/<spec name>)."),
                  lab: bool = typer.Option(False, "--lab", help="Include the lab's connection "
                                           "settings (key, no host key checks).")):
        """Print the inventory grouped by role, deploy and plane (pyinfra, Ansible or JSON)."""
        from estate.provision.export import export
        out = out or Path("build") / spec.stem
        result = _render(spec, out)
        conn = _connection(lab, None, "root", not lab)
        typer.echo(export(result.estate, out, conn, fmt.value), nl=False)
