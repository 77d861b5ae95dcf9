"""The estate command line: schema, check, render, plan, validators here, and the
operations' commands from their own modules (LAZY), each imported only when it runs.

Exit codes: 0 success (warnings allowed), 1 the spec has errors or a step
failed, 2 usage errors (typer's own).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import typer
from typer.core import TyperGroup

from estate.output import Output, help_markup, output_option, print_rows

# command -> the module that defines it, with register(app): it adds the command (one
# command, or a typer group of subcommands) to app. `estate check` imports none of them;
# `estate --help` imports them all (click asks each for its help).
LAZY = {
    "apply": "estate.provision.cli",
    "inventory": "estate.provision.cli",
    "verify": "estate.verify.cli",
    "lab": "estate.lab.cli",
    "pulumi": "estate.pulumi.cli",
    "doctor": "estate.doctor",
    "import": "estate.importer.cli",
    "report": "estate.operate.report.cli",
    "handoff": "estate.operate.handoff.cli",
    "drift": "estate.operate.drift.cli",
    "diff": "estate.operate.diff.cli",
    "rotate": "estate.operate.rotate.cli",
}


class LazyGroup(TyperGroup):
    """The top-level group: the commands defined here, and LAZY's, each built from its
    module the first time click asks for it."""

    def list_commands(self, ctx) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in LAZY if n not in self.commands)]

    def get_command(self, ctx, name: str):
        if name not in self.commands and name in LAZY:
            self.add_command(lazy_command(name, self.rich_markup_mode), name)
        return super().get_command(ctx, name)


def lazy_command(name: str, markup=None):
    app = typer.Typer(rich_markup_mode=markup)
    importlib.import_module(LAZY[name]).register(app)
    return typer.main.get_group(app).commands[name]


class _SafeTyper(typer.Typer):
    """The last safety net: an exception no stage turned into a finding is printed as one
    internal.error line and exits 1, without a traceback unless --debug."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            from estate.commands import crashed
            sys.exit(crashed(exc))


app = _SafeTyper(cls=LazyGroup, add_completion=False, no_args_is_help=True,
                 rich_markup_mode=help_markup(),
                 help="Estate: one spec, two planes (Slurm and Kubernetes).")


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show the traceback of an "
                                        "unexpected error instead of an internal.error "
                                        "finding.")) -> None:
    if debug:
        os.environ["ESTATE_DEBUG"] = "1"


OUT_FLAGS = ("-o", "--out")   # render's output directory
SpecArg = typer.Argument(..., help="Path to the estate spec, e.g. stacks/lab.yaml.")
OutputOpt = output_option()


@app.command()
def schema() -> None:
    """Print the spec's JSON Schema (for editor completion and checking)."""
    from estate.spec.model import Spec
    typer.echo(json.dumps(Spec.model_json_schema(by_alias=True), indent=2))


@app.command()
def check(spec: Path = SpecArg, output: Output = OutputOpt) -> None:
    """Report every problem in a spec at once; exit 1 if any is an error."""
    from estate import commands
    raise typer.Exit(commands.check(spec, output))


@app.command()
def render(spec: Path = SpecArg,
           out: Path = typer.Option(..., *OUT_FLAGS, help="Directory to (re)write."),
           output: Output = OutputOpt) -> None:
    """Check and render a spec into DIR, atomically: on any error DIR is left as it was."""
    from estate import commands
    raise typer.Exit(commands.render(spec, out, output))


@app.command()
def plan(spec: Path = SpecArg, output: Output = OutputOpt,
         svg: Path | None = typer.Option(None, "--svg", metavar="FILE", help="Also draw the "
                                         "estate into FILE (SVG): fabric tree, racks, nodes "
                                         "by plane and pool, segments, flows.")) -> None:
    """Show the GPU budget of both planes (per plane, pool, partition, tenant) and
    what each node would install, before anything is applied."""
    from estate.capacity import gpu_budget
    from estate.commands import err_console, print_findings
    from estate.pipeline import build
    result = build(spec, parallel=True)
    if not result.ok:
        print_findings(result.findings, output, spec)
        if svg:
            err_console.print(f"[red]not drawn[/red]: {svg} left unchanged; fix the errors "
                              f"above (`estate check {spec}` lists them)")
        raise typer.Exit(1)
    if svg:
        draw(result.estate, svg)
    budget = gpu_budget(result.estate).as_dict()
    if output is Output.json:
        typer.echo(json.dumps(budget, indent=2))
        return
    print_budget(budget, output)


def draw(estate, svg: Path) -> None:
    """Write the picture atomically; on failure the old file stays and the command fails."""
    from estate.render.artifacts import write_file
    from estate.commands import err_console
    from estate.render.picture import render_svg
    try:
        write_file(render_svg(estate).encode(), svg)
    except OSError as exc:
        err_console.print(f"[red]not drawn[/red]: cannot write {svg}: "
                          f"{exc.strerror or exc}; {svg} left unchanged")
        raise typer.Exit(1)
    # stderr: stdout stays the budget (a pipe or --output json reads it)
    err_console.print(f"drew {len(estate.nodes)} nodes into {svg}")


def print_budget(budget: dict, output: Output = Output.auto) -> None:
    title = f"GPU budget: {budget['total']} GPUs"
    print_rows(title, ["scope", "name", "GPUs", "detail"], budget_rows(budget), output)


def budget_rows(budget: dict) -> list[list[str]]:
    rows = [["plane", plane, str(n), ""] for plane, n in budget["planes"].items()]
    for name, pool in budget["pools"].items():
        planes = ", ".join(f"{k}={v}" for k, v in pool["by_plane"].items())
        rows.append(["pool", name, str(pool["gpus"]),
                     f"{pool['nodes']} x {pool['model']} nodes {pool['hosts']} ({planes})"])
    for kind in ("partitions", "tenants"):
        for name, v in budget[kind].items():
            by_model = ", ".join(f"{m}={n}" for m, n in v["by_model"].items())
            rows.append([kind[:-1], name, str(v["gpus"]), by_model])
    for model, n in budget["kubernetes_unassigned"].items():
        # one token, so the scope stays one whitespace-separated column in a pipe
        rows.append(["k8s-unassigned", model, str(n), "overcommitted" if n < 0 else ""])
    return rows


@app.command()
def validators(output: Output = OutputOpt) -> None:
    """List every validator: id, severity, domain, stage."""
    from estate.check import load_domains
    from estate.check.registry import describe
    load_domains()
    found = describe()
    if output is Output.json:
        typer.echo(json.dumps([{"id": v.id, "severity": v.severity.value, "domain": v.domain,
                                "stage": v.stage, "summary": v.summary} for v in found],
                              indent=2))
        return
    print_rows(None, ["id", "severity", "domain", "stage", "summary"],
               [[v.id, v.severity.value, v.domain, v.stage, v.summary] for v in found], output)


if __name__ == "__main__":
    app()
