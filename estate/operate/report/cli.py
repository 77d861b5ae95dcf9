"""`estate report`: the command, and the runners that reach the two planes' sources.

Slurm accounting is read with sacct on the first controller over ssh, as `estate verify`
reaches nodes (the management address, estate.provision.inventory.connection: --lab is
the lab's key as root without host-key checks); Prometheus is asked over HTTP at the
monitoring host's address and port of the flow matrix's `prometheus` flow. The
arithmetic is estate.operate.report.logic's.
"""
from __future__ import annotations

import json
import shlex
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Callable

import typer

from estate.model.entitlement import entitled_gpus
from estate.output import (
    Output, lab_option, output_option, ssh_key_option, ssh_user_option, strict_host_keys_option)
from estate.operate.report.logic import (PER, UTC, UsageReport, SourceError, Unreachable, bucket_edges,
                           default_per, kubernetes_usage, measure, parse_when,
                           render_json, render_svg, render_table, skip, slurm_usage,
                           step_seconds)

SSH_TIMEOUT_S = 120
HTTP_TIMEOUT_S = 30


def ssh_runner(address: str, conn) -> Callable[[list[str]], str]:
    """argv -> stdout on a node over ssh; each word shell-quoted, so no value is ever
    read as shell syntax there."""
    base = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-l", conn.user]
    if conn.key:
        base += ["-i", conn.key, "-o", "IdentitiesOnly=yes"]
    if not conn.strict_host_keys:
        base += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                 "-o", "LogLevel=ERROR"]

    def run(argv: list[str]) -> str:
        try:
            proc = subprocess.run([*base, "--", address, shlex.join(argv)], text=True,
                                  capture_output=True, timeout=SSH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Unreachable(f"no answer within {SSH_TIMEOUT_S} s") from None
        detail = (proc.stderr.strip().splitlines() or [""])[-1]
        if proc.returncode == 255:   # ssh's own failure; sacct never exits 255
            raise Unreachable(detail if detail.startswith("ssh:") else
                              f"ssh: {detail or 'exited 255'}")
        if proc.returncode:
            raise SourceError(f"exited {proc.returncode}: {detail}")
        return proc.stdout
    return run


def prometheus_query(url: str) -> Callable[[str], dict]:
    """PromQL -> Prometheus' JSON answer (/api/v1/query). Straight to the estate's
    network: a proxy from the environment is not used."""
    from urllib.error import HTTPError
    from urllib.parse import urlencode
    from urllib.request import ProxyHandler, build_opener
    opener = build_opener(ProxyHandler({}))

    def query(promql: str) -> dict:
        target = f"{url.rstrip('/')}/api/v1/query?{urlencode({'query': promql})}"
        try:
            with opener.open(target, timeout=HTTP_TIMEOUT_S) as resp:
                return json.load(resp)
        except HTTPError as exc:   # 400/422/503 carry Prometheus' error document
            try:
                return json.loads(exc.read())
            except ValueError:
                raise SourceError(f"HTTP {exc.code} {exc.reason}") from None
    return query


def prometheus_url(estate) -> str | None:
    """http://ADDRESS:PORT of Prometheus as the matrix admits the admins to it."""
    from estate.model.flows import flow
    mon, f = estate.spec.monitoring, flow(estate, "prometheus")
    addr = estate.address(mon.host, f.segment) if mon and f else None
    return f"http://{addr}:{f.ports[0]}" if addr else None


def slurm_source(estate) -> tuple[str, str] | str:
    """(node, address) to run sacct on, or why there is none."""
    from estate.provision.inventory import management_segment
    slurm = estate.spec.slurm
    if not slurm.accounting:
        return "the spec has no Slurm accounting (slurm.accounting): no sacct to read"
    node = slurm.controllers[0]
    addr = estate.address(node, management_segment(estate))
    return node, str(addr or node)


def collect(estate, start: datetime, end: datetime,
            runner: Callable[[str], Callable[[list[str]], str]],
            query: Callable[[str], Callable[[str], dict]],
            prometheus: str | None = None, per: str | None = None) -> UsageReport:
    """Ask each plane's source (runner(address), query(url)); a source that is absent
    or does not answer becomes a note. GPU-hours are counted over the period and per
    hour or day (`per`; by default as default_per chooses), beside what the spec entitles
    each tenant to."""
    per = per or default_per(start, end)
    report = UsageReport(start, end, per=per, edges=bucket_edges(start, end, per),
                    limits=entitled_gpus(estate))
    _ask_slurm(report, estate, runner)
    _ask_kubernetes(report, estate, query, prometheus)
    return report


def _ask_slurm(report: UsageReport, estate, runner) -> None:
    where = slurm_source(estate)
    if isinstance(where, str):
        skip(report, "slurm", where)
        return
    run = runner(where[1])
    measure(report, "slurm", "controller", f"{where[0]} ({where[1]})",
            lambda: slurm_usage(run, report.edges))


def _ask_kubernetes(report: UsageReport, estate, query, prometheus: str | None) -> None:
    if not estate.spec.kubernetes:
        skip(report, "kubernetes", "the spec has no Kubernetes plane")
        return
    url = prometheus or prometheus_url(estate)
    if not url:
        skip(report, "kubernetes", "the spec has no monitoring host: no Prometheus to ask "
             "(or pass --prometheus URL)")
        return
    mon = estate.spec.monitoring
    # the rule is evaluated every scrape interval: one point a step stands for the step
    step = step_seconds(report.start, report.end, mon.scrape_interval_s if mon else 30)
    ask = query(url)
    measure(report, "kubernetes", "Prometheus", url,
            lambda: kubernetes_usage(ask, report.edges, step))


def _write(text: str, path: Path, what: str) -> None:
    """Atomically, as estate plan --svg does: on failure the old file stays."""
    from estate.commands import err_console
    from estate.render.artifacts import write_file
    try:
        write_file(text.encode(), path)
    except OSError as exc:
        err_console.print(f"[red]not written[/red]: cannot write {what} {path}: "
                          f"{exc.strerror or exc}")
        raise typer.Exit(1)


def _period(since: str, until: str, per: str | None) -> tuple[datetime, datetime, str]:
    now = datetime.now(UTC)
    try:
        start, end = parse_when(since, now), parse_when(until, now)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if start >= end:
        raise typer.BadParameter(f"--since {since} is not before --until {until}")
    if per is not None and per not in PER:
        raise typer.BadParameter(f"--per {per}: one of {', '.join(PER)}")
    per = per or default_per(start, end)
    try:
        bucket_edges(start, end, per)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return start, end, per


def register(app: typer.Typer) -> None:
    @app.command()
    def report(spec: Path = typer.Argument(..., help="Path to the estate spec."),
               since: str = typer.Option("7d", "--since", help="Start of the period: a "
                                         "duration before now (12h, 7d, 2w) or an ISO date "
                                         "or time (UTC unless it says otherwise)."),
               until: str = typer.Option("now", "--until", help="End of the period, in the "
                                         "same forms."),
               json_file: Path = typer.Option(None, "--json", metavar="FILE",
                                              help="Also write the report as JSON."),
               svg: Path = typer.Option(None, "--svg", metavar="FILE",
                                        help="Also draw the report (SVG): GPU-hours per "
                                        "tenant over time, against its quota or fair "
                                        "share."),
               per: str = typer.Option(None, "--per", metavar="hour|day",
                                       help="Bucket of the SVG's and JSON's series "
                                       "(default: hour up to two days, else day)."),
               lab: bool = lab_option(), ssh_key: str = ssh_key_option(),
               ssh_user: str = ssh_user_option(),
               strict_host_keys: bool = strict_host_keys_option(),
               prometheus: str = typer.Option(None, "--prometheus", metavar="URL",
                                              help="Prometheus' URL (default: the "
                                              "monitoring host's, from the flow matrix)."),
               output: Output = output_option()) -> None:
        """GPU-hours per tenant on both planes over a period: Slurm accounts from sacct
        on the controller, Kubernetes namespaces from Prometheus. Exit 1 only when no
        source answered."""
        from estate.commands import print_findings
        from estate.pipeline import build
        from estate.provision.inventory import connection
        start, end, per = _period(since, until, per)
        result = build(spec, render=False)
        if result.estate is None or any(f.severity.value == "error" for f in result.findings):
            print_findings(result.findings, output, spec)
            raise typer.Exit(1)
        conn = connection(lab, ssh_key, ssh_user, strict_host_keys and not lab)
        found = collect(result.estate, start, end, lambda addr: ssh_runner(addr, conn),
                        prometheus_query, prometheus, per)
        show(found, output, json_file, svg)
        raise typer.Exit(0 if found.answered else 1)


def show(found: UsageReport, output: Output, json_file: Path | None, svg: Path | None) -> None:
    if json_file:
        _write(render_json(found), json_file, "JSON")
    if svg:
        _write(render_svg(found), svg, "SVG")
    if output is Output.json:
        typer.echo(render_json(found), nl=False)
    else:
        render_table(found, output)
