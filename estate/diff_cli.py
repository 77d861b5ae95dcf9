"""`estate diff OLD NEW` and `estate diff SPEC --against DIR`: the command (estate.diff holds
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
KEEP_UP = 0.75   # estate.diff.KEEP_UP, here without importing it for --help


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
    """The command's work and its exit status (typer's command and plain() call it)."""
    from estate.diff import diff
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


FLAGS = {"--no-diff": ("show_diff", False), "--diff": ("show_diff", True)}
VALUED = {"--output": "output", "--against": "against", "--live": "live",
          "--keep-up": "keep_up"}


def plain(argv: list[str]):
    """The call for a plain `diff` command line (OLD NEW or SPEC --against DIR, with
    --output, --live, --diff/--no-diff, each at most once), without typer: what
    estate.commands.plain does for check and render (typer and every command's module
    are 0.06-0.08 s of a start). None for anything else: typer then parses it, and says
    what is wrong."""
    if argv[:1] != ["diff"]:
        return None
    words, opts, positional = argv[1:], {}, []
    while words:
        word, *words = words
        if word in FLAGS:
            key, value = FLAGS[word]
        elif word in VALUED and words and words[0] and not words[0].startswith("-"):
            key, (value, *words) = VALUED[word], words
        elif word and not word.startswith("-"):
            positional.append(word)
            continue
        else:
            return None
        if key in opts:
            return None
        opts[key] = value
    if len(positional) != (1 if "against" in opts else 2):
        return None
    if opts.get("output", "auto") not in {o.value for o in Output}:
        return None
    try:
        keep_up = float(opts.get("keep_up", KEEP_UP))
    except ValueError:
        return None
    if not 0.0 <= keep_up <= 0.99:
        return None
    from functools import partial

    from estate.commands import _safely   # a crash is one internal-error line, as for check
    return partial(_safely, run, Path(positional[0]),
                   Path(positional[1]) if len(positional) > 1 else None,
                   Path(opts["against"]) if "against" in opts else None, opts.get("live"),
                   opts.get("show_diff", True), Output(opts.get("output", "auto")), keep_up)


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
