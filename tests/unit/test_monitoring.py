"""Telemetry: the rendered Prometheus and Alertmanager configurations and the rules, proven
with promtool and amtool.

promtool (Debian's prometheus package) checks the configuration and the rules, and runs
the rules on input series: each alert fires for its own cause and stays quiet for the
others' and for look-alikes (a queue that waits on drained nodes, a container that is
only being created, a mount that is merely busy). Every scrape target is a flow of the
matrix that only the monitoring host reaches. amtool (Debian's prometheus-alertmanager)
checks alertmanager.yml and runs Alertmanager's own routing on each alert's labels, as
the rules emit them: each reaches the receiver the spec names.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from estate.catalogue import HOST_TOOLS
from estate.model import certificates
from estate.model import monitoring as mon
from estate.model.destinations import destination
from estate.model.flows import admin_cidrs, matrix
from estate.model.services import PORTS
from estate.pipeline import build
from estate.provision.inventory import targets as deploy_targets
from estate.render import monitoring as render
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, spec_dict

STACKS = ("lab", "example-prod")


@pytest.fixture(scope="module")
def promtool() -> str:
    """Installed by make test (scripts/install-deps.sh, catalogue HOST_TOOLS): missing is a
    broken machine, not a reason to skip."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/install-deps.sh (make test does "
                    f"it), which installs Debian's {', '.join(HOST_TOOLS['telemetry'])}")
    return path


@pytest.fixture(scope="module")
def amtool() -> str:
    """Installed like promtool (HOST_TOOLS): missing is a broken machine."""
    path = shutil.which("amtool")
    if path is None:
        pytest.fail("amtool is not installed: run scripts/install-deps.sh (make test does "
                    f"it), which installs Debian's {', '.join(HOST_TOOLS['telemetry'])}")
    return path


@pytest.fixture(scope="module", params=STACKS)
def built(request):
    result = build(ROOT / "stacks" / f"{request.param}.yaml")
    assert result.ok, [f.message for f in result.blocking]
    return result


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks" / "lab.yaml")
    assert result.ok
    return result


def _tree(artifacts, tmp: Path) -> Path:
    """The rendered monitoring files in their tree layout; the directory of prometheus.yml."""
    for path, art in artifacts.items():
        if path.startswith("monitoring/"):
            (tmp / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).write_bytes(art.content)
    return tmp / Path(render.CONFIG).parent


def _run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def _doc(artifacts, path: str) -> dict:
    return yaml.safe_load(artifacts[path].content)


# --- promtool: the files are valid --------------------------------------------------------

def test_promtool_accepts_the_config_with_its_rule_files(built, promtool, tmp_path):
    where = _tree(built.artifacts, tmp_path)
    proc = _run(promtool, "check", "config", "prometheus.yml", cwd=where)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rule files found" in proc.stdout   # rules/estate.yml, resolved beside it


def test_promtool_accepts_the_rules_with_every_lint(built, promtool, tmp_path):
    where = _tree(built.artifacts, tmp_path)
    proc = _run(promtool, "check", "rules", "--lint=all", "--lint-fatal", render.RULES_REF,
                cwd=where)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_refuses_a_broken_rule(lab, promtool, tmp_path):
    """The check can fail: a rule promtool must refuse."""
    where = _tree(lab.artifacts, tmp_path)
    rules = _doc(lab.artifacts, render.RULES)
    rules["groups"][0]["rules"][0]["expr"] = "max by (partition (slurm_jobs)"
    (where / render.RULES_REF).write_text(yaml.safe_dump(rules))
    assert _run(promtool, "check", "rules", render.RULES_REF, cwd=where).returncode != 0


# --- promtool: each alert fires for its own cause ---------------------------------------

STEPS = 90   # minutes of input series


