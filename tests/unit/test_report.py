"""`estate report`: GPU-hours per tenant on both planes (estate/operate/report/logic.py, the command in
estate/operate/report/cli.py). sacct output is written as sacct -n -P prints it (the first lines
are copied from a lab's slurmdbd, Slurm 22.05); Prometheus' answers as its HTTP API
gives them, and the Kubernetes query is run by promtool on the rendered rules."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from urllib.error import URLError

import pytest
import yaml
from typer.testing import CliRunner

from estate.operate.report import cli as report_cli
from estate.cli import app
from estate.model.entitlement import entitled_gpus as limits, fair_shares
from estate.pipeline import build
from estate.render import monitoring as render
from estate.operate.report.logic import (PANEL_H, RULE, UTC, Job, UsageReport, SourceError, Unreachable,
                           allocated_gpus, bucket_edges, default_per, entitled,
                           gpu_seconds, kubernetes_gpu_hours, kubernetes_promql,
                           kubernetes_usage, parse_sacct, parse_vector, parse_when,
                           printable, render_svg, slurm_gpu_hours, slurm_usage, step_seconds,
                           table_rows)
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, spec_dict

LAB = ROOT / "stacks" / "lab.yaml"
START = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
END = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
HOSTILE = 'evil</text><script>alert("x")</script>&amp;\x1b[31m\x00'

# As a lab's sacct printed them: two GPUs on one node, a CPU-only job on two, a job
# cancelled as it started (0 s, no GPUs charged).
REAL = """\
1|research|gpu|billing=4,cpu=4,gres/gpu=2,mem=7680M,node=1|0|COMPLETED|2026-12-04T18:30:56|2026-12-04T18:30:56
3|research|gpu|billing=2,cpu=2,mem=3840M,node=2|0|COMPLETED|2026-12-04T18:30:56|2026-12-04T18:30:56
13|research|gpu|billing=1,cpu=1,mem=1920M,node=1|7|CANCELLED by 0|2026-12-04T18:43:25|2026-12-04T18:43:32
"""
# Within 2026-12-01 (UTC): what each line should count is in its comment.
PERIOD = """\
101|research|gpu|billing=8,cpu=8,gres/gpu=2,mem=15360M,node=1|1800|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:30:00
102|research|gpu|billing=4,cpu=4,gres/gpu=1,mem=7680M,node=1|7200|TIMEOUT|2026-11-30T23:00:00|2026-12-01T01:00:00
103|vision|gpu|billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=30720M,node=2|3600|FAILED|2026-12-01T12:00:00|2026-12-01T13:00:00
104|ops|urgent|billing=4,cpu=4,gres/gpu=2,mem=7680M,node=1|5400|RUNNING|2026-12-01T22:30:00|Unknown
105|ops|gpu||0|PENDING|Unknown|Unknown
106_3|vision|gpu|billing=2,cpu=2,gres/gpu:1g.5gb=2,gres/gpu:a100=1,gres/gpumem=40G,mem=3840M,node=1|600|COMPLETED|2026-12-01T08:00:00|2026-12-01T08:10:00
"""
# 101: 2 GPUs x 0.5 h; 102: 1 x 1 h of its 2 (started the day before);
# 103: 4 x 1 h (gres/gpu:a100=4 is the same four GPUs); 104: running, 2 x 1.5 h so far,
# of which 1.5 h fall before END; 105: pending; 106: typed only, 3 x 10 min
EXPECTED = {"research": 1.0 + 1.0, "vision": 4.0 + 0.5, "ops": 3.0}


def fake_run(text: str, seen: list | None = None):
    def run(argv):
        if seen is not None:
            seen.append(argv)
        return text
    return run


# --- Slurm: sacct -------------------------------------------------------------------------

@pytest.mark.parametrize("tres, gpus", [
    ("billing=8,cpu=8,gres/gpu=2,mem=15G,node=1", 2),
    ("billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=15G,node=1", 2),    # counted once
    ("cpu=2,gres/gpu:a100=1,gres/gpu:l4=2,mem=4G,node=1", 3),            # typed only
    ("cpu=2,gres/gpumem=40G,gres/gpuutil=80,mem=4G,node=1", 0),          # not GPUs
    ("billing=2,cpu=2,mem=3840M,node=2", 0), ("", 0),
])
def test_allocated_gpus(tres, gpus):
    assert allocated_gpus(tres) == gpus


def test_real_sacct_lines_parse():
    jobs = parse_sacct(REAL)
    assert [(j.job_id, j.account, j.gpus, j.elapsed_s, j.state) for j in jobs] == [
        ("1", "research", 2, 0, "COMPLETED"), ("3", "research", 0, 0, "COMPLETED"),
        ("13", "research", 0, 7, "CANCELLED by 0")]
    assert jobs[2].start == datetime(2026, 12, 4, 18, 43, 25, tzinfo=UTC)
    assert slurm_gpu_hours(fake_run(REAL), START, END + timedelta(days=5)) == {}


def test_sacct_is_asked_for_allocations_of_all_users_in_utc():
    seen = []
    slurm_gpu_hours(fake_run("", seen), START.replace(microsecond=500),
                    END.replace(microsecond=200))
    [argv] = seen
    assert argv[:3] == ["env", "TZ=UTC", "SLURM_TIME_FORMAT=standard"]
    assert argv[3] == "sacct" and {"-a", "-X", "-n", "-P", "--noconvert"} <= set(argv)
    # the window widened to whole seconds; clipping is exact afterwards
    assert argv[argv.index("-S") + 1] == "2026-12-01T00:00:00"
    assert argv[argv.index("-E") + 1] == "2026-12-02T00:00:01"
    assert argv[argv.index("-o") + 1] == \
        "JobID,Account,Partition,AllocTRES,ElapsedRaw,State,Start,End"


def test_gpu_hours_per_account_are_clipped_to_the_period():
    assert slurm_gpu_hours(fake_run(PERIOD), START, END) == pytest.approx(EXPECTED)


def test_a_period_inside_a_job_counts_only_the_overlap():
    noon = datetime(2026, 12, 1, 12, 15, tzinfo=UTC)
    hours = slurm_gpu_hours(fake_run(PERIOD), noon, noon + timedelta(minutes=30))
    assert hours == pytest.approx({"vision": 4 * 0.5})


def test_a_suspended_job_is_charged_its_elapsed_time_only():
    job = Job("7", "ops", "gpu", 2, 1800, "COMPLETED", START, START + timedelta(hours=1))
    assert gpu_seconds(job, START, END) == 2 * 1800


def test_a_line_sacct_would_not_print_fails_the_source():
    with pytest.raises(SourceError, match="7 fields"):
        parse_sacct("1|research|gpu|gres/gpu=1|10|COMPLETED|2026-12-01T00:00:00\n")


# --- Kubernetes: Prometheus ---------------------------------------------------------------

def vector(*samples: tuple[dict, str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [END.timestamp(), v]} for m, v in samples]}}


def test_an_instant_vector_is_read_per_tenant():
    assert parse_vector(vector(({"tenant": "inference"}, "120"), ({"tenant": "web"}, "0.5"))
                        ) == {"inference": 120.0, "web": 0.5}


@pytest.mark.parametrize("doc, message", [
    ({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
     "parse error at char 3"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "'matrix'"),
    (vector(({"tenant": "x"}, "NaN")), "nan"),
])
def test_an_answer_that_is_not_gpu_hours_fails(doc, message):
    with pytest.raises(SourceError, match=message):
        parse_vector(doc)


def test_each_step_counts_its_seconds():
    asked = []

    def query(promql):
        asked.append(promql)
        return vector(({"tenant": "inference"}, "120"))
    hours = kubernetes_gpu_hours(query, START, END, step_s=60)
    assert hours == {"inference": 120 * 60 / 3600}
    [promql] = asked
    assert f'{RULE}{{plane="kubernetes"}}[86399999ms:60s] @ {END.timestamp():.3f}' in promql


def test_the_rule_read_is_the_one_rendered():
    rules = render.rules(Estate(load_text(LAB.read_text(), str(LAB)).spec))
    records = [r for g in rules["groups"] for r in g["rules"] if r.get("record") == RULE]
    assert {r["labels"]["plane"] for r in records} == {"slurm", "kubernetes"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """Installed by make test (scripts/install-deps.sh): missing is a broken machine."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/install-deps.sh")
    return path


