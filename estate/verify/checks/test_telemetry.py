"""Telemetry checks, through the monitoring host's Prometheus and Alertmanager (from here:
an admin host, which the `prometheus` and `alertmanager` flows admit): every scrape target
of the nodes checked is up, a running Slurm job shows in the Slurm metrics under its
account and partition, Prometheus runs the rendered rules on the live series (each evaluated
without error, no alert firing on a healthy estate), sends its alerts to the Alertmanager, and
that Alertmanager routes each alert to the receiver the spec names. Targets of nodes not checked
(the container lab runs no Kubernetes node), and those whose exporter's role cannot run on
the node (the lab's GPU workers have no NVIDIA driver for the DCGM exporter), are named
with the reason, not failed."""
from __future__ import annotations

import importlib
import json
import shlex
import time
from datetime import datetime, timedelta, timezone
import urllib.parse
import urllib.request

import pytest

from estate.model.monitoring import alertmanager_address
from estate.model.services import PORTS
from estate.render.monitoring import route_cases, rules
from estate.verify.plugin import UNSUPPORTED, on_nodes

ROLE = "cluster"


def _prometheus(ctx) -> str | None:
    mon = ctx.estate.spec.monitoring
    if mon is None or mon.host not in ctx.nodes:
        return None
    return f"http://{ctx.estate.address(mon.host, mon.segment)}:{PORTS['prometheus']}"


def _get(url: str) -> bytes:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(url, timeout=10) as resp:
        return resp.read()


def _api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    return json.loads(_get(url))["data"]


def _poll(what, timeout: float):
    end = time.monotonic() + timeout
    while True:
        got = what()
        if got or time.monotonic() > end:
            return got
        time.sleep(1)


def _monitoring_host(ctx) -> list[str]:
    mon = ctx.estate.spec.monitoring
    return [mon.host] if mon and mon.host in ctx.nodes else []


# The scrape jobs whose exporter a role runs, where that role's suite may say a node
# cannot have it (roles/<role>/tests: unsupported_here, as apply and the file checks read).
EXPORTER_ROLES = {"dcgm": "dcgm_exporter"}
_EXCUSED: dict[int, dict[tuple[str, str], str]] = {}


def _excused(ctx) -> dict[tuple[str, str], str]:
    """(job, node) -> why that target cannot be up here, asked once per run: the exporter's
    role is unsupported on the node checked."""
    if id(ctx) not in _EXCUSED:
        out = {}
        for job, role in EXPORTER_ROLES.items():
            suite = importlib.import_module(f"roles.{role}.tests.test_{role}")
            for name in ctx.with_deploy(role):
                why = suite.unsupported_here(ctx.host(name), ctx, name)
                if why:
                    out[(job, name)] = why
        _EXCUSED[id(ctx)] = out
    return _EXCUSED[id(ctx)]


def _key(target: dict) -> tuple[str | None, str | None]:
    return target["labels"].get("job"), target["labels"].get("node")


@on_nodes(_monitoring_host)
def test_every_scrape_target_of_the_nodes_checked_is_up(node, ctx):
    base = _prometheus(ctx)
    interval = ctx.estate.spec.monitoring.scrape_interval_s
    excused = _excused(ctx)

    def checked(t: dict) -> bool:
        return t["labels"].get("node") in ctx.nodes and _key(t) not in excused

    def targets():
        active = _api(base, "targets", state="active")["activeTargets"]
        mine = [t for t in active if checked(t)]
        return active if mine and all(t["health"] == "up" for t in mine) else None
    active = _poll(targets, 3 * interval + 10) or _api(base, "targets")["activeTargets"]
    down = [f"{t['labels'].get('job')}/{t['labels'].get('node')}: {t['lastError']}"
            for t in active if checked(t) and t["health"] != "up"]
    assert not down, f"targets down: {down}"
    assert any(checked(t) for t in active), "no target of these nodes"


@on_nodes(_monitoring_host)
def test_the_targets_whose_exporter_cannot_run_here(node, ctx):
    """Scraped (Prometheus has each as a target) but named, not failed: the exporter's
    role is unsupported on its node, for the reason its suite gives."""
    excused = _excused(ctx)
    if not excused:
        return
    active = {_key(t) for t in _api(_prometheus(ctx), "targets", state="active")["activeTargets"]}
    assert set(excused) <= active, f"not scrape targets: {sorted(set(excused) - active)}"
    pytest.skip(f"{UNSUPPORTED}: " + "; ".join(f"{job}/{name}: {why}" for (job, name), why
                                                in sorted(excused.items())))


