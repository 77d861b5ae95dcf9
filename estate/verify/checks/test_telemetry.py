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

import contextlib
import importlib
import ipaddress
import json
import shlex
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import urllib.parse
import urllib.request

import pytest

from estate.model.flows import admin_cidrs
from estate.model.monitoring import WATCHDOG, alertmanager_address, receiver_for
from estate.model.services import PORTS
from estate.render.monitoring import nfs_exports, route_cases, rules
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
    from estate.operate.report.logic import slurm_gpu_hours

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
    alerts = [a for g in groups for r in g["rules"] for a in r.get("alerts", [])
              if a.get("state") == "firing"]
    assert any(a["labels"]["alertname"] == WATCHDOG for a in alerts), \
        "the Watchdog does not fire: nothing outside would notice a silent Prometheus"
    why = _expected_here(ctx)
    firing = [f"{a['labels']['alertname']} {a['labels']}" for a in alerts
              if why(a["labels"]) is None]
    assert not firing, f"alerts firing on a healthy estate: {firing}"


def _lab_receivers(ctx) -> bool:
    """Every webhook of the spec's receivers is on an admin host (the lab host), where
    nothing listens but `estate verify`'s drills."""
    admin = [ipaddress.ip_network(c) for c in admin_cidrs(ctx.estate)]
    urls = [u for r in ctx.estate.spec.monitoring.alertmanager.receivers for u in r.webhooks]
    hosts = [urllib.parse.urlsplit(str(u)).hostname for u in urls]
    try:
        return bool(hosts) and all(any(ipaddress.ip_address(h) in n for n in admin)
                                   for h in hosts)
    except ValueError:   # a name, not an address: not the lab host's
        return False


def _expected_here(ctx):
    """labels -> why this alert fires on a healthy estate checked from here, or None: the
    Watchdog always; a target down whose node is not checked or whose exporter cannot run
    there (named by the target checks above); webhook notifications failing where the
    receivers are the lab host's and nothing listens there between drills."""
    excused, lab = _excused(ctx), _lab_receivers(ctx)

    def why(labels: dict) -> str | None:
        name = labels.get("alertname")
        if name == WATCHDOG:
            return "always"
        if name == "ScrapeTargetDown":
            node = labels.get("node")
            if (labels.get("job"), node) in excused:
                return "its exporter cannot run there"
            if node not in ctx.nodes:   # kube-state-metrics' target names no node
                return "its node is not among those checked"
        if name == "AlertmanagerNotificationsFailing" and lab and \
                labels.get("integration") == "webhook":
            return "the lab host's receivers listen only during the drills"
        return None
    return why


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


# --- drills: a part stops, its alert fires, reaches its receiver, and resolves -------------
#
# The lab's receivers are webhooks on the lab host's admin address (stacks/lab.yaml), where
# nothing listens but these drills: a small HTTP server in this process, bound there for the
# drill only. Its holds are short (monitoring.alerts.hold_s, queue_delay_s), so each drill
# takes a minute or three.

class _Pages(BaseHTTPRequestHandler):
    got: list[tuple[str, dict]]

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)) or 2))
        self.got.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _webhook(ctx, receiver: str) -> tuple[str, int] | None:
    """(address, port) of the receiver's first webhook, where it is this host's to bind."""
    found = next((r for r in ctx.estate.spec.monitoring.alertmanager.receivers
                  if r.name == receiver), None)
    if found is None or not found.webhooks:
        return None
    url = urllib.parse.urlsplit(str(found.webhooks[0]))
    return url.hostname, url.port or 80


@contextlib.contextmanager
def _listening(where: tuple[str, int]):
    """The pages the lab host's receivers get while the block runs."""
    handler: type[_Pages] = type("Pages", (_Pages,), {"got": []})
    try:
        server = ThreadingHTTPServer(where, handler)
    except OSError as exc:
        pytest.skip(f"cannot listen at {where[0]}:{where[1]} here ({exc}): the drill needs "
                    "the lab host, where the receivers' webhooks point")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler.got
    finally:
        server.shutdown()
        server.server_close()


def _firing(ctx, name: str, **labels: str) -> list[dict]:
    """Prometheus's firing alerts of this name whose labels include these."""
    return [a for a in _api(_prometheus(ctx), "alerts")["alerts"]
            if a["labels"].get("alertname") == name and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())]


