"""`estate import`: the command. Reads the files, writes the spec atomically, prints the
report (stderr) and fails under --strict when a line was dropped."""
from __future__ import annotations

from pathlib import Path

import typer

from estate.catalogue import DEFAULT_SLURM, SLURM_SUITES


def _read(path: Path | None) -> str | None:
    return path.read_text() if path else None


def _associations(cluster: str | None):
    """slurmdbd's associations through the local sacctmgr, or the reason it failed."""
    import subprocess

    from estate.importer.accounts import read
    try:
        return read(cluster), None
    except FileNotFoundError:
        return None, "sacctmgr is not installed here (Debian: slurm-client)"
    except subprocess.CalledProcessError as exc:
        return None, f"sacctmgr failed: {(exc.stderr or '').strip() or exc.returncode}"
    except subprocess.TimeoutExpired:
        return None, "sacctmgr did not answer in 60 s (is slurmdbd up?)"


def _directory(doc: dict, source) -> str | None:
    """The directory's people and groups merged into doc's identity, or why not."""
    from estate.importer.directory import DirectoryFailed, directory_block, merge, read_directory
    try:
        imported = read_directory(source)
    except DirectoryFailed as exc:
        return str(exc)
    doc["identity"] = merge(doc["identity"], imported, directory_block(source, imported))
    return None


def directory_source(uri: str, users_base: str | None, groups_base: str | None, schema: str,
                     ca: Path | None, start_tls: bool, bind_dn: str | None,
                     bind_secret: Path | None, groups: list[str]):
    """--directory's options as a DirectorySource; the password from its file (never argv)."""
    from estate.importer.directory import DirectorySource
    password = bind_secret.read_text().splitlines()[0] if bind_secret else None
    return DirectorySource(uri, users_base or "", groups_base or "", schema, ca, start_tls,
                           bind_dn, password, tuple(groups))


def run(slurm_conf: Path, gres: Path | None, topology: Path | None, cgroup: Path | None,
        out: Path, strict: bool, version: str, accounting: bool = False,
        directory=None) -> int:
    # imported here: every other command pays for the importer otherwise
    import yaml

    from estate.importer.mapping import ImportFailed, Sources, import_slurm
    from estate.importer.roundtrip import report_differences
    from estate.render.artifacts import write_file
    src = Sources(slurm_conf.read_text(), _read(gres), _read(topology), _read(cgroup),
                  str(slurm_conf), str(gres), str(topology), str(cgroup))
    if version not in SLURM_SUITES:
        typer.echo(f"not written: --slurm-version {version}: Estate renders for "
                   f"{', '.join(sorted(SLURM_SUITES))}", err=True)
        return 2
    dbd = None
    if accounting:
        dbd, why = _associations(None)
        if dbd is None:
            typer.echo(f"not written: --accounting: {why}", err=True)
            return 1
    try:
        doc, report = import_slurm(src, version=version, accounting=dbd)
    except ImportFailed as exc:
        typer.echo(f"not written: {exc}", err=True)
        return 1
    if directory is not None and (why := _directory(doc, directory)):
        typer.echo(f"not written: --directory: {why}", err=True)
        return 1
    report_differences(src.slurm, doc, report, src.slurm_name)
    for d in report.dropped:
        typer.echo(f"{d.kind} {d}", err=True)
    if strict and report.dropped:
        typer.echo(f"not written: {len(report.dropped)} line(s) the spec cannot express "
                   "(--strict)", err=True)
        return 1
    names = [str(p) for p in (slurm_conf, gres, topology, cgroup) if p]
    text = report.header(names) + yaml.safe_dump(doc, sort_keys=False, width=100)
    for name, source in report.files.items():   # the site's programs the spec names
        (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
        write_file(Path(source).read_bytes(), out.parent / name)
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
                                            "when a line cannot be expressed."),
                version: str = typer.Option(DEFAULT_SLURM, "--slurm-version",
                                            help="The Slurm release the spec is for ("
                                            + ", ".join(sorted(SLURM_SUITES)) + "): its "
                                            "keys, and what Slurm moved by then."),
                accounting: bool = typer.Option(False, "--accounting", help="Read accounts, "
                                                "users, fair share and QOS from slurmdbd "
                                                "with the local sacctmgr."),
                directory: str | None = typer.Option(None, "--directory", help="Read people "
                                                     "and groups from this LDAP server "
                                                     "(ldaps://HOST[:PORT]) into identity, "
                                                     "with source: directory."),
                users_base: str | None = typer.Option(None, "--users-base",
                                                      help="The directory's people, e.g. "
                                                      "ou=people,dc=example,dc=org."),
                groups_base: str | None = typer.Option(None, "--groups-base",
                                                       help="The directory's groups."),
                schema: str = typer.Option("rfc2307bis", "--ldap-schema",
                                           help="rfc2307 or rfc2307bis."),
                ca: Path | None = typer.Option(None, "--ca", exists=True, dir_okay=False,
                                               help="CA file that signs the server."),
                start_tls: bool = typer.Option(False, "--start-tls",
                                               help="StartTLS on an ldap:// URI."),
                bind_dn: str | None = typer.Option(None, "--bind-dn", help="Bind as this DN."),
                bind_secret: Path | None = typer.Option(None, "--bind-secret", exists=True,
                                                        dir_okay=False, help="File whose "
                                                        "first line is the bind password."),
                groups: list[str] = typer.Option([], "--directory-group", help="Only the "
                                                 "members of this group (repeatable).")) -> None:
        """Write a spec from an existing cluster's Slurm configuration: every line the
        spec cannot express is reported with its line number (and kept as a comment)."""
        source = None
        if directory:
            if not (users_base and groups_base) or schema not in ("rfc2307", "rfc2307bis"):
                typer.echo("not written: --directory needs --users-base, --groups-base and "
                           "--ldap-schema rfc2307 or rfc2307bis", err=True)
                raise typer.Exit(2)
            source = directory_source(directory, users_base, groups_base, schema, ca,
                                      start_tls, bind_dn, bind_secret, groups)
        raise typer.Exit(run(slurm_conf, gres, topology, cgroup, out, strict, version,
                             accounting, source))