def _series(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _flat(value: float) -> str:
    return f"{value:g}x{STEPS}"


def _rising(step: float) -> str:
    return f"0+{step:g}x{STEPS}"


EXPORTERS = ("ctl1", "ctl2")


def _slurm(pending_step: float, down: int, read: bool = True) -> list[dict]:
    """Both exporters of an HA pair report the same cluster: a job of research waits for
    Resources, one of ops on a Dependency (never the scheduler's fault); gpu1 and gpu2 are
    in partitions gpu and urgent, login1 in none. Where the exporters cannot read Slurm,
    each says slurm_up 0 and gives no other series."""
    out = []
    for exporter in EXPORTERS:
        out.append(_series("slurm_up", _flat(int(read)), node=exporter))
        if not read:
            continue
        out += [_series("slurm_job_pending_seconds_max", _rising(pending_step), node=exporter,
                        reason="Resources", partition="gpu", account="research"),
                _series("slurm_job_pending_seconds_max", _rising(60), node=exporter,
                        reason="Dependency", partition="gpu", account="ops"),
                _series("slurm_nodes", _flat(2 - down), node=exporter, state="idle",
                        partition="gpu"),
                _series("slurm_nodes", _flat(down), node=exporter, state="drained",
                        partition="gpu"),
                _series("slurm_nodes", _flat(0), node=exporter, state="down", partition="gpu"),
                _series("slurm_gpus_allocated", _flat(4), node=exporter, partition="gpu",
                        account="research"),
                _series("slurm_gpus_allocated", _flat(2), node=exporter, partition="urgent",
                        account="research")]
        out += [_series("slurm_node_partition", _flat(1), node=exporter, nodename=n,
                        partition=p) for n in ("gpu1", "gpu2") for p in ("gpu", "urgent")]
    return out


def _certificate_labels(node: str, plane: str, name: str) -> dict:
    cert = certificates.BY_NAME[name]
    return {"node": node, "plane": plane, "certificate": name, "path": cert.paths[0]
            if cert.paths else "/etc/estate/bridge/inference.kubeconfig", "renew": cert.renew}


def _certificate(node: str, plane: str, name: str, days: float) -> dict:
    """The collector's series: the notAfter as Unix time, `days` after the test's start."""
    return _series(certificates.METRIC, _flat(days * 86400),
                   **_certificate_labels(node, plane, name))


def _up(job: str, node: str, plane: str, up: bool = True) -> dict:
    return _series("up", _flat(int(up)), job=job, node=node, plane=plane,
                   instance=f"{node}:{JOB_PORTS[job]}")


JOB_PORTS = {"node": 9100, "slurm": 9341, "prometheus": 9090, "alertmanager": 9093}


def _targets(server: str, down: tuple[tuple[str, str], ...] = ()) -> list[dict]:
    """The scrape targets' up series (those in `down` at 0): the nodes' exporters, the
    Slurm exporters, Prometheus and Alertmanager themselves."""
    nodes = {"gpu1": "slurm", "gpu2": "slurm", "login1": "slurm", "ctl1": "slurm",
             server: "shared"}
    out = [_up("node", n, plane, ("node", n) not in down) for n, plane in nodes.items()]
    out += [_up("slurm", n, "slurm", ("slurm", n) not in down) for n in EXPORTERS]
    return out + [_up(job, "ctl1", "monitoring") for job in ("prometheus", "alertmanager")]


def _monitoring(rule_failures: bool = False, notify_failures: bool = False) -> list[dict]:
    return [_series("prometheus_rule_evaluation_failures_total",
                    _rising(3) if rule_failures else _flat(0), rule_group="estate-slurm"),
            _series("prometheus_rule_evaluation_failures_total", _flat(0),
                    rule_group="estate-storage"),
            _series("alertmanager_notifications_failed_total",
                    _rising(2) if notify_failures else _flat(0), integration="webhook"),
            _series("alertmanager_notifications_failed_total", _flat(0), integration="email")]


def _kubernetes(failing: bool = False, waiting: bool = False) -> list[dict]:
    """Deployment llm (ReplicaSet llm-7f9) and its pod llm-0 asking a GPU, and an older pod
    that has finished; a container that is being created waits too, but not for a failure.
    Where it fails, llm-0's container is in ImagePullBackOff; where it waits for capacity,
    llm-0 is Pending and not scheduled (no GPU free, or Kueue holds it for quota), and so
    is web-0, which asks no GPU and belongs to no Deployment."""
    ns = {"namespace": "inference"}
    running = not waiting
    return [
        _series(mon.KSM_UNAVAILABLE, _flat(int(failing or waiting)), deployment="llm", **ns),
        _series(mon.KSM_WAITING, _flat(int(failing)), pod="llm-0", container="server",
                reason="ImagePullBackOff", **ns),
        _series(mon.KSM_WAITING, _flat(0), pod="llm-0", container="server",
                reason="CrashLoopBackOff", **ns),
        _series(mon.KSM_WAITING, _flat(1), pod="llm-1", container="server",
                reason="ContainerCreating", **ns),
        _series(mon.KSM_REQUESTS, _flat(1), pod="llm-0", container="server",
                resource=mon.GPU_REQUEST, unit="integer", **ns),
        _series(mon.KSM_REQUESTS, _flat(1), pod="llm-old", container="server",
                resource=mon.GPU_REQUEST, unit="integer", **ns),
        _series(mon.KSM_REQUESTS, _flat(0.5), pod="web-0", container="web",
                resource="cpu", unit="core", **ns),
        _series(mon.KSM_PHASE, _flat(int(running)), pod="llm-0", phase="Running", **ns),
        _series(mon.KSM_PHASE, _flat(int(waiting)), pod="llm-0", phase="Pending", **ns),
        _series(mon.KSM_SCHEDULED, _flat(int(running)), pod="llm-0", condition="true", **ns),
        _series(mon.KSM_SCHEDULED, _flat(int(waiting)), pod="llm-0", condition="false", **ns),
        _series(mon.KSM_PHASE, _flat(int(running)), pod="web-0", phase="Running", **ns),
        _series(mon.KSM_PHASE, _flat(int(waiting)), pod="web-0", phase="Pending", **ns),
        _series(mon.KSM_SCHEDULED, _flat(int(waiting)), pod="web-0", condition="false", **ns),
        _series(mon.KSM_POD_OWNER, _flat(1), pod="llm-0", owner_kind="ReplicaSet",
                owner_name="llm-7f9", owner_is_controller="true", **ns),
        _series(mon.KSM_RS_OWNER, _flat(1), replicaset="llm-7f9", owner_kind="Deployment",
                owner_name="llm", owner_is_controller="true", **ns),
        _series(mon.KSM_PHASE, _flat(0), pod="llm-old", phase="Running", **ns),
        _series(mon.KSM_PHASE, _flat(1), pod="llm-old", phase="Succeeded", **ns),
    ]


def _mount(export: str, node: str, retransmit: float, latency_s: float,
           answered: bool = True, sent: bool = True) -> list[dict]:
    """A busy mount (100 RPCs a minute). Unanswered: its operations stop completing (their
    counters stay flat) while, if sent, the transport keeps sending (retransmitting)."""
    server = export.split(":")[0]
    mount = {"node": node, "export": export, "mountaddr": server, "protocol": "tcp"}
    labels = {**mount, "operation": "READ"}
    requests = 100.0   # per minute

    def counter(step: float, moving: bool) -> str:
        return _rising(step) if moving else _flat(1000)
    return [_series(mon.NFS_REQUESTS, counter(requests, answered), **labels),
            _series(mon.NFS_TRANSMISSIONS, counter(requests * (1 + retransmit), answered),
                    **labels),
            _series(mon.NFS_REQUEST_TIME, counter(requests * latency_s, answered), **labels),
            _series(mon.NFS_SENDS, counter(requests * (1 + retransmit), sent), **mount),
            _series(mon.NFS_AGE, _rising(60), **mount)]


def _storage(estate: Estate, degraded: tuple[str, ...] = (), slow: tuple[str, ...] = (),
             stalled: tuple[str, ...] = (), dead: bool = False, threads: int = 8
             ) -> list[dict]:
    """Every node's mount of the first export busy; a node in `degraded` retransmits, one
    in `slow` waits, each five times its threshold (the others stay at a fifth of both);
    one in `stalled` sends and gets no answer. A dead server: its node exporter is down
    (no nfsd series), and no client's RPC completes or is sent (the counters stay flat)."""
    alerts = estate.spec.monitoring.alerts
    export, server, _ = render.nfs_exports(estate)[0]
    bad_ratio, bad_latency = alerts.nfs_retransmit_ratio * 5, alerts.nfs_latency_ms / 200
    fine_ratio, fine_latency = alerts.nfs_retransmit_ratio / 5, alerts.nfs_latency_ms / 5000
    out = [] if dead else [_series(mon.NFSD_THREADS, _flat(threads), job="node", node=server)]
    for node in ("gpu1", "login1", "gpu2"):
        out += _mount(export, node, bad_ratio if node in degraded else fine_ratio,
                      bad_latency if node in slow else fine_latency,
                      answered=not dead and node not in stalled, sent=not dead)
    return out


def _rule(rules: dict, alert: str, cause: str) -> dict:
    return next(r for g in rules["groups"] for r in g["rules"]
                if r.get("alert") == alert and r["labels"]["cause"] == cause)


def _expand(template: str, labels: dict) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _expected(rules: dict, alert: str, cause: str, **labels: str) -> dict:
    """The alert as Prometheus sends it: the series' labels, the rule's (templates
    expanded) and its annotations."""
    rule = _rule(rules, alert, cause)
    own = {k: _expand(v, labels) for k, v in rule["labels"].items()}
    return {"exp_labels": {**labels, **own},
            "exp_annotations": {k: _expand(v, labels)
                                for k, v in rule["annotations"].items()}}


def _checks(rules: dict, at: str, firing: dict[str, list[dict]]) -> list[dict]:
    """Every alert at one time: those in `firing` with exactly these, the others none (the
    Watchdog always, alone)."""
    firing = {mon.WATCHDOG: [_expected(rules, mon.WATCHDOG, "watchdog")], **firing}
    return [{"eval_time": at, "alertname": name, "exp_alerts": firing.get(name, [])}
            for name in mon.ALERTS]


LATE = f"{STEPS - 1}m"   # every hold and threshold of both stacks is past


def _scenario(rules: dict, name: str, series: list[dict], firing: dict, **extra) -> dict:
    """A failure's series from minute 0: at 0 nothing holds yet (the Watchdog fires); at
    LATE exactly `firing` fires."""
    return {"name": name, "interval": "1m", "input_series": series,
            "alert_rule_test": _checks(rules, "0m", {}) + _checks(rules, LATE, firing),
            **extra}


def scenarios(estate: Estate, rules: dict) -> list[dict]:
    """promtool test groups: all healthy; each failure alone; look-alikes that must stay
    quiet; and the compound incidents, each paging once for its cause."""
    export, server, server_addr = render.nfs_exports(estate)[0]
    nfs = {"export": export, "mountaddr": server_addr}
    up = _targets(server)
    healthy = {"slurm": _slurm(1, down=0), "k8s": _kubernetes(), "nfs": _storage(estate),
               "up": up, "mon": _monitoring()}

    def given(**parts) -> list[dict]:
        return [s for k, v in {**healthy, **parts}.items() for s in v]
    queue = _expected(rules, "SchedulerQueueDelay", "queue_delay", partition="gpu",
                      account="research", reason="Resources")
    retransmits = _expected(rules, "SharedFilesystemDegraded", "retransmissions", node="gpu1",
                            **nfs)
    slow_login = _expected(rules, "SharedFilesystemDegraded", "latency", node="login1",
                           **nfs)
    # a dead server: each of its exports
    server_down = [_expected(rules, "SharedFilesystemDown", "server_down", node=server,
                             export=e, mountaddr=addr)
                   for e, s, addr in render.nfs_exports(estate) if s == server]

    def target_down(job, node, plane):
        return _expected(rules, "ScrapeTargetDown", "target_down", job=job, node=node,
                         plane=plane, instance=f"{node}:{JOB_PORTS[job]}")
    return [
        _scenario(rules, "everything is healthy", given(), {}, promql_expr_test=[
            # GPUs per tenant, each HA exporter counted once; a finished pod holds none
            {"expr": "tenant:gpus_allocated:sum", "eval_time": "10m", "exp_samples": [
                {"labels": 'tenant:gpus_allocated:sum{plane="slurm",tenant="research"}',
                 "value": 6},
                {"labels": 'tenant:gpus_allocated:sum{plane="kubernetes",'
                           'tenant="inference"}', "value": 1}]}]),
        _scenario(rules, "the queue waits on a healthy partition",
                  given(slurm=_slurm(60, down=0)), {"SchedulerQueueDelay": [queue]}),
        _scenario(rules, "the queue waits on a drained node",
                  given(slurm=_slurm(60, down=1)), {}),
        _scenario(rules, "a deployment fails", given(k8s=_kubernetes(failing=True)), {
            "ContainerDeploymentFailed": [
                _expected(rules, "ContainerDeploymentFailed", "unavailable_replicas",
                          namespace="inference", deployment="llm"),
                _expected(rules, "ContainerDeploymentFailed", "container_waiting",
                          namespace="inference", pod="llm-0", container="server",
                          reason="ImagePullBackOff")]}),
        _scenario(rules, "the shared filesystem degrades",
                  given(nfs=_storage(estate, degraded=("gpu1",), slow=("login1",))),
                  {"SharedFilesystemDegraded": [retransmits, slow_login]}),
        # compound: a partition's node retransmits while research's job waits: the
        # filesystem explains the wait, the scheduler is not blamed
        _scenario(rules, "NFS degraded under the partition while jobs wait",
                  given(slurm=_slurm(60, down=0), nfs=_storage(estate, degraded=("gpu1",))),
                  {"SharedFilesystemDegraded": [retransmits]}),
        # its look-alike: the slow mount is on a node of no partition, so both are causes
        _scenario(rules, "NFS degraded outside the partition while jobs wait",
                  given(slurm=_slurm(60, down=0), nfs=_storage(estate, slow=("login1",))),
                  {"SharedFilesystemDegraded": [slow_login],
                   "SchedulerQueueDelay": [queue]}),
        # compound: the server is dead and the jobs wait. Its node exporter's target is
        # down too, in Prometheus; Alertmanager inhibits that one (server_down names it)
        _scenario(rules, "the NFS server is dead while jobs wait",
                  given(slurm=_slurm(60, down=0), nfs=_storage(estate, dead=True),
                        up=_targets(server, down=(("node", server),))),
                  {"SharedFilesystemDown": server_down,
                   "ScrapeTargetDown": [target_down("node", server, "shared")]}),
        _scenario(rules, "nfsd stops on a server that is up",
                  given(nfs=_storage(estate, threads=0)),
                  {"SharedFilesystemDown": server_down}),
        _scenario(rules, "a mount sends and gets no answer",
                  given(nfs=_storage(estate, stalled=("gpu1",))),
                  {"SharedFilesystemDown": [_expected(
                      rules, "SharedFilesystemDown", "rpcs_stalled", node="gpu1",
                      **nfs)]}),
        # compound: the Slurm exporters are down, so no Slurm series at all
        _scenario(rules, "the Slurm exporter is down",
                  given(slurm=[], up=_targets(server, down=tuple(
                      ("slurm", n) for n in EXPORTERS))),
                  {"ScrapeTargetDown": [target_down("slurm", n, "slurm")
                                        for n in EXPORTERS]}),
        _scenario(rules, "the Slurm exporter cannot read Slurm",
                  given(slurm=_slurm(60, down=0, read=False)),
                  {"SlurmExporterFailing": [_expected(
                      rules, "SlurmExporterFailing", "slurm_unreadable", node=n)
                      for n in EXPORTERS]}),
        # compound: the inference Deployment waits for GPU quota: a capacity wait, not a
        # failed deployment; web-0 waits too, for resources that are no GPUs
        _scenario(rules, "a deployment waits for GPU capacity",
                  given(k8s=_kubernetes(waiting=True)), {"KubernetesCapacityWait": [
                      _expected(rules, "KubernetesCapacityWait", "gpus",
                                namespace="inference", pod="llm-0"),
                      _expected(rules, "KubernetesCapacityWait", "resources",
                                namespace="inference", pod="web-0")]}),
        _scenario(rules, "rules fail to evaluate", given(mon=_monitoring(rule_failures=True)),
                  {"RuleEvaluationFailing": [_expected(
                      rules, "RuleEvaluationFailing", "rule_failures",
                      rule_group="estate-slurm")]}),
        # a certificate within 30 days of its notAfter (time() is 0 at the test's start),
        # beside one a year away: only the near one fires, naming its renewal
        _scenario(rules, "a certificate nears its expiry", given(certs=[
            _certificate("ctl1", "slurm", "bridge-minter", days=20),
            _certificate("ctl1", "slurm", "slurmrestd-front", days=400)]),
            {"CertificateExpiring": [_expected(
                rules, "CertificateExpiring", "expiring",
                **_certificate_labels("ctl1", "slurm", "bridge-minter"))]}),
        _scenario(rules, "Alertmanager fails to notify",
                  given(mon=_monitoring(notify_failures=True)),
                  {"AlertmanagerNotificationsFailing": [_expected(
                      rules, "AlertmanagerNotificationsFailing", "notify_failures",
                      integration="webhook")]}),
    ]


def _test_rules(promtool: str, artifacts, tmp: Path, groups: list[dict]):
    where = _tree(artifacts, tmp) / Path(render.RULES_REF).parent
    doc = {"rule_files": [Path(render.RULES).name], "evaluation_interval": "1m",
           "tests": groups}
    (where / "estate.test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return _run(promtool, "test", "rules", "estate.test.yml", cwd=where)


def test_each_alert_fires_for_its_own_cause_and_no_other(built, promtool, tmp_path):
    rules = _doc(built.artifacts, render.RULES)
    proc = _test_rules(promtool, built.artifacts, tmp_path, scenarios(built.estate, rules))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_and_cause_fires_in_a_scenario_of_its_own(lab):
    """The scenarios cover every rule: each (alert, cause) fires in at least one, and each
    alert is checked (firing or silent) at every time of every scenario."""
    rules = _doc(lab.artifacts, render.RULES)
    fired, checked = set(), set()
    for group in scenarios(lab.estate, rules):
        for check in group["alert_rule_test"]:
            checked.add(check["alertname"])
            fired |= {(check["alertname"], a["exp_labels"]["cause"])
                      for a in check["exp_alerts"]}
    want = {(name, cause) for name, kind in mon.ALERTS.items() for cause in kind.causes}
    assert fired == want and checked == set(mon.ALERTS)


CASES = 16   # the scenarios, for the parametrisation below


def test_every_scenario_is_tried_wrong(lab):
    assert len(scenarios(lab.estate, _doc(lab.artifacts, render.RULES))) == CASES


@pytest.mark.parametrize("case", range(CASES))
def test_a_wrong_expectation_fails(lab, promtool, tmp_path, case):
    """The proof can fail: where a scenario's alert fires, expecting silence fails; where
    nothing but the Watchdog fires (the look-alikes, all healthy), expecting the queue
    alert fails."""
    rules = _doc(lab.artifacts, render.RULES)
    group = scenarios(lab.estate, rules)[case]
    firing = [c for c in group["alert_rule_test"]
              if c["exp_alerts"] and c["alertname"] != mon.WATCHDOG]
    for check in firing:
        check["exp_alerts"] = []
    if not firing:
        late = next(c for c in group["alert_rule_test"]
                    if c["alertname"] == "SchedulerQueueDelay" and c["eval_time"] == LATE)
        late["exp_alerts"] = [_expected(rules, "SchedulerQueueDelay", "queue_delay",
                                        partition="gpu", account="research",
                                        reason="Resources")]
    proc = _test_rules(promtool, lab.artifacts, tmp_path, [group])
    assert proc.returncode != 0, proc.stdout
    wrong = firing[0]["alertname"] if firing else "SchedulerQueueDelay"
    assert f"alertname: {wrong}" in proc.stdout + proc.stderr


def test_without_the_join_the_compound_incident_pages_twice(lab, promtool, tmp_path):
    """The proof can fail: without the queue rule's `unless` on the partition's
    filesystem, NFS degraded under the partition while jobs wait fires the queue delay
    too, and the scenario that says it pages once fails."""
    rules = _doc(lab.artifacts, render.RULES)
    group = next(g for g in scenarios(lab.estate, rules)
                 if g["name"] == "NFS degraded under the partition while jobs wait")
    rule = _rule(rules, "SchedulerQueueDelay", "queue_delay")
    rule["expr"] = rule["expr"].split(" unless on (partition) partition:")[0]
    where = _tree(lab.artifacts, tmp_path)
    (where / render.RULES_REF).write_text(yaml.safe_dump(rules))
    doc = {"rule_files": [Path(render.RULES).name], "evaluation_interval": "1m",
           "tests": [group]}
    (where / "rules" / "estate.test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _run(promtool, "test", "rules", "estate.test.yml", cwd=where / "rules")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "alertname: SchedulerQueueDelay" in out, out


# --- promtool: GPU utilization attributed to Slurm jobs and accounts ----------------------

def _dcgm(node: str, gpu: str, util: float, **labels: str) -> dict:
    return _series(mon.DCGM_GPU_UTIL, _flat(util), node=node, gpu=gpu, UUID=f"GPU-{node}-{gpu}",
                   **labels)


def _attribution_input() -> list[dict]:
    """gpu1: GPU 0 held by research's job 101 at 80 %, GPU 1 idle (no job, no hpc_job);
    gpu2: both GPUs held by ops's job 202 at 20 and 40 %; k8s2's GPU busy under a pod; both
    HA controllers' exporters list the running jobs, and job 303 holds no GPU."""
    slurm = {"plane": "slurm"}
    out = [_dcgm("gpu1", "0", 80, hpc_job="101", **slurm), _dcgm("gpu1", "1", 0, **slurm),
           _dcgm("gpu2", "0", 20, hpc_job="202", **slurm),
           _dcgm("gpu2", "1", 40, hpc_job="202", **slurm),
           _dcgm("k8s2", "0", 90, plane="kubernetes", namespace="inference", pod="llm-0")]
    for exporter in ("ctl1", "ctl2"):
        out += [_series("slurm_job_info", _flat(1), node=exporter, plane="slurm", job_id=job,
                        account=account, user=user, partition="gpu")
                for job, account, user in (("101", "research", "alice"), ("202", "ops", "bob"),
                                           ("303", "vision", "alice"))]
    return out


def _attribution(research: float) -> dict:
    def job(job_id, account, user, value):
        return {"labels": f'job:gpu_utilization:avg{{account="{account}",job_id="{job_id}",'
                          f'partition="gpu",plane="slurm",user="{user}"}}', "value": value}
    return {"name": "GPU utilization by job and account", "interval": "1m",
            "input_series": _attribution_input(),
            "promql_expr_test": [
                {"expr": "tenant:gpu_utilization:avg", "eval_time": "10m", "exp_samples": [
                    {"labels": 'tenant:gpu_utilization:avg{plane="slurm",tenant="research"}',
                     "value": research},
                    {"labels": 'tenant:gpu_utilization:avg{plane="slurm",tenant="ops"}',
                     "value": 30}]},
                {"expr": "job:gpu_utilization:avg", "eval_time": "10m", "exp_samples": [
                    job("101", "research", "alice", research), job("202", "ops", "bob", 30)]}]}


def test_gpu_utilization_is_attributed_to_the_jobs_account(lab, promtool, tmp_path):
    """Through the DCGM exporter's hpc_job label and slurm_job_info: research's GPU at 80 %,
    not averaged with the idle GPU beside it (which no job holds), ops's two GPUs at 30 %
    on average, each HA exporter's job counted once, the Kubernetes GPU no account's."""
    proc = _test_rules(promtool, lab.artifacts, tmp_path, [_attribution(research=80)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_an_idle_gpu_charged_to_the_account_fails_the_proof(lab, promtool, tmp_path):
    """The proof can fail: research averaged with gpu1's idle GPU (40 %) is not what the
    rules record."""
    proc = _test_rules(promtool, lab.artifacts, tmp_path, [_attribution(research=40)])
    assert proc.returncode != 0, proc.stdout
    assert "tenant:gpu_utilization:avg" in proc.stdout + proc.stderr


def test_the_thresholds_are_the_specs():
    data = spec_dict("lab")
    data["monitoring"]["alerts"] = {"queue_delay_s": 7200, "deployment_failed_s": 900,
                                    "nfs_retransmit_ratio": 0.05, "nfs_latency_ms": 250}
    rules = render.rules(Estate(load_text(yaml.safe_dump(data), "t.yaml").spec))
    exprs = {(r["alert"], r["labels"]["cause"]): (r["expr"], r["for"])
             for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert "> 7200)" in exprs[("SchedulerQueueDelay", "queue_delay")][0]
    assert exprs[("ContainerDeploymentFailed", "container_waiting")][1] == "15m"
    assert exprs[("SharedFilesystemDegraded", "retransmissions")][0].endswith("> 0.05")
    assert exprs[("SharedFilesystemDegraded", "latency")][0].endswith("> 0.25")


def test_rules_read_only_the_slurm_exporters_declared_metrics(lab):
    exprs = [r["expr"] for g in _doc(lab.artifacts, render.RULES)["groups"]
             for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"\b(slurm_[a-z_]+)\b", e)}
    assert used and used <= set(mon.SLURM), used - set(mon.SLURM)
    # and every label the rules group or join the Slurm metrics by is one of theirs
    # (the DCGM exporter's hpc_job joins as job_id; tenant is what the rules record)
    own = {label for name in used for label in mon.SLURM[name].labels}
    grouped = {label.strip() for e in exprs if re.search(r"\bslurm_", e)
               for labels in re.findall(r"\b(?:by|on|group_left) \(([^)]*)\)", e)
               for label in labels.split(",") if label.strip()}
    # node: the scrape's own label, on every series (the exporter's host)
    assert grouped and grouped <= own | {"tenant", "node"}, grouped - own


def test_every_rule_names_its_plane_and_tenant(lab):
    for group in _doc(lab.artifacts, render.RULES)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                kind = mon.ALERTS[rule["alert"]]
                # ScrapeTargetDown keeps its target's plane label (the series')
                assert rule["labels"].get("plane") == kind.plane
                assert rule["labels"]["tenant"] == mon.tenant_template(rule["alert"])
                assert rule["labels"]["cause"] in kind.causes
                assert rule["annotations"]["summary"] and rule["annotations"]["look_first"]
    # a target's plane is one the routes may name
    planes = {labels["plane"] for *_, labels in _scrape_targets(lab.artifacts)}
    assert planes <= set(mon.ALERT_PLANES)


# --- scrape targets and the flow matrix --------------------------------------------------

def _scrape_targets(artifacts) -> list[tuple[str, str, int, dict]]:
    conf = _doc(artifacts, render.CONFIG)
    return [(job["job_name"], *t.rsplit(":", 1), sc["labels"])
            for job in conf["scrape_configs"] for sc in job["static_configs"]
            for t in sc["targets"]]


def test_every_scrape_target_is_a_flow_only_the_monitoring_host_reaches(built):
    est, m = built.estate, matrix(built.estate)
    host, seg = est.spec.monitoring.host, est.spec.monitoring.segment
    by_addr = {str(est.address(n, seg)): n for n in est.nodes}
    found = _scrape_targets(built.artifacts)
    assert {job for job, *_ in found} == {j.name for j in mon.JOBS}
    for job, addr, port, labels in found:
        node = by_addr[addr]
        assert labels.get("node", node) == node
        plane = next(j.plane for j in mon.JOBS if j.name == job)
        assert labels["plane"] == (plane or est.group_of(node).plane or "shared")
        via = m.allows(host, node, "tcp", int(port), seg)
        assert via is not None, f"{job}: {host} may not reach {node}:{port}"
        # besides job traffic: a job's tasks reach any unprivileged port of the other
        # workers (docs/jobs.md), their exporters' among them
        others = [n for n in est.nodes if n != host and
                  (f := m.allows(n, node, "tcp", int(port), seg)) and
                  f.name not in ("job-tcp", "job-udp")]
        assert others == [], f"{job}: {others[:3]} reach {node}:{port} too"


def test_every_node_is_scraped_and_the_exporters_where_they_run(lab):
    found = _scrape_targets(lab.artifacts)
    jobs = {}
    for job, addr, _, labels in found:
        jobs.setdefault(job, []).append(labels.get("node", addr))
    assert jobs["node"] == list(lab.estate.nodes)
    # the DCGM exporter on the GPU workers of both planes, each target under its own plane
    assert jobs["slurm"] == ["ctl1"] and jobs["dcgm"] == ["gpu1", "gpu2", "k8s2"]
    assert jobs["kube-state-metrics"] == [str(lab.estate.address("k8s1", "management"))]


def test_the_firewalls_admit_the_monitoring_host_to_the_exporters(lab):
    worker = lab.artifacts["network/nftables/group-002.nft"].content.decode()
    assert 'ip saddr { 10.60.0.11 } tcp dport 9100 counter accept comment "node-exporter"' \
        in worker
    ctl = lab.artifacts["network/nftables/group-000.nft"].content.decode()
    assert 'ip saddr { 10.60.0.11 } tcp dport 9341 counter accept comment "slurm-exporter"' \
        in ctl
    # the admin hosts, and Prometheus itself (it scrapes its own metrics)
    assert 'ip saddr { 10.60.0.1, 10.60.0.11, 10.62.0.1 } tcp dport 9090 counter accept comment ' \
        '"prometheus"' in ctl


def test_outside_scrapers_stay_and_nothing_else_without_a_monitoring_section():
    data = spec_dict("prod")
    del data["monitoring"]
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    names = {f.name: f for f in matrix(est).flows}
    assert names["node-exporter"].cidrs == ("10.10.0.5/32",)
    assert not names["node-exporter"].sources
    assert not {"slurm-exporter", "kube-state-metrics", "prometheus"} & set(names)
    assert render.render_monitoring(est) == []


def test_with_a_monitoring_section_the_host_and_the_outside_scrapers_scrape():
    est = build(ROOT / "stacks" / "example-prod.yaml").estate
    flows = {f.name: f for f in matrix(est).flows}
    for name in ("node-exporter", "dcgm-exporter", "slurm-exporter", "kube-state-metrics"):
        assert flows[name].sources == {"ctl2"} and flows[name].cidrs == ("10.10.0.5/32",)
    assert flows["slurm-exporter"].to == {"ctl1", "ctl2"}
    assert flows["prometheus"].to == {"ctl2"} and flows["prometheus"].sources == {"ctl2"}


# --- the daemons' settings and who installs them ---------------------------------------

def test_node_exporter_enables_the_nfs_collectors_on_every_node(lab):
    art = lab.artifacts[render.NODE_EXPORTER_ENV]
    assert 'ARGS="--collector.mountstats --collector.nfs ' \
        '--collector.textfile.directory=/var/lib/prometheus/node-exporter"\n' \
        in art.content.decode()
    assert set(art.consumers) == set(lab.estate.nodes)
    assert destination(render.NODE_EXPORTER_ENV) == "/etc/default/prometheus-node-exporter"


def test_prometheus_keeps_the_retention_and_listens_on_its_segment(lab):
    text = lab.artifacts[render.PROMETHEUS_ENV].content.decode()
    assert "--storage.tsdb.retention.time=7d" in text
    assert "--web.listen-address=10.60.0.11:9090" in text
    assert f"--config.file={destination(render.CONFIG)}" in text
    for path in (render.CONFIG, render.RULES, render.PROMETHEUS_ENV):
        assert set(lab.artifacts[path].consumers) == {"ctl1"}
    assert destination(render.RULES) == "/etc/prometheus/rules/estate.yml"


def test_every_node_deploys_the_exporter_and_the_host_prometheus(lab):
    found = {t.name: t.deploys for t in deploy_targets(lab.estate, lab.artifacts.manifest())}
    assert all("node_exporter" in d for d in found.values())
    assert [n for n, d in found.items() if "monitoring" in d] == ["ctl1"]


# --- Alertmanager: amtool accepts the configuration and routes as the spec says ----------

def _alertmanager_yml(artifacts, tmp: Path, config: dict | None = None) -> Path:
    path = tmp / "alertmanager.yml"
    if config is None:
        path.write_bytes(artifacts[render.ALERTMANAGER_CONFIG].content)
    else:
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _routes(amtool: str, config: Path, labels: dict[str, str]) -> str:
    proc = subprocess.run([amtool, "config", "routes", "test", f"--config.file={config}",
                           *(f"{k}={v}" for k, v in labels.items())],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_amtool_accepts_the_alertmanager_config(built, amtool, tmp_path):
    proc = subprocess.run([amtool, "check-config", str(_alertmanager_yml(built.artifacts,
                                                                          tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_amtool_refuses_a_route_to_an_undefined_receiver(lab, amtool, tmp_path):
    """The check can fail: what monitoring.alertmanager_unknown_receiver keeps out."""
    config = _doc(lab.artifacts, render.ALERTMANAGER_CONFIG)
    config["route"]["routes"][0]["receiver"] = "nobody"
    proc = subprocess.run([amtool, "check-config",
                           str(_alertmanager_yml(lab.artifacts, tmp_path, config))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and 'undefined receiver "nobody"' in proc.stdout, proc.stdout


def _alert(rules: dict, alert: str, tenant: str) -> dict[str, str]:
    """An alert's labels as its (first) rule emits them, for one tenant."""
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert)
    return {"alertname": alert, **rule["labels"], "tenant": tenant}


# What each stack's spec says (by spec name), written out: (alert, tenant) -> receiver
ROUTED = {
    "lab": {("SchedulerQueueDelay", "research"): "research",   # the tenant's own route
            ("SchedulerQueueDelay", "vision"): "ops",           # its plane's
            ("SchedulerQueueDelay", "ops"): "ops",
            ("ContainerDeploymentFailed", "inference"): "inference",
            ("ContainerDeploymentFailed", "kube-system"): "null",   # no route: the root's
            ("SharedFilesystemDegraded", "gpu1"): "ops"},
    "prod": {("SchedulerQueueDelay", "ml-platform"): "ml-platform",
             ("SchedulerQueueDelay", "research"): "hpc-oncall",
             ("ContainerDeploymentFailed", "batch-embed"): "ml-platform",
             ("ContainerDeploymentFailed", "kube-system"): "platform",
             ("SharedFilesystemDegraded", "gpu001"): "storage"},
}


def test_each_alert_routes_to_the_receiver_the_spec_names(built, amtool, tmp_path):
    stack = built.estate.spec.name
    config = _alertmanager_yml(built.artifacts, tmp_path)
    rules = _doc(built.artifacts, render.RULES)
    got = {case: _routes(amtool, config, _alert(rules, *case)) for case in ROUTED[stack]}
    assert got == ROUTED[stack]


def test_every_rules_alert_routes_as_the_verify_check_expects(built, amtool, tmp_path):
    """route_cases (what `estate verify` asks the lab's Alertmanager) holds on the rendered
    file: every alert rule's labels, for each tenant a route names and one none names."""
    config = _alertmanager_yml(built.artifacts, tmp_path)
    cases = render.route_cases(built.estate)
    assert {labels["alertname"] for labels, _ in cases} == set(mon.ALERTS)
    wrong = [(labels, want, got) for labels, want in cases
             if (got := _routes(amtool, config, labels)) != want]
    assert not wrong


def test_without_receivers_alertmanager_keeps_the_alerts_to_itself(amtool, tmp_path):
    data = spec_dict("lab")
    del data["monitoring"]["alertmanager"]
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    config = render.alertmanager_config(est)
    assert config["receivers"] == [{"name": mon.NULL_RECEIVER}]
    # the Watchdog's route only, to no receiver; nothing else routed
    assert config["route"]["routes"] == [{"matchers": ['alertname="Watchdog"'],
                                          "receiver": mon.NULL_RECEIVER}]
    assert "global" not in config
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = render.rules(est)
    assert _routes(amtool, path, _alert(rules, "SchedulerQueueDelay", "research")) == "null"


def test_the_spec_types_the_intervals_and_the_mail_relay(lab):
    config = _doc(lab.artifacts, render.ALERTMANAGER_CONFIG)
    assert config["route"]["group_wait"] == "10s"       # the lab's group_wait_s
    assert (config["route"]["group_interval"], config["route"]["repeat_interval"]) == \
        ("30s", "4h")                            # the lab's group_interval_s, the default
    # the Watchdog on its own rhythm, to the receiver the spec names, before any plane
    assert config["route"]["routes"][0] == {
        "matchers": ['alertname="Watchdog"'], "receiver": "watchdog", "group_wait": "0s",
        "group_interval": "1m", "repeat_interval": "1m"}
    assert config["route"]["group_by"] == list(mon.GROUP_BY)
    prod = build(ROOT / "stacks" / "example-prod.yaml")
    config = _doc(prod.artifacts, render.ALERTMANAGER_CONFIG)
    assert config["global"] == {"smtp_smarthost": "smtp.example.org:587",
                                "smtp_from": "alertmanager@example.org",
                                "smtp_require_tls": True}
    assert config["route"]["repeat_interval"] == "12h"
    storage = next(r for r in config["receivers"] if r["name"] == "storage")
    assert storage == {"name": "storage", "email_configs": [
        {"to": "storage-team@example.org", "send_resolved": False}]}


def test_prometheus_sends_its_alerts_to_alertmanager_on_its_flow(built):
    est, m = built.estate, matrix(built.estate)
    host, seg = est.spec.monitoring.host, est.spec.monitoring.segment
    addr = f"{est.address(host, seg)}:{PORTS['alertmanager']}"
    conf = _doc(built.artifacts, render.CONFIG)
    assert conf["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": [addr]}]}]}
    env = built.artifacts[render.ALERTMANAGER_ENV].content.decode()
    assert f"--web.listen-address={addr} " in env and "--cluster.listen-address= " in env
    assert f"--config.file={destination(render.ALERTMANAGER_CONFIG)} " in env
    # Prometheus beside it and the admin hosts reach it, no other node
    port = PORTS["alertmanager"]
    assert m.allows(host, host, "tcp", port, seg) is not None
    others = [n for n in est.nodes if n != host and m.allows(n, host, "tcp", port, seg)]
    assert others == []
    flow = next(f for f in m.flows if f.name == "alertmanager")
    assert flow.to == {host} and flow.sources == {host} and flow.cidrs == admin_cidrs(est)


def test_the_monitoring_host_alone_gets_alertmanager(lab):
    for path in (render.ALERTMANAGER_CONFIG, render.ALERTMANAGER_ENV):
        assert set(lab.artifacts[path].consumers) == {"ctl1"}
    assert destination(render.ALERTMANAGER_CONFIG) == "/etc/prometheus/alertmanager.yml"
    assert destination(render.ALERTMANAGER_ENV) == "/etc/default/prometheus-alertmanager"
    ctl = lab.artifacts["network/nftables/group-000.nft"].content.decode()
    assert 'ip saddr { 10.60.0.1, 10.60.0.11, 10.62.0.1 } tcp dport 9093 counter accept ' \
        'comment "alertmanager"' in ctl


def test_a_static_config_line_is_json_dumps_of_it():
    """prometheus.yml's target lines are written without json.dumps (10,000 calls of its
    Python layer): byte for byte what it writes, whatever the strings hold."""
    import json

    from estate.render.monitoring import _static_line
    for node in ("gpu1", 'a"b', "back\\slash", "é", "new\nline", ""):
        for labels in ({"node": node, "plane": "slurm"}, {"plane": node}):
            sc = {"targets": [f"10.0.0.1:{node}"], "labels": labels}
            assert _static_line(sc) == f"  - {json.dumps(sc)}\n"
