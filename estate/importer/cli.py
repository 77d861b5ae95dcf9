"""`estate import`: the command. Reads the files, writes the spec atomically, prints the
report (stderr) and fails under --strict when a line was dropped."""
from __future__ import annotations

from pathlib import Path

import typer


def _read(path: Path | None) -> str | None:
    return path.read_text() if path else None


def run(slurm_conf: Path, gres: Path | None, topology: Path | None, cgroup: Path | None,
        out: Path, strict: bool) -> int:
    # imported here: every other command pays for the importer otherwise
    import yaml

    from estate.importer.mapping import Sources, import_slurm
    from estate.importer.roundtrip import report_differences
    from estate.render.artifacts import write_file
    src = Sources(slurm_conf.read_text(), _read(gres), _read(topology), _read(cgroup),
                  str(slurm_conf), str(gres), str(topology), str(cgroup))
    doc, report = import_slurm(src)
    report_differences(src.slurm, doc, report, src.slurm_name)
    for d in report.dropped:
        typer.echo(f"{d.kind} {d}", err=True)
    if strict and report.dropped:
        typer.echo(f"not written: {len(report.dropped)} line(s) the spec cannot express "
                   "(--strict)", err=True)
        return 1
    names = [str(p) for p in (slurm_conf, gres, topology, cgroup) if p]
    text = report.header(names) + yaml.safe_dump(doc, sort_keys=False, width=100)
    write_file(text.encode(), out)
    typer.echo(f"wrote {out}: {len(doc['nodes'])} node groups, "
               f"{len(doc['slurm']['partitions'])} partitions, "
               f"{len(report.dropped)} dropped or changed setting(s) recorded in it", err=True)
    return 0


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_(slurm_conf: Path = typer.Argument(..., exists=True, dir_okay=False,
                                                  help="The cluster's slurm.conf."),
                gres: Path | None = typer.Option(None, "--gres", exists=True,
                                                 help="gres.conf"),
                topology: Path | None = typer.Option(None, "--topology", exists=True,
                                                     help="topology.conf"),
                cgroup: Path | None = typer.Option(None, "--cgroup", exists=True,
                                                   help="cgroup.conf"),
                out: Path = typer.Option(..., "-o", "--out", help="Spec file to write."),
                strict: bool = typer.Option(False, "--strict", help="Fail, writing nothing, "
                                            "when a line cannot be expressed.")) -> None:
        """Write a spec from an existing cluster's Slurm configuration: every line the
        spec cannot express is reported with its line number (and kept as a comment)."""
        raise typer.Exit(run(slurm_conf, gres, topology, cgroup, out, strict))