@on_nodes(_monitoring_host)
def test_the_targets_of_nodes_not_checked(node, ctx):
    """Named, not failed: a node outside the check (or outside a lab) cannot be up here."""
    active = _api(_prometheus(ctx), "targets", state="active")["activeTargets"]
    elsewhere = sorted({t["labels"].get("node") or t["scrapeUrl"] for t in active
                        if t["labels"].get("node") not in ctx.nodes})
    if elsewhere:
        pytest.skip(f"unsupported here: {', '.join(elsewhere)} are not among the nodes checked "
                    "(the container lab runs the Slurm and storage nodes only)")


@on_nodes(_monitoring_host)
def test_a_running_job_shows_under_its_account_and_partition_then_in_the_report(node, ctx):
    """A GPU job (where the partition has GPUs) shows in slurm_jobs and slurm_gpus_allocated
    under its account and partition while it runs; once it ends, `estate report`'s Slurm
    plane charges the account its GPU-hours."""
    if not ctx.submit_node():
        pytest.skip("no login node or controller among the nodes checked")
    base, user = _prometheus(ctx), ctx.job_user()
    account = next(a.name for a in ctx.estate.spec.slurm.accounts if user in a.users)
    part = next((p.name for p in ctx.estate.spec.slurm.partitions if p.default),
                ctx.estate.spec.slurm.partitions[0].name)
    gres = "--gres=gpu:1" if ctx.gpu_nodes() else ""
    submit = ctx.host(ctx.submit_node())
    started = datetime.now(timezone.utc) - timedelta(seconds=1)
    out = submit.run(f"runuser -u {shlex.quote(user)} -- sbatch --parsable -o /dev/null "
                     f"-A {shlex.quote(account)} -p {shlex.quote(part)} {gres} -t 2 "
                     "--wrap 'sleep 90'")
    assert out.rc == 0, f"sbatch failed: {out.stderr.strip()}"
    job = out.stdout.strip().split(";")[0]
    # this job running, by its own id: a series of an earlier job must not stand in for it
    # (a job cancelled in the second it started has used no GPU-hours to charge)
    state = _poll(lambda: submit.run(f"squeue -h -j {shlex.quote(job)} -o %T").stdout.strip()
                  == "RUNNING", 60)
    assert state, f"job {job} never started"
    began = time.monotonic()
    where = f'account="{account}",partition="{part}"'
    query = (f'slurm_jobs{{state="running",{where}}} and on(account, partition) '
             f'slurm_gpus_allocated{{{where}}} >= {1 if gres else 0}')
    try:
        got = _poll(lambda: _api(base, "query", query=query)["result"],
                    4 * ctx.estate.spec.monitoring.scrape_interval_s + 20)
        assert got, f"Prometheus never showed job {job} running ({query})"
        time.sleep(max(0.0, 5 - (time.monotonic() - began)))   # GPU-seconds to charge
    finally:
        submit.run(f"scancel {shlex.quote(job)}")
    if gres:
        _charged(ctx, submit, account, started)


def _charged(ctx, submit, account: str, started) -> None:
    from estate.report import slurm_gpu_hours

    def run(argv):
        return submit.run(shlex.join(argv)).stdout
    hours = _poll(lambda: slurm_gpu_hours(run, started, datetime.now(timezone.utc))
                  .get(account), 30)
    assert hours and hours > 0, f"estate report charged {account} no GPU-hours for the job"


# --- Alertmanager --------------------------------------------------------------------------

def _rule_name(rule: dict) -> str:
    """A rendered rule's name, or a loaded one's (the API calls both kinds' `name`)."""
    return rule.get("alert") or rule.get("record") or rule["name"]