def _paged(got: list, status: str, name: str, **labels: str) -> list[dict]:
    return [a for _, body in list(got) for a in body.get("alerts", [])
            if a["status"] == status and a["labels"].get("alertname") == name
            and all(a["labels"].get(k) == v for k, v in labels.items())]


def _drill_receiver(ctx, plane: str, tenant: str):
    receiver = receiver_for(ctx.estate, plane, tenant)
    where = _webhook(ctx, receiver)
    if where is None:
        pytest.skip(f"the {plane} plane's alerts of {tenant} go to receiver '{receiver}', "
                    "which has no webhook: nothing to listen at")
    return receiver, where


def _slurm_exporter_node(ctx) -> list[str]:
    mon = ctx.estate.spec.monitoring
    if mon is None or mon.host not in ctx.nodes:
        return []
    return [n for n in ctx.with_deploy("slurm_exporter")][:1]


@on_nodes(_slurm_exporter_node)
def test_drill_the_slurm_exporter_stops_pages_and_resolves(node, ctx):
    """Stop the Slurm exporter on a controller: ScrapeTargetDown (job slurm, its node)
    fires in Prometheus within the hold, reaches the Slurm plane's receiver through
    Alertmanager, and, once the exporter is started again, resolves in both (the receiver
    hears the resolution where it asks for it). The Watchdog reaches its own receiver
    meanwhile."""
    mon = ctx.estate.spec.monitoring
    am = mon.alertmanager
    receiver, where = _drill_receiver(ctx, "slurm", "slurm")
    want = {"job": "slurm", "node": node}
    host = ctx.host(node)
    budget = mon.alerts.hold_s + 3 * mon.scrape_interval_s + 30
    with _listening(where) as got:
        stop = host.run("systemctl stop estate-slurm-exporter")
        assert stop.rc == 0, stop.stderr.strip()
        try:
            assert _poll(lambda: _firing(ctx, "ScrapeTargetDown", **want), budget), \
                f"ScrapeTargetDown {want} never fired in Prometheus within {budget} s"
            paged = _poll(lambda: _paged(got, "firing", "ScrapeTargetDown", **want),
                          am.group_wait_s + 3 * mon.scrape_interval_s + 30)
            assert paged, (f"receiver '{receiver}' at {where[0]}:{where[1]} never got "
                           f"ScrapeTargetDown {want}: {[p for p, _ in got]}")
        finally:
            start = host.run("systemctl start estate-slurm-exporter")
        assert start.rc == 0, start.stderr.strip()
        assert _poll(lambda: not _firing(ctx, "ScrapeTargetDown", **want), budget), \
            f"ScrapeTargetDown {want} still fires after the exporter started again"
        if next(r for r in am.receivers if r.name == receiver).send_resolved:
            resolved = _poll(lambda: _paged(got, "resolved", "ScrapeTargetDown", **want),
                             am.group_interval_s + 30)
            assert resolved, f"receiver '{receiver}' never heard {want} resolve"
        if am.watchdog and _webhook(ctx, am.watchdog.receiver) == where:
            heard = _poll(lambda: _paged(got, "firing", WATCHDOG),
                          am.watchdog.repeat_interval_s + 30)
            assert heard, f"the Watchdog never reached receiver '{am.watchdog.receiver}'"


def _submitter(ctx) -> list[str]:
    mon = ctx.estate.spec.monitoring
    ok = mon is not None and mon.host in ctx.nodes and ctx.submit_node()
    return [ctx.submit_node()] if ok else []


