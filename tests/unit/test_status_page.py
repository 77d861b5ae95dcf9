"""The status pages (estate/render/consoles.py), served by a live Prometheus.

Debian's prometheus runs on 127.0.0.1 (a free port, a temporary directory, stopped at the
end) with the lab's rendered rules and console pages, on the console library Debian's
package ships, as the lab's Prometheus runs them; the rules' holds are cut to 0s so that
alerts fire within seconds. It scrapes a Slurm exporter served by this process (a job of
research pending ten minutes for Resources, two of ops's GPUs allocated) and a node
exporter on the NFS server that does not answer. The page is read as a user's browser
gets it from Prometheus, and parsed: which alerts it shows firing, with which cause,
tenant and hint, and the queue, allocation and storage it shows.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from estate.model.entitlement import entitled_gpus
from estate.pipeline import build
from estate.render import consoles
from estate.render import monitoring as render
from tests.unit.checkutil import ROOT
from tests.unit.test_alertmanager_inhibit import _free_port, _get

METRICS = """\
slurm_up 1
slurm_job_pending_seconds_max{partition="gpu",account="research",reason="Resources"} 600
slurm_jobs_pending{partition="gpu",account="research",reason="Resources"} 3
slurm_gpus_allocated{partition="gpu",account="ops"} 2
slurm_gpus_total{partition="gpu"} 4
slurm_nodes{state="allocated",partition="gpu"} 2
slurm_node_partition{nodename="gpu1",partition="gpu"} 1
"""


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self):
        body = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks" / "lab.yaml")
    assert result.ok
    return result


@pytest.fixture(scope="module")
def exporter():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _config(lab, exporter: str, tmp: Path) -> Path:
    """The rendered rules (holds cut to 0s) and pages; scrape jobs as the lab's carry
    their labels: the controller's Slurm exporter, and the NFS server's node exporter at
    a port where nothing listens."""
    rules = yaml.safe_load(lab.artifacts[render.RULES].content)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    (tmp / "rules").mkdir()
    (tmp / "rules" / "estate.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (tmp / "consoles").mkdir()
    for plane in consoles.planes(lab.estate):
        name = consoles.page(plane)
        (tmp / "consoles" / Path(name).name).write_bytes(lab.artifacts[name].content)
    nfs = render.nfs_exports(lab.estate)[0][1]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": ["rules/estate.yml"],
              "scrape_configs": [
                  {"job_name": "slurm-exporter", "static_configs": [{
                      "targets": [exporter], "labels": {"node": "ctl1", "plane": "slurm"}}]},
                  {"job_name": "node", "static_configs": [{
                      "targets": [f"127.0.0.1:{_free_port()}"],
                      "labels": {"node": nfs, "plane": "shared"}}]}]}
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.contextmanager
def _prometheus(config: Path, tmp: Path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run scripts/install-deps.sh "
                    "(catalogue HOST_TOOLS['telemetry'])")
    if not Path(consoles.LIBRARIES_DIR, "prom.lib").is_file():
        pytest.fail(f"{consoles.LIBRARIES_DIR}/prom.lib is missing: Debian's prometheus "
                    "package ships it (reinstall it, with /usr/share/doc not excluded)")
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.console.templates={tmp / 'consoles'}",
                             f"--web.console.libraries={consoles.LIBRARIES_DIR}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while True:
            try:
                _get(f"{base}/-/ready")
                break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < end, "Prometheus never became ready"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Tables(HTMLParser):
    """The page's tables by id: each row's cells' text, and the Watchdog's line."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.texts: dict[str, str] = {}
        self._table = self._cell = self._id = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif attrs.get("id"):
            self._id = attrs["id"]
            self.texts[self._id] = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "p":
            self._id = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._id:
            self.texts[self._id] += data


def _page(base: str, plane: str) -> Tables:
    parsed = Tables()
    parsed.feed(_get(f"{base}/consoles/estate-{plane}.html").decode())
    return parsed


def _firing(page: Tables) -> set[tuple[str, str, str]]:
    return {(row[0], row[1], row[3]) for row in page.tables["alerts"][1:] if len(row) == 6}


def _shown(base: str, plane: str, want: set, timeout: float = 45) -> Tables:
    """The page once it shows `want` firing (rules evaluate each second, alerts fire on
    the evaluation after their records), or as it is when time runs out."""
    end = time.monotonic() + timeout
    while True:
        page = _page(base, plane)
        if want <= _firing(page) or time.monotonic() > end:
            return page
        time.sleep(1)


@pytest.fixture(scope="module")
def prometheus(lab, exporter, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    with _prometheus(_config(lab, exporter, tmp), tmp) as base:
        yield base


def test_the_slurm_page_shows_each_alert_firing_with_its_cause_and_hint(lab, prometheus):
    exports = render.nfs_exports(lab.estate)
    nfs = exports[0][1]
    want = {("SchedulerQueueDelay", "queue_delay", "research"),
            ("ScrapeTargetDown", "target_down", "node"),
            ("SharedFilesystemDown", "server_down", nfs)}
    page = _shown(prometheus, "slurm", want)
    assert _firing(page) == want
    rows = {row[0]: row for row in page.tables["alerts"][1:]}
    assert "partition=gpu" in rows["SchedulerQueueDelay"][4]
    assert rows["SchedulerQueueDelay"][5].startswith("the scheduler: `squeue -p gpu -t PD")
    assert rows["SharedFilesystemDown"][5].startswith(f"the server {nfs}: `systemctl status")
    assert page.texts["watchdog"] == "Watchdog firing: Prometheus evaluates its rules."
    # the queue: research's wait and its jobs
    assert page.tables["queue"][1] == ["gpu", "research", "Resources", "10m 0s", "3"]
    # GPUs allocated now beside each account's fair share
    shares = entitled_gpus(lab.estate)["slurm"]
    assert page.tables["allocation"][0][2] == "Fair share (GPUs)"
    assert {r[0]: (r[1], r[2]) for r in page.tables["allocation"][1:]} == {
        t: ("2" if t == "ops" else "0", f"{g:g}") for t, g in shares.items()}
    # each export of the dead server is shown down
    assert {r[0]: r[2] for r in page.tables["exports"][1:]} == {
        e: "down" if s == nfs else "answering" for e, s, _ in exports}


def test_the_kubernetes_page_shows_the_shared_failures_not_the_slurm_queue(lab, prometheus):
    nfs = render.nfs_exports(lab.estate)[0][1]
    want = {("ScrapeTargetDown", "target_down", "node"),
            ("SharedFilesystemDown", "server_down", nfs)}
    page = _shown(prometheus, "kubernetes", want)
    assert _firing(page) == want
    assert page.tables["queue"][1:] == [["No pod waiting for capacity."]]
    assert page.tables["allocation"][1:] == [["inference", "0", "1"]]


def test_the_pages_are_rendered_for_the_planes_the_spec_has(lab):
    assert [a for a in lab.artifacts if a.startswith(consoles.CONSOLES)] == [
        "monitoring/consoles/estate-slurm.html", "monitoring/consoles/estate-kubernetes.html"]
    env = lab.artifacts[render.PROMETHEUS_ENV].content.decode()
    assert f"--web.console.libraries={consoles.LIBRARIES_DIR}" in env
