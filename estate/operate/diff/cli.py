"""`estate diff OLD NEW` and `estate diff SPEC --against DIR`: the command (estate.operate.diff.logic holds
the logic).

Exit codes: 0 nothing changes; 3 something changes (the report says what); 1 a side does
not render (its findings are printed) or the live cluster cannot be read; 2 usage
(typer's). 3 rather than diff(1)'s 1: Estate's 1 already means errors, and 2 is typer's.
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from estate.output import Output, echo, output_option, print_rows

CHANGED = 3
KEEP_UP = 0.75   # estate.operate.diff.order.KEEP_UP, here without importing it for --help


def register(app: typer.Typer) -> None:
    @app.command("diff")
    def diff_command(
            old: Path = typer.Argument(..., help="The spec as applied (or, with --against, "
                                       "the new spec)."),
            new: Path | None = typer.Argument(None, help="The new spec."),
            against: Path | None = typer.Option(None, "--against", metavar="DIR",
                                                help="Compare the spec with the tree last "
                                                "rendered or applied (the directory "
                                                "with MANIFEST.json)."),
            live: str | None = typer.Option(None, "--live", metavar="SCONTROL",
                                            help="Count the running jobs the change "
                                            "touches on the cluster this scontrol reaches "
                                            "(squeue beside it)."),
            show_diff: bool = typer.Option(True, "--diff/--no-diff",
                                           help="Print each artifact's unified diff."),
            keep_up: float = typer.Option(KEEP_UP, "--keep-up", min=0.0, max=0.99,
                                          metavar="SHARE", help="The share of each "
                                          "partition's nodes the order keeps up while "
                                          "workers restart (batches of the rest)."),
            output: Output = output_option()) -> None:
        """What a spec change does before it is applied: each changed artifact (its diff
        and the nodes that install it), each node's strongest action in Slurm's terms
        (from the release's update policy: slurm_conf/update-policy/), the order, and
        with --live the running jobs it touches. Exit 0: no change; 3: changes; 1: a
        side does not render."""
        if (new is None) == (against is None):
            raise typer.BadParameter("give OLD NEW (two specs), or SPEC --against DIR")
        raise typer.Exit(run(old, new, against, live, show_diff, output, keep_up))


def run(old: Path, new: Path | None, against: Path | None, live: str | None,
        show_diff: bool, output: Output, keep_up: float = KEEP_UP) -> int:
    """The command's work and its exit status."""
    from estate.operate.diff.logic import diff
    report = diff(old, new, against, live, keep_up)
    if not (report.old.ok and report.new.ok):
        from estate.commands import print_findings
        for side in (report.old, report.new):
            if not side.ok:
                echo(f"{side.label} does not render:")
                print_findings(side.findings, output, Path(side.label))
        return 1
    print_report(report, output, show_diff)
    if report.jobs is not None and report.jobs.error:
        return 1
    return CHANGED if report.changed else 0


def print_report(report, output: Output, show_diff: bool) -> None:
    from estate.model.update_policy import SAY
    if output is Output.json:
        echo(json.dumps(report.as_dict(with_diff=show_diff), indent=2))
        return
    if not report.changed:
        echo(f"no change: {report.new.label} renders what {report.old.label} does")
        return
    print_rows(f"{len(report.changes)} artifact(s) change (Slurm {report.new.version})",
               ["artifact", "change", "consumers", "effects"],
               [[c.path, c.status, str(c.consumers) or "-",
                 "; ".join(f"{e.key}: {SAY.get(e.action or '', e.cls)}" for e in c.effects)]
                for c in report.changes], output)
    print_rows("per node: the strongest action", ["nodes", "count", "action", "because"],
               [[str(r.hosts), str(len(r.hosts)), SAY[r.action], "; ".join(r.because)]
                for r in report.nodes], output)
    print_rows(f"order (workers in batches keeping {report.keep_up:.0%} of each partition up)",
               ["step", "action", "batch", "nodes"],
               [[str(i), SAY[st.action], str(st.batch or ""), str(st.hosts)]
                for i, st in enumerate(report.steps(), 1)], output)
    if report.jobs is not None:
        j = report.jobs
        echo(f"running jobs: {j.error}" if j.error else
             f"running jobs: {j.running}, touched by the change: {j.touched}, on nodes "
             f"restarted or drained: {j.at_risk}")
    if show_diff:
        for c in report.changes:
            if c.old is not None or c.new is not None:
                text = c.unified()
                if text:
                    echo(text.rstrip("\n"))