def test_prometheus_integrates_the_rendered_rule_as_the_report_counts(promtool, tmp_path):
    """kube-state-metrics says a pod requests 2 GPUs and runs from minute 0 to 29; over
    the period (10m, 60m] the rendered rule holds 2 for 19 one-minute steps."""
    built = build(LAB)
    (tmp_path / "estate.yml").write_bytes(built.artifacts[render.RULES].content)
    ns, epoch = {"namespace": "inference", "pod": "llm-0"}, datetime(1970, 1, 1, tzinfo=UTC)
    start, end = epoch + timedelta(minutes=10), epoch + timedelta(minutes=60)
    expected_hours = 2 * 19 / 60
    series = [
        {"series": _series("kube_pod_container_resource_requests", container="server",
                           resource="nvidia_com_gpu", unit="integer", **ns), "values": "2x60"},
        {"series": _series("kube_pod_status_phase", phase="Running", **ns),
         "values": "1x29 0x31"}]
    test = {"rule_files": ["estate.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "promql_expr_test": [{
            "expr": kubernetes_promql(start, end, 60), "eval_time": "60m",
            "exp_samples": [{"labels": '{tenant="inference"}',
                             "value": expected_hours * 3600 / 60}]}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _series(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


# --- sources that are absent or do not answer ---------------------------------------------

def estate_of(data: dict) -> Estate:
    return Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)


def unreachable(*_):
    raise Unreachable("ssh: connect to host 10.60.0.11 port 22: Connection refused")


def no_prometheus(url):
    def query(promql):
        raise URLError(ConnectionRefusedError(111, "Connection refused"))
    return query


def test_sources_that_do_not_answer_become_notes():
    found = report_cli.collect(estate_of(spec_dict("lab")), START, END,
                               lambda addr: unreachable, no_prometheus)
    assert not found.answered
    assert found.notes() == [
        "slurm: no controller reachable at ctl1 (10.60.0.11): ssh: connect to host "
        "10.60.0.11 port 22: Connection refused: skipped",
        "kubernetes: no Prometheus reachable at http://10.60.0.11:9090: [Errno 111] "
        "Connection refused: skipped"]


def test_one_source_answering_is_an_answer():
    found = report_cli.collect(estate_of(spec_dict("lab")), START, END,
                               lambda addr: fake_run(PERIOD), no_prometheus)
    assert found.answered and found.hours == {"slurm": pytest.approx(EXPECTED)}


def test_a_failing_sacct_is_a_failed_source():
    def run(argv):
        raise SourceError("exited 1: sacct: error: Problem talking to the database")
    found = report_cli.collect(estate_of(spec_dict("lab")), START, END, lambda addr: run,
                               no_prometheus)
    assert found.sources[0].status == "failed"
    assert "Problem talking to the database" in found.notes()[0]


def test_what_the_spec_lacks_is_said():
    data = spec_dict("lab")
    del data["slurm"]["accounting"], data["monitoring"]
    found = report_cli.collect(estate_of(data), START, END, pytest.fail, pytest.fail)
    assert [s.note for s in found.sources] == [
        "the spec has no Slurm accounting (slurm.accounting): no sacct to read",
        "the spec has no monitoring host: no Prometheus to ask (or pass --prometheus URL)"]
    del data["kubernetes"]
    found = report_cli.collect(estate_of(data), START, END, pytest.fail, pytest.fail)
    assert found.notes()[1] == "kubernetes: the spec has no Kubernetes plane: skipped"


# ssh's own words (OpenSSH 9.2) and sacct's, as each exits
ANSWERS = [(0, ""), (255, "ssh: connect to host 10.60.0.11 port 22: Connection refused\n"),
           (255, "Host key verification failed.\n"),
           (1, "sacct: error: Problem talking to the database: Connection refused\n")]


def test_ssh_runs_one_quoted_command_and_names_its_failures(monkeypatch):
    from estate.provision.inventory import connection
    calls, answers = [], list(ANSWERS)

    def fake(argv, **kw):
        calls.append(argv)
        code, err = answers.pop(0)
        return subprocess.CompletedProcess(argv, code, "out\n", err)
    monkeypatch.setattr(report_cli.subprocess, "run", fake)
    run = report_cli.ssh_runner("10.60.0.11", connection(True))
    assert run(["sacct", "-o", "a;b"]) == "out\n"
    assert calls[0][-3:] == ["--", "10.60.0.11", "sacct -o 'a;b'"]
    assert "StrictHostKeyChecking=no" in calls[0]
    with pytest.raises(Unreachable) as refused:
        run(["true"])
    assert str(refused.value) == "ssh: connect to host 10.60.0.11 port 22: Connection refused"
    with pytest.raises(Unreachable, match="^ssh: Host key verification failed.$"):
        run(["true"])
    with pytest.raises(SourceError, match="^exited 1: sacct: error: Problem talking"):
        run(["true"])


# --- buckets: GPU-hours over time -------------------------------------------------------

def test_buckets_are_whole_utc_hours_or_days_inside_the_period():
    assert bucket_edges(START, END, "day") == [START, END]
    hours = bucket_edges(START, END, "hour")
    assert len(hours) == 25 and hours[1] == START + timedelta(hours=1)
    odd = bucket_edges(START + timedelta(minutes=30), END + timedelta(hours=36), "day")
    assert odd == [START + timedelta(minutes=30), END, END + timedelta(days=1),
                   END + timedelta(hours=36)]
    with pytest.raises(ValueError, match="more than 400"):
        bucket_edges(START, START + timedelta(days=30), "hour")


def test_the_default_bucket_is_an_hour_up_to_two_days():
    assert default_per(START, START + timedelta(days=2)) == "hour"
    assert default_per(START, START + timedelta(days=3)) == "day"


def test_slurm_buckets_charge_each_hour_its_share_and_add_up_to_the_period():
    got = slurm_usage(fake_run(PERIOD), bucket_edges(START, END, "hour"))
    assert got.hours == pytest.approx(EXPECTED)
    assert {t: sum(v) for t, v in got.series.items()} == pytest.approx(EXPECTED)
    assert got.series["vision"][12] == pytest.approx(4.0)       # 103: 12:00 to 13:00
    assert got.series["vision"][8] == pytest.approx(0.5)        # 106: 08:00 to 08:10
    assert got.series["ops"][22:] == pytest.approx([1.0, 2.0])  # 104: from 22:30, running
    assert got.series["research"][0] == pytest.approx(1.0)      # 102: until 01:00


def ranged_query(gpus: float, asked: list | None = None):
    """Prometheus as a tenant holding `gpus` GPUs all along would answer: the rule's
    value at each step point of the subquery's range."""
    def query(promql):
        if asked is not None:
            asked.append(promql)
        range_ms, step = re.search(r"\[(\d+)ms:(\d+)s\]", promql).groups()
        points = (int(range_ms) + 1) // (1000 * int(step))
        return vector(({"tenant": "inference"}, str(gpus * points)))
    return query


def test_kubernetes_buckets_ask_one_range_each_that_partition_the_period():
    asked = []
    got = kubernetes_usage(ranged_query(2, asked), bucket_edges(START, END, "hour"), 60)
    assert len(asked) == 1 + 24
    assert got.hours == {"inference": pytest.approx(48.0)}
    assert got.series == {"inference": pytest.approx([2.0] * 24)}
    assert asked[1].endswith(f"[3599999ms:60s] @ {(START + timedelta(hours=1)).timestamp():.3f}))")


# --- quota and fair share -----------------------------------------------------------------

def test_each_tenant_is_entitled_to_its_quota_or_its_fair_share_of_slurms_gpus():
    got = limits(estate_of(spec_dict("lab")))
    # gpu[1-2], two A100s each; research 70 and ops 30 under root, vision alone under research
    assert got == {"slurm": pytest.approx({"research": 2.8, "vision": 2.8, "ops": 1.2}),
                   "kubernetes": {"inference": 1.0}}


def test_fair_shares_split_each_parents_share_among_its_children():
    from estate.spec.model import Account
    tree = [Account(name="a", fairshare=3), Account(name="b", fairshare=1),
            Account(name="a1", parent="a", fairshare=1), Account(name="a2", parent="a",
                                                                  fairshare=2)]
    assert fair_shares(tree) == pytest.approx({"a": 0.75, "b": 0.25, "a1": 0.25, "a2": 0.5})


# --- output -------------------------------------------------------------------------------

def sample() -> UsageReport:
    found = UsageReport(START, END, per="hour", edges=bucket_edges(START, END, "hour"))
    found.hours = {"slurm": {"research": 2.0, HOSTILE: 1.25}, "kubernetes": {"inference": 0.5}}
    found.series = {"slurm": {"research": [0.0] * 10 + [1.5, 0.5] + [0.0] * 12,
                              HOSTILE: [1.25] + [0.0] * 23},
                    "kubernetes": {"inference": [0.0] * 23 + [0.5]}}
    found.limits = {"slurm": {"research": 2.8, "ops": 1.2}, "kubernetes": {"inference": 1.0}}
    report_cli.skip(found, "kubernetes", "a note with <markup> & " + HOSTILE)
    return found


SVG = {"s": "http://www.w3.org/2000/svg"}


def drawn(svg: str) -> dict[tuple[str, str], dict]:
    """What the SVG says of each tenant, read back from its elements: the total, each
    bar's GPU-hours and height, the grant line's GPUs and heights."""
    out = {}
    for g in ET.fromstring(svg).findall("s:g[@class]", SVG):
        scale = float(g.get("data-scale"))
        bars = g.findall("s:rect[@class='bucket']", SVG)
        grant = g.find("s:polyline[@class='grant']", SVG)
        steps = [float(p.split(",")[1]) for p in grant.get("points").split()][::2] \
            if grant is not None else None
        base = float(bars[0].get("y")) + float(bars[0].get("height"))
        out[(g.get("data-plane"), g.get("data-tenant"))] = {
            "total": float(g.get("data-total")),
            "shown": g.find("s:text[@class='total']", SVG).text,
            "hours": [float(b.get("data-gpu-hours")) for b in bars],
            "heights": [float(b.get("height")) * scale / PANEL_H for b in bars],
            "starts": [b.get("data-start") for b in bars],
            "gpus": float(grant.get("data-gpus")) if grant is not None else None,
            "grant": [(base - y) * scale / PANEL_H for y in steps] if steps else None}
    return out


def test_the_svg_draws_each_tenants_hours_per_bucket_against_its_grant():
    found = sample()
    shown = drawn(render_svg(found))
    assert found.chart_rows() == [("slurm", HOSTILE), ("slurm", "ops"), ("slurm", "research"),
                                  ("kubernetes", "inference")]
    assert list(shown) == [(p, printable(t)) for p, t in found.chart_rows()]
    rows = dict(zip(found.chart_rows(), shown.values()))
    for (plane, tenant), row in rows.items():
        assert row["total"] == pytest.approx(found.hours[plane].get(tenant, 0.0))
        assert row["shown"] == f"{found.hours[plane].get(tenant, 0.0):.3f} GPU-h"
        assert row["hours"] == pytest.approx(found.bucket(plane, tenant))
        assert row["heights"] == pytest.approx(row["hours"], abs=0.01)
        assert row["starts"] == [iso_z(t) for t in found.edges[:-1]]
        if tenant in found.limits[plane]:
            assert row["gpus"] == pytest.approx(found.limits[plane][tenant])
            assert row["grant"] == pytest.approx(entitled(found, plane, tenant), abs=0.01)
        else:
            assert row["gpus"] is None
    # an account entitled to GPUs that used none is drawn, with no bars
    assert rows[("slurm", "ops")]["hours"] == [0.0] * 24
    assert rows[("slurm", "research")]["grant"] == pytest.approx([2.8] * 24, abs=0.01)


def iso_z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_svg_is_well_formed_and_escapes_every_label():
    svg = render_svg(sample())
    root = ET.fromstring(svg)   # a raw '<', '&' or control character would not parse
    ns = {"s": "http://www.w3.org/2000/svg"}
    bars = root.findall("s:g", ns)
    assert [b.get("data-plane") for b in bars] == ["slurm", "slurm", "slurm", "kubernetes"]
    assert not root.findall(".//s:script", ns)
    texts = "".join(root.itertext())
    assert "</text><script>" in texts and "\\x1b" in texts and "\x1b" not in svg


def test_table_cells_show_control_characters_escaped():
    rows = table_rows(sample())
    assert [r[0] for r in rows] == ["slurm", "slurm", "kubernetes"]
    hostile = next(r for r in rows if r[1].startswith("evil"))
    assert "\x1b" not in hostile[1] and "\\x1b[31m\\x00" in hostile[1]
    assert hostile[2] == "1.250"


@pytest.mark.parametrize("text, when", [
    ("now", END), ("7d", END - timedelta(days=7)), ("90m", END - timedelta(minutes=90)),
    ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
    ("2026-11-01T08:00+01:00", datetime(2026, 11, 1, 7, tzinfo=UTC)),
    ("2026-11-01T08:00Z", datetime(2026, 11, 1, 8, tzinfo=UTC)),
])
def test_period_forms(text, when):
    assert parse_when(text, END) == when


def test_a_period_form_not_understood_is_refused():
    with pytest.raises(ValueError, match="neither"):
        parse_when("last tuesday", END)


# --- the command --------------------------------------------------------------------------

@pytest.fixture
def answering(monkeypatch):
    monkeypatch.setattr(report_cli, "ssh_runner", lambda addr, conn: fake_run(PERIOD))
    monkeypatch.setattr(report_cli, "prometheus_query", lambda url: ranged_query(2))


def test_the_json_file_holds_what_the_table_shows(answering, tmp_path):
    out, svg = tmp_path / "report.json", tmp_path / "report.svg"
    result = CliRunner().invoke(app, ["report", str(LAB), "--since", "2026-12-01",
                                      "--until", "2026-12-02", "--json", str(out),
                                      "--svg", str(svg), "--output", "text"])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["period"] == {"start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z"}
    assert [s["status"] for s in doc["sources"]] == ["ok", "ok"]
    lines = result.output.splitlines()
    shown = [line.split() for line in lines[lines.index("plane       tenant     GPU-hours") + 1:]]
    assert shown == [[r["plane"], r["tenant"], f"{r['gpu_hours']:.3f}"] for r in doc["rows"]]
    # a day in at most MAX_POINTS steps of at least the lab's evaluation interval
    interval = load_text(LAB.read_text(), str(LAB)).spec.monitoring.scrape_interval_s
    step = step_seconds(START, END, interval)
    assert step == max(interval, 8)
    assert {(r["plane"], r["tenant"]): r["gpu_hours"] for r in doc["rows"]} == pytest.approx(
        {("slurm", t): h for t, h in EXPECTED.items()} |
        {("kubernetes", "inference"): 2 * 24})     # two GPUs all day
    # a day is drawn per hour; the SVG's figures are the JSON's
    assert doc["per"] == "hour" and len(doc["buckets"]) == 25
    totals = {(r["plane"], r["tenant"]): r["gpu_hours"] for r in doc["rows"]}
    shown = drawn(svg.read_text())
    assert list(shown) == [(r["plane"], r["tenant"]) for r in doc["series"]]
    for r in doc["series"]:
        row, key = shown[(r["plane"], r["tenant"])], (r["plane"], r["tenant"])
        assert sum(r["gpu_hours"]) == pytest.approx(totals.get(key, 0.0))
        assert row["hours"] == pytest.approx(r["gpu_hours"])
        assert row["total"] == pytest.approx(totals.get(key, 0.0))
        grant = r.get("quota_gpus") if r["plane"] == "kubernetes" else r.get("fair_share_gpus")
        assert row["gpus"] == pytest.approx(grant)
    assert shown[("kubernetes", "inference")]["grant"] == pytest.approx([1.0] * 24, abs=0.01)


def test_no_source_answering_exits_1_with_the_notes(monkeypatch):
    monkeypatch.setattr(report_cli, "ssh_runner", lambda addr, conn: unreachable)
    monkeypatch.setattr(report_cli, "prometheus_query", no_prometheus)
    result = CliRunner().invoke(app, ["report", str(LAB), "--output", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert [s["status"] for s in doc["sources"]] == ["skipped", "skipped"]
    assert doc["rows"] == []


@pytest.mark.parametrize("args", [["--since", "yesterday"], ["--since", "1d", "--until", "2d"]])
def test_a_bad_period_is_a_usage_error(args):
    result = CliRunner().invoke(app, ["report", str(LAB), *args])
    assert result.exit_code == 2, result.output