@on_nodes(_submitter)
def test_drill_a_job_held_pending_fires_the_queue_delay(node, ctx):
    """Fill the default partition with one exclusive job and submit another behind it: it
    pends for Resources on healthy nodes, SchedulerQueueDelay fires for its account and
    partition after queue_delay_s and the hold, and reaches the tenant's receiver."""
    mon = ctx.estate.spec.monitoring
    user = ctx.job_user()
    account = next(a.name for a in ctx.estate.spec.slurm.accounts if user in a.users)
    part = next((p.name for p in ctx.estate.spec.slurm.partitions if p.default),
                ctx.estate.spec.slurm.partitions[0].name)
    receiver, where = _drill_receiver(ctx, "slurm", account)
    submit = ctx.host(node)
    count = submit.run(shlex.join(["sinfo", "-h", "-p", part, "-o", "%D"])).stdout.split()
    assert count, f"sinfo knows no partition {part}"
    wait_s = mon.alerts.queue_delay_s + mon.alerts.hold_s + 3 * mon.scrape_interval_s + 60
    minutes = wait_s // 60 + 5
    jobs: list[str] = []
    sbatch = ["runuser", "-u", user, "--", "sbatch", "--parsable", "-o", "/dev/null", "-A",
              account, "-p", part, "-t", str(minutes)]
    wrap = ["--wrap", f"sleep {minutes * 60}"]
    want = {"account": account, "partition": part}
    with _listening(where) as got:
        try:
            for argv in (("-N", count[0], "--exclusive"), ("-N", "1")):
                out = submit.run(shlex.join([*sbatch, *argv, *wrap]))
                assert out.rc == 0, f"sbatch failed: {out.stderr.strip()}"
                jobs.append(out.stdout.strip().split(";")[0])
            fired = _poll(lambda: _firing(ctx, "SchedulerQueueDelay", **want), wait_s)
            reason = submit.run(shlex.join(["squeue", "-h", "-j", jobs[-1], "-o", "%r"])
                                ).stdout.strip()
            assert fired, (f"SchedulerQueueDelay {want} never fired within {wait_s} s (job "
                           f"{jobs[-1]} pends for {reason or '?'}); what explains the "
                           "partition: " + str(_api(_prometheus(ctx), "query", query=(
                               f'slurm:nodes_unhealthy:sum{{partition="{part}"}} > 0 or '
                               f'partition:shared_filesystem_unhealthy:count'
                               f'{{partition="{part}"}}'))["result"]))
            paged = _poll(lambda: _paged(got, "firing", "SchedulerQueueDelay", **want),
                          mon.alertmanager.group_wait_s + 3 * mon.scrape_interval_s + 30)
            assert paged, f"receiver '{receiver}' never got SchedulerQueueDelay {want}"
        finally:
            if jobs:
                submit.run(shlex.join(["scancel", *jobs]))


def _nfs_server(ctx) -> list[str]:
    """A storage server among the nodes checked, where the monitoring host is checked too
    (its first one: one drill is enough)."""
    mon = ctx.estate.spec.monitoring
    if mon is None or mon.host not in ctx.nodes:
        return []
    servers = dict.fromkeys(server for _, server, _ in nfs_exports(ctx.estate))
    return [s for s in servers if s in ctx.nodes][:1]


@on_nodes(_nfs_server)
def test_drill_the_nfs_server_stops_and_the_storage_alert_pages(node, ctx):
    """Stop nfs-server on a storage server (kernel NFS: VMs or hardware, never the
    container lab): nfsd runs no thread, SharedFilesystemDown (server_down) fires for each
    of its exports and reaches the storage plane's receiver; after the restart it
    resolves."""
    storage = importlib.import_module("roles.storage.tests.test_storage")
    host = ctx.host(node)
    why = storage.unsupported_here(host, ctx, node)
    if why:
        pytest.skip(f"{UNSUPPORTED}: {why}")
    mon = ctx.estate.spec.monitoring
    receiver, where = _drill_receiver(ctx, "storage", node)
    exports = [e for e, server, _ in nfs_exports(ctx.estate) if server == node]
    budget = mon.alerts.hold_s + 3 * mon.scrape_interval_s + 30

    def down():
        found = {a["labels"].get("export")
                 for a in _firing(ctx, "SharedFilesystemDown", cause="server_down",
                                  node=node)}
        return found if found >= set(exports) else None
    with _listening(where) as got:
        stop = host.run("systemctl stop nfs-server")
        assert stop.rc == 0, stop.stderr.strip()
        try:
            assert _poll(down, budget), (f"SharedFilesystemDown server_down for {exports} "
                                         f"never fired within {budget} s")
            paged = _poll(lambda: _paged(got, "firing", "SharedFilesystemDown",
                                         cause="server_down", node=node),
                          mon.alertmanager.group_wait_s + 3 * mon.scrape_interval_s + 30)
            assert paged, f"receiver '{receiver}' never got SharedFilesystemDown for {node}"
        finally:
            start = host.run("systemctl start nfs-server")
        assert start.rc == 0, start.stderr.strip()
        assert _poll(lambda: not _firing(ctx, "SharedFilesystemDown", node=node), budget), \
            f"SharedFilesystemDown for {node} still fires after nfs-server started again"
