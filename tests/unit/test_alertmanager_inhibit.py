"""Inhibition, proven on a live Alertmanager: amtool tests routing, not inhibit_rules.

Debian's prometheus-alertmanager runs on 127.0.0.1 (a free port, a temporary directory,
stopped at the end) with the lab's rendered alertmanager.yml, its receivers' webhooks
pointed at a receiver in this process on loopback and its group wait cut to a second. The
alerts of each compound incident are posted through its API, as the rules emit them; the
API says which it inhibits, and the receivers get one page per incident, naming its cause.
"""
from __future__ import annotations

import contextlib
import copy
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from estate.model import monitoring as mon
from estate.pipeline import build
from estate.render import monitoring as render
from tests.unit.checkutil import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Pages(BaseHTTPRequestHandler):
    """Alertmanager's webhook JSON, kept by receiver (the path's last part)."""
    got: list[tuple[str, dict]]

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.got.append((self.path.rsplit("/", 1)[-1], body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks" / "lab.yaml")
    assert result.ok
    return result


@pytest.fixture
def pages():
    handler = type("Pages", (_Pages,), {"got": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler.got
    server.shutdown()
    server.server_close()


def _get(url: str, data: bytes | None = None):
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with direct.open(req, timeout=5) as resp:
        return resp.read()


@contextlib.contextmanager
def _running(config: dict, pages: tuple[int, list], tmp: Path):
    """Alertmanager on loopback with this configuration (its receivers' webhooks pointed at
    `pages`, a new group's wait cut to a second), until the block ends."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("prometheus-alertmanager is not installed: run scripts/install-deps.sh "
                    "(catalogue HOST_TOOLS['telemetry'])")
    config = copy.deepcopy(config)
    config["route"]["group_wait"] = "1s"
    for route in config["route"].get("routes", []):
        route.pop("group_wait", None)
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"http://127.0.0.1:{pages[0]}/alerts/{receiver['name']}"
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={path}", f"--storage.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while True:
            try:
                if _get(f"{base}/-/ready").strip() == b"OK":
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < end, "Alertmanager never became ready"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _config(lab) -> dict:
    return yaml.safe_load(lab.artifacts[render.ALERTMANAGER_CONFIG].content)


@pytest.fixture
def alertmanager(lab, pages, tmp_path):
    """The lab's configuration as rendered, but for where its webhooks point and how long
    a new group waits: routes, receivers' names and inhibit_rules untouched."""
    with _running(_config(lab), pages, tmp_path) as base:
        yield base


def _rule(lab, alert: str, cause: str) -> dict:
    rules = yaml.safe_load(lab.artifacts[render.RULES].content)
    return next(r for g in rules["groups"] for r in g["rules"]
                if r.get("alert") == alert and r["labels"]["cause"] == cause)


def _labels(lab, alert: str, cause: str, **series: str) -> dict[str, str]:
    """The alert's labels as Prometheus sends them: the series', then the rule's, the
    tenant template filled in from the series."""
    rule = _rule(lab, alert, cause)
    own = {k: (series[mon.ALERTS[alert].tenant] if "{{" in v else v)
           for k, v in rule["labels"].items()}
    return {"alertname": alert, **series, **own}


def _post(base: str, alerts: list[dict[str, str]]) -> None:
    now = datetime.now(timezone.utc)
    body = [{"labels": labels, "annotations": {"summary": "posted by the test"},
             "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat()}
            for labels in alerts]
    _get(f"{base}/api/v2/alerts", json.dumps(body).encode())


def _key(labels: dict) -> tuple:
    return (labels["alertname"], labels["cause"], labels.get("node", ""),
            labels.get("export", ""), labels.get("job", ""))


def _inhibited(base: str, want: dict[tuple, bool]) -> dict[tuple, bool]:
    """Each alert Alertmanager holds: whether it is inhibited (its API's inhibitedBy), once
    it says what `want` says or 15 s have passed (its inhibitor learns the sources from
    its own subscription to the alerts, a moment after they are posted)."""
    end = time.monotonic() + 15
    while True:
        got = {_key(a["labels"]): bool(a["status"]["inhibitedBy"])
               for a in json.loads(_get(f"{base}/api/v2/alerts"))}
        if got == want or time.monotonic() > end:
            return got
        time.sleep(0.2)


def _paged(got: list[tuple[str, dict]], wait_for: set[tuple], timeout: float = 20
           ) -> dict[tuple, str]:
    """Every alert the receivers have been sent (firing), by key: its receiver."""
    end = time.monotonic() + timeout
    while True:
        sent = {_key(a["labels"]): receiver for receiver, body in list(got)
                for a in body["alerts"] if a["status"] == "firing"}
        if wait_for <= set(sent) or time.monotonic() > end:
            time.sleep(2)   # what else a group flush would have sent
            return {_key(a["labels"]): receiver for receiver, body in list(got)
                    for a in body["alerts"] if a["status"] == "firing"}
        time.sleep(0.2)


def test_a_dead_nfs_server_pages_once_naming_the_server(lab, alertmanager, pages):
    """The server's exporter is down and its clients' mounts hang: the server's own alert
    inhibits its exports' degraded and stalled mounts and its node exporter's target down;
    another server's export, degraded, still pages."""
    export, server, addr = render.nfs_exports(lab.estate)[0]
    other = "10.63.0.9:/export/scratch"
    source = _labels(lab, "SharedFilesystemDown", "server_down", export=export,
                     mountaddr=addr, node=server)
    followers = [
        _labels(lab, "SharedFilesystemDegraded", "latency", export=export, mountaddr=addr,
                node="gpu1"),
        _labels(lab, "SharedFilesystemDown", "rpcs_stalled", export=export, mountaddr=addr,
                node="gpu2"),
        _labels(lab, "ScrapeTargetDown", "target_down", job="node", node=server,
                plane="shared", instance=f"{addr}:9100")]
    elsewhere = _labels(lab, "SharedFilesystemDegraded", "retransmissions", export=other,
                        mountaddr="10.63.0.9", node="login1")
    alerts = [source, *followers, elsewhere]
    _post(alertmanager, alerts)
    want = {_key(source): False, _key(elsewhere): False, **{_key(f): True for f in followers}}
    assert _inhibited(alertmanager, want) == want
    # one page for the incident, to the storage plane's receiver; none of the followers
    sent = _paged(pages[1], {_key(source), _key(elsewhere)})
    assert sent[_key(source)] == "ops" and sent[_key(elsewhere)] == "ops"
    assert not {_key(f) for f in followers} & set(sent)


def test_a_node_down_explains_its_other_exporters(lab, alertmanager, pages):
    """gpu2's node exporter is down: its DCGM exporter's target down is inhibited, gpu1's
    is not (each names the node it is on)."""
    def down(job, node, port):
        return _labels(lab, "ScrapeTargetDown", "target_down", job=job, node=node,
                       plane="slurm", instance=f"{node}:{port}")
    node, follower, alone = down("node", "gpu2", 9100), down("dcgm", "gpu2", 9400), \
        down("dcgm", "gpu1", 9400)
    _post(alertmanager, [node, follower, alone])
    want = {_key(node): False, _key(follower): True, _key(alone): False}
    assert _inhibited(alertmanager, want) == want
    sent = _paged(pages[1], {_key(node), _key(alone)})
    assert _key(follower) not in sent and sent[_key(node)] == "ops"


def test_the_watchdog_is_never_inhibited_and_reaches_its_receiver(lab, alertmanager, pages):
    """With every source of an inhibit rule firing, the Watchdog is still active, and goes
    to the receiver monitoring.alertmanager.watchdog names."""
    export, server, addr = render.nfs_exports(lab.estate)[0]
    watchdog = _labels(lab, mon.WATCHDOG, "watchdog")
    sources = [_labels(lab, "SharedFilesystemDown", "server_down", export=export,
                       mountaddr=addr, node=server),
               _labels(lab, "ScrapeTargetDown", "target_down", job="node", node="gpu1",
                       plane="slurm", instance="gpu1:9100")]
    _post(alertmanager, [watchdog, *sources])
    want = {_key(a): False for a in (watchdog, *sources)}
    assert _inhibited(alertmanager, want) == want
    sent = _paged(pages[1], {_key(watchdog)})
    assert sent[_key(watchdog)] == lab.estate.spec.monitoring.alertmanager.watchdog.receiver


def test_without_the_inhibit_rules_the_dead_server_pages_for_every_mount(lab, pages,
                                                                        tmp_path):
    """The proof can fail: the same incident on an Alertmanager without inhibit_rules
    inhibits nothing."""
    config = _config(lab)
    assert config["inhibit_rules"] == render.inhibit_rules()
    with _running({**config, "inhibit_rules": []}, pages, tmp_path) as base:
        export, server, addr = render.nfs_exports(lab.estate)[0]
        alerts = [_labels(lab, "SharedFilesystemDown", "server_down", export=export,
                          mountaddr=addr, node=server),
                  _labels(lab, "SharedFilesystemDegraded", "latency", export=export,
                          mountaddr=addr, node="gpu1")]
        _post(base, alerts)
        time.sleep(2)   # what the inhibitor would have needed to learn the source
        want = {_key(a): False for a in alerts}
        assert _inhibited(base, want) == want
