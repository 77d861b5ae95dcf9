"""`estate rotate SPEC SECRET`: the command; the plan and its steps are
estate.operate.rotate.logic's."""
from __future__ import annotations

from pathlib import Path

from estate.operate.rotate.logic import (PREVIOUS, SECRETS, Refused, SshRunner, carry_out,
                                         new_secret, plan)


def register(app) -> None:
    import typer

    from estate.output import (lab_option, ssh_key_option, ssh_user_option,
                               strict_host_keys_option)

    @app.command()
    def rotate(spec: Path = typer.Argument(..., help="Path to the estate spec."),
               secret: str = typer.Argument(..., help=f"One of {', '.join(SECRETS)}."),
               secrets: Path = typer.Option(None, "--secrets", help="The secrets directory "
                                            "(the labs': .lab/secrets). The new key is "
                                            "written there, the old kept as *.previous."),
               dry_run: bool = typer.Option(False, "--dry-run", help="Print the steps only."),
               netns: bool = typer.Option(False, "--netns", help="On the running namespace "
                                          "lab (estate lab netns up SPEC) instead of nodes."),
               lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
               ssh_user: str = ssh_user_option(),
               strict_host_keys: bool = strict_host_keys_option()):
        """Rotate a secret: a new key, taken to exactly its holders in an order that loses no
        running job (docs/rotation.md). The cluster CA is refused, with what to do."""
        import tempfile

        from estate.doctor import ssh_config
        from estate.provision.cli import _connection, _fail, _rendered
        from estate.provision.inventory import targets
        from estate.provision.secrets import LAB_SECRETS
        result = _rendered(spec)
        try:
            steps = plan(result.estate, result.artifacts, secret)
        except Refused as exc:
            _fail(str(exc))
        for step in steps:
            typer.echo(f"  {step.line()}")
        if dry_run:
            return
        if netns:
            from estate.lab.netns import Lab
            from estate.lab.netns_rotate import NetnsRunner, secrets_dir
            running = Lab(spec)
            d = secrets_dir(running, secret)
            new_secret(d, secret)
            carry_out(running.estate, steps, d, NetnsRunner(running), typer.echo)
            typer.echo(f"rotated {secret} on the namespace lab")
            return
        secrets = secrets or (LAB_SECRETS if lab else None)
        if secrets is None or not Path(secrets).is_dir():
            _fail("--secrets DIR: the directory that holds the estate's keys")
        new_secret(Path(secrets), secret)
        conn = _connection(lab, ssh_key, ssh_user, strict_host_keys and not lab)
        with tempfile.TemporaryDirectory(prefix="estate-rotate-") as tmp:
            nodes = targets(result.estate, result.artifacts.manifest())
            config = ssh_config(nodes, conn, Path(tmp) / "ssh_config")
            try:
                carry_out(result.estate, steps, Path(secrets),
                          SshRunner(config, Path(secrets), result.estate), typer.echo)
            except RuntimeError as exc:
                _fail(f"{exc}; the new key is in {secrets}, the old one beside it as "
                      f"*{PREVIOUS}: run estate rotate again once the node is back")
        typer.echo(f"rotated {secret} on {len({n for s in steps for n in s.nodes})} nodes")
