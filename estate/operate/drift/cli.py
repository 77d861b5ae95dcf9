"""`estate drift SPEC`: the live estate against the spec and the last render.

The spec is rendered into a private temporary tree (the last render is only read, never
rewritten); the nodes are reached as `estate verify` reaches them. Prints the findings
(table, text lines, GitHub annotations or JSON), writes drift.json and junit.xml into
--report-dir, and exits 0 when nothing drifted, 1 when something did (or the spec does
not render).
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from estate.output import (
    Output, annotation, lab_option, output_option, print_rows, ssh_key_option, ssh_user_option,
    strict_host_keys_option)

HEADER = ["status", "node", "aspect", "what", "actual", "expected", "fix"]
# The widest each column may print (what, actual, expected, fix): a row then fits a
# 200-column terminal, and a rich table an 80-column one by wrapping; drift.json keeps
# every text whole.
WIDTHS = {3: 30, 4: 50, 5: 30, 6: 50}


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def last_manifest(spec: Path, last: Path | None) -> tuple[dict | None, str]:
    """The last render's MANIFEST.json: --last DIR (required to exist), else
    build/<spec name> where a render left one."""
    from estate.provision.inventory import load_manifest
    where = last or Path("build") / spec.stem
    try:
        return load_manifest(where), str(where)
    except FileNotFoundError:
        if last is not None:
            raise
        return None, str(where)


def connect_flags(lab: bool, ssh_key: str | None, ssh_user: str) -> str:
    """The connection options the fix commands repeat, so they can be pasted."""
    if lab:
        return " --lab"
    flags = f" --ssh-key {ssh_key}" if ssh_key else ""
    return flags + (f" --ssh-user {ssh_user}" if ssh_user != "root" else "")


def print_report(report, output: Output, json_path: Path, junit_path: Path) -> None:
    from estate.operate.drift.logic import DRIFT, order
    if output is Output.json:
        typer.echo(json_path.read_text(), nl=False)
        return
    rows = [[cut(cell, WIDTHS.get(i, 20)) for i, cell in
             enumerate([f.status, f.node, f.aspect, f.what, f.actual, f.expected, f.fix])]
            for f in sorted(report.findings, key=order)]
    if output.resolve() is Output.github:
        for f in report.findings:
            if f.status == DRIFT:
                typer.echo(annotation("error", f"{f.what}: {f.actual}, the spec says "
                                      f"{f.expected}; fix: {f.fix}",
                                      title=f"drift on {f.node} ({f.aspect})"))
    if rows:
        print_rows("estate drift", HEADER, rows, output)
    t = report.totals()
    counts = ", ".join(f"{t.get(k, 0)} {k}" for k in ("drift", "pending", "tolerated",
                                                       "skipped"))
    typer.echo(f"{'no drift' if report.ok else 'DRIFT'}: {counts} ({t['compared']} things "
               f"compared); JSON {json_path}, JUnit {junit_path}")


def register(app: typer.Typer) -> None:
    @app.command()
    def drift(spec: Path = typer.Argument(..., help="Path to the estate spec."),
              last: Path = typer.Option(None, "--last", help="The last render: a tree with "
                                        "MANIFEST.json (what `estate render -o DIR` or "
                                        "`estate apply -o DIR` wrote). Default build/<spec "
                                        "name>, where it has one. Only read."),
              limit: str = typer.Option(None, "--limit", help="Hostlist of nodes, e.g. "
                                        "gpu[1-2]; default every node of the spec."),
              lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
              ssh_user: str = ssh_user_option(),
              strict_host_keys: bool = strict_host_keys_option(),
              report_dir: Path = typer.Option(Path("build/drift"), "--report-dir",
                                              help="Where drift.json and junit.xml go."),
              output: Output = output_option()):
        """Compare the live estate with the spec and the last render: Slurm's view
        (scontrol, slurmd -C), installed files (MANIFEST.json hashes, modes, owners),
        services, GPUs (nvidia-smi) and Kubernetes labels and taints. Each difference
        names its node and fix; exit 1 if anything drifted."""
        import shutil
        import tempfile

        from estate.operate.drift.logic import Fixes, junit
        from estate.operate.drift.live import run_drift
        from estate.provision.cli import _connection, _fail, _render
        try:
            previous, last_dir = last_manifest(spec, last)
        except FileNotFoundError as exc:
            _fail(str(exc))
        out = Path(tempfile.mkdtemp(prefix=f"estate-drift-{spec.stem}-"))
        try:
            result = _render(spec, out)
            conn = _connection(lab, ssh_key, ssh_user, strict_host_keys and not lab)
            fixes = Fixes(str(spec), connect_flags(lab, ssh_key, ssh_user))
            absent = None
            if lab:
                from estate.lab.vagrant import not_started
                absent = not_started(out)
            try:
                report = run_drift(result.estate, out, conn, fixes, limit, previous, last_dir,
                                   report_dir, absent)
            except ValueError as exc:     # --limit names nodes the spec does not have
                _fail(str(exc))
        finally:
            shutil.rmtree(out, ignore_errors=True)
        report_dir.mkdir(parents=True, exist_ok=True)
        json_path, junit_path = report_dir / "drift.json", report_dir / "junit.xml"
        json_path.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
        junit_path.write_bytes(junit(report))
        print_report(report, output, json_path, junit_path)
        raise typer.Exit(0 if report.ok else 1)
