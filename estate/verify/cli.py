"""`estate verify`: check the nodes against what was rendered (table, JSON, JUnit XML)."""
from __future__ import annotations

from pathlib import Path

import typer

from estate.output import (
    Output, lab_option, output_option, ssh_key_option, ssh_user_option, strict_host_keys_option)
from estate.provision.cli import _render


def register(app: typer.Typer) -> None:
    @app.command()
    def verify(spec: Path = typer.Argument(..., help="Path to the estate spec."),
               out: Path = typer.Option(None, "-o", "--out",
                                        help="Render directory (default build/<spec name>)."),
               limit: str = typer.Option(None, "--limit"),
               lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
               ssh_user: str = ssh_user_option(),
               strict_host_keys: bool = strict_host_keys_option(),
               report_dir: Path = typer.Option(Path("build/verify"), "--report-dir",
                                               help="Where verify.json and junit.xml go."),
               reachability: bool = typer.Option(None, "--reachability/--no-reachability",
                                                 help="Probe every pair of nodes against "
                                                 "the flow matrix (listeners on the nodes); "
                                                 "default: with --lab only."),
               drills: bool = typer.Option(False, "--drills", help="Also run the incident "
                                           "drills (stop a part, wait for its alert to page "
                                           "and resolve: minutes each) and the acceptance "
                                           "suite with a check broken on purpose."),
               output: Output = output_option()):
        """Check the nodes against what was rendered: table, JSON and JUnit XML."""
        from estate.verify.run import run_verify
        out = out or Path("build") / spec.stem
        result = _render(spec, out)
        report_v = run_verify(result.estate, out, lab=lab, limit=limit, outdir=report_dir,
                              ssh_key=ssh_key, ssh_user=ssh_user,
                              strict_host_keys=strict_host_keys, output=output,
                              reachability=reachability, drills=drills)
        if output is Output.json:
            typer.echo(report_v.json.read_text(), nl=False)
        raise typer.Exit(0 if report_v.ok else 1)