@on_nodes(_monitoring_host)
def test_the_rendered_rules_run_on_the_live_series_and_no_alert_fires(node, ctx):
    """Prometheus has loaded every rendered group with its rules in order, has evaluated
    each at least once without an error (an expression over a label or series the exporters
    do not give fails here, not in the week a queue backs up), and no alert fires: the
    estate is healthy, so one firing would be a false alarm. (Each alert firing for its own
    cause and no other is proven by `promtool test rules`: the alerts hold for minutes.)"""
    base = _prometheus(ctx)
    want = {g["name"]: [_rule_name(r) for r in g["rules"]] for g in rules(ctx.estate)["groups"]}

    def evaluated():
        groups = _api(base, "rules")["groups"]
        done = all(r.get("lastEvaluation", "").split("T")[0] > "0001-01-01"
                   for g in groups for r in g["rules"])
        return groups if done and {g["name"] for g in groups} >= set(want) else None
    interval = ctx.estate.spec.monitoring.scrape_interval_s
    groups = _poll(evaluated, 3 * interval + 10) or _api(base, "rules")["groups"]
    loaded = {g["name"]: [_rule_name(r) for r in g["rules"]] for g in groups}
    assert loaded == want, f"Prometheus runs {loaded}, the rendered rules are {want}"
    unhealthy = [f"{g['name']}/{_rule_name(r)}: {r.get('health')} {r.get('lastError', '')}"
                 for g in groups for r in g["rules"] if r.get("health") != "ok"]
    assert not unhealthy, f"rules that do not evaluate: {unhealthy}"
    firing = [f"{_rule_name(r)} {a['labels']}" for g in groups for r in g["rules"]
              for a in r.get("alerts", []) if a.get("state") == "firing"]
    assert not firing, f"alerts firing on a healthy estate: {firing}"


def _alertmanager(ctx) -> str:
    addr = alertmanager_address(ctx.estate)
    assert addr, "the monitoring host has no address at the alertmanager flow"
    return f"http://{addr}"


def _ready(base: str) -> bool:
    try:
        return _get(f"{base}/-/ready").strip() == b"OK"
    except OSError:
        return False


@on_nodes(_monitoring_host)
def test_alertmanager_is_ready_and_prometheus_sends_it_the_alerts(node, ctx):
    """Alertmanager answers on its flow's address as one instance (no gossip), and
    Prometheus lists it among its active Alertmanagers (its v2 alerts endpoint)."""
    am = _alertmanager(ctx)
    assert _poll(lambda: _ready(am), 30), f"Alertmanager at {am} is not ready"
    status = json.loads(_get(f"{am}/api/v2/status"))
    assert status["cluster"]["status"] == "disabled", status["cluster"]
    want = f"{am}/api/v2/alerts"

    def active():
        found = _api(_prometheus(ctx), "alertmanagers")["activeAlertmanagers"]
        return found if any(a["url"] == want for a in found) else None
    found = _poll(active, 3 * ctx.estate.spec.monitoring.scrape_interval_s + 10)
    assert found, (f"Prometheus does not send its alerts to {want}: "
                   f"{_api(_prometheus(ctx), 'alertmanagers')}")


@on_nodes(_monitoring_host)
def test_alertmanager_routes_each_alert_to_the_specs_receiver(node, ctx):
    """The running Alertmanager's own routing (amtool on the monitoring host, reading the
    configuration the daemon loaded over its API): each alert rule's labels, for each
    tenant a route names and one none names, reach the receiver the spec says. Nothing is
    sent: a route test notifies no one."""
    am, cases = _alertmanager(ctx), route_cases(ctx.estate)
    mark = "--- estate route case ---"
    # one round trip: each case's argv quoted, the whole script one quoted argument of sh
    script = f" && echo {shlex.quote(mark)} && ".join(
        shlex.join(["amtool", "config", "routes", "test", f"--alertmanager.url={am}",
                    *(f"{k}={v}" for k, v in labels.items())]) for labels, _ in cases)
    out = ctx.host(node).run(shlex.join(["sh", "-c", script]))
    assert out.rc == 0, out.stderr.strip()
    answers = [a.strip() for a in out.stdout.split(mark)]
    wrong = [f"{labels['alertname']} {{plane={labels['plane']}, tenant={labels['tenant']}}}"
             f" -> {got!r}, the spec says {want!r}"
             for (labels, want), got in zip(cases, answers) if got != want]
    assert len(answers) == len(cases) and not wrong, wrong or out.stdout
