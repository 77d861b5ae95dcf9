"""`estate report SPEC`: GPU-hours per tenant on both planes over a period.

The Slurm plane's come from Slurm accounting (sacct, one line per job allocation), the
Kubernetes plane's from Prometheus (the recording rule tenant:gpus_allocated:sum that
estate.render.monitoring renders, integrated over the period). Both are reached through
callables the caller hands in, so everything here is pure: ``run`` takes an argv and
returns its stdout (ssh to the controller, a lab's namespace), ``query`` takes PromQL and
returns Prometheus' JSON answer. estate/operate/report/cli.py wires them to the nodes.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from estate.model.entitlement import LIMIT_KIND

UTC = timezone.utc
# Times go to sacct and come back in UTC whatever the controller's zone and the user's
# SLURM_TIME_FORMAT: both would otherwise change what -S/-E and Start/End mean.
SACCT_ENV = ["env", "TZ=UTC", "SLURM_TIME_FORMAT=standard"]
SACCT_FIELDS = ("JobID", "Account", "Partition", "AllocTRES", "ElapsedRaw", "State",
                "Start", "End")
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
RULE = "tenant:gpus_allocated:sum"      # estate.render.monitoring's recording rule
MAX_POINTS = 11_000                     # Prometheus' own bound on a query_range's points
PLANES = ("slurm", "kubernetes")
COLOURS = {"slurm": "#1d4ed8", "kubernetes": "#c2410c"}   # as estate plan's picture


class SourceError(RuntimeError):
    """A source answered, but not with GPU-hours (a command failed, an error document)."""


class Unreachable(SourceError):
    """A source did not answer at all (ssh could not connect)."""


# --- the Slurm plane ------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    job_id: str
    account: str
    partition: str
    gpus: int
    elapsed_s: int
    state: str
    start: datetime | None      # None: not started (pending, cancelled while pending)
    end: datetime | None        # None: still running (sacct prints Unknown)


def sacct_argv(start: datetime, end: datetime) -> list[str]:
    """All users' job allocations that overlapped [start, end]; the window is widened to
    whole seconds (sacct's resolution) and the jobs are clipped exactly afterwards."""
    first = start.astimezone(UTC).replace(microsecond=0)
    last = end.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=bool(end.microsecond))
    return [*SACCT_ENV, "sacct", "-a", "-X", "-n", "-P", "--noconvert",
            "-S", first.strftime(SACCT_TIME), "-E", last.strftime(SACCT_TIME),
            "-o", ",".join(SACCT_FIELDS)]


def allocated_gpus(tres: str) -> int:
    """GPUs in an AllocTRES string: the untyped gres/gpu where Slurm reports it (it counts
    the typed ones again), else the sum of the typed gres/gpu:TYPE (AccountingStorageTRES
    may track only those). gres/gpumem and gres/gpuutil are not GPUs."""
    counts = dict(item.split("=", 1) for item in tres.split(",") if "=" in item)
    if "gres/gpu" in counts:
        return int(counts["gres/gpu"])
    return sum(int(v) for k, v in counts.items() if k.startswith("gres/gpu:"))


def _when(text: str) -> datetime | None:
    """A Start/End field; Unknown, None or empty (not started, still running) is None."""
    try:
        return datetime.strptime(text, SACCT_TIME).replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_sacct(text: str) -> list[Job]:
    """sacct -P -n -o SACCT_FIELDS: one job allocation a line, fields split by '|'."""
    jobs = []
    for line in filter(None, text.splitlines()):
        cells = line.split("|")
        if len(cells) != len(SACCT_FIELDS):
            raise SourceError(f"sacct printed {len(cells)} fields, not "
                              f"{len(SACCT_FIELDS)}: {line!r}")
        job_id, account, partition, tres, elapsed, state, start, end = cells
        jobs.append(Job(job_id, account, partition, allocated_gpus(tres), int(elapsed or 0),
                        state, _when(start), _when(end)))
    return jobs


def gpu_seconds(job: Job, start: datetime, end: datetime) -> float:
    """The job's GPU-seconds inside [start, end]. A running job has run Start+ElapsedRaw
    so far; no more than ElapsedRaw is charged (a suspended job's pause is not)."""
    if job.start is None or not job.gpus:
        return 0.0
    stop = job.end or job.start + timedelta(seconds=job.elapsed_s)
    overlap = (min(stop, end) - max(job.start, start)).total_seconds()
    return job.gpus * max(0.0, min(overlap, float(job.elapsed_s)))


def _per_account(jobs: list[Job], start: datetime, end: datetime) -> dict[str, float]:
    out: dict[str, float] = {}
    for job in jobs:
        seconds = gpu_seconds(job, start, end)
        if seconds:
            out[job.account] = out.get(job.account, 0.0) + seconds / 3600
    return out


def slurm_gpu_hours(run: Callable[[list[str]], str], start: datetime,
                    end: datetime) -> dict[str, float]:
    """GPU-hours per Slurm account over [start, end], from sacct through `run`."""
    return _per_account(parse_sacct(run(sacct_argv(start, end))), start, end)


def slurm_usage(run: Callable[[list[str]], str], edges: list[datetime]) -> Usage:
    """The period's GPU-hours per account and per bucket, from one sacct."""
    jobs = parse_sacct(run(sacct_argv(edges[0], edges[-1])))
    return usage(_per_account(jobs, edges[0], edges[-1]),
                 [_per_account(jobs, a, b) for a, b in zip(edges, edges[1:])])


# --- the Kubernetes plane -------------------------------------------------------------------

def step_seconds(start: datetime, end: datetime, interval_s: int) -> int:
    """The rule's evaluation interval, coarser where the period would need more points."""
    span = (end - start).total_seconds()
    return max(interval_s, math.ceil(span / MAX_POINTS))


def kubernetes_promql(start: datetime, end: datetime, step_s: int) -> str:
    """The sum, per tenant, of the rule's value at every step in (start, end]. The range
    is 1 ms short of the period: Prometheus 2 includes a point at the range's start,
    Prometheus 3 does not, and no step point lies in that millisecond. `@` (on by default
    since Prometheus 2.33) pins the evaluation to the period's end."""
    range_ms = max(1, round((end - start).total_seconds() * 1000) - 1)
    return (f'sum by (tenant) (sum_over_time({RULE}{{plane="kubernetes"}}'
            f'[{range_ms}ms:{step_s}s] @ {end.timestamp():.3f}))')


def parse_vector(doc: dict) -> dict[str, float]:
    """tenant -> value of an instant vector answer ({"status": "success", "data":
    {"resultType": "vector", "result": [{"metric": {...}, "value": [t, "v"]}]}})."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", doc) if isinstance(doc, dict) else doc
        raise SourceError(f"Prometheus answered an error: {error}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector":
        raise SourceError(f"Prometheus answered a {data.get('resultType')!r}, not a vector")
    out = {}
    for sample in data.get("result", []):
        value = float(sample["value"][1])
        if not math.isfinite(value):
            raise SourceError(f"Prometheus answered {value} for {sample['metric']}")
        out[str(sample["metric"].get("tenant", ""))] = value
    return out


def kubernetes_gpu_hours(query: Callable[[str], dict], start: datetime, end: datetime,
                         step_s: int = 30) -> dict[str, float]:
    """GPU-hours per Kubernetes tenant (namespace) over [start, end]: each step's GPU
    count stands for the step's seconds."""
    summed = parse_vector(query(kubernetes_promql(start, end, step_s)))
    return {t: v * step_s / 3600 for t, v in summed.items() if v}


def kubernetes_usage(query: Callable[[str], dict], edges: list[datetime],
                     step_s: int = 30) -> Usage:
    """The period's GPU-hours per tenant and per bucket: one query each. The buckets'
    ranges, each (a, b], partition the period's, so they add up to its total."""
    return usage(kubernetes_gpu_hours(query, edges[0], edges[-1], step_s),
                 [kubernetes_gpu_hours(query, a, b, step_s) for a, b in zip(edges, edges[1:])])


# --- buckets: GPU-hours over time -----------------------------------------------------------

PER = {"hour": 3600, "day": 86400}
MAX_BUCKETS = 400       # a Prometheus query each: --per hour over a year is refused


@dataclass(frozen=True)
class Usage:
    hours: dict[str, float]                 # tenant -> GPU-hours over the period
    series: dict[str, list[float]]          # tenant -> GPU-hours in each bucket


def usage(hours: dict[str, float], buckets: list[dict[str, float]]) -> Usage:
    tenants = sorted(set(hours).union(*buckets))
    return Usage(hours, {t: [b.get(t, 0.0) for b in buckets] for t in tenants})


def default_per(start: datetime, end: datetime) -> str:
    """Hours for a period of up to two days, else days."""
    return "hour" if (end - start).total_seconds() <= 2 * 86400 else "day"


def bucket_edges(start: datetime, end: datetime, per: str) -> list[datetime]:
    """start, every UTC hour or midnight strictly inside (start, end), end: the first and
    last buckets may be partial, the others are whole hours or days."""
    size = PER[per]
    first = math.floor(start.timestamp() / size) * size + size
    inner = range(first, math.ceil(end.timestamp()), size)
    if len(inner) + 1 > MAX_BUCKETS:
        raise ValueError(f"{len(inner) + 1} buckets of one {per}: more than {MAX_BUCKETS}; "
                         "ask per day or for a shorter period")
    return [start, *(datetime.fromtimestamp(t, UTC) for t in inner), end]


# --- the report -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    plane: str
    status: str                 # ok | skipped (not asked, or no answer) | failed
    where: str = ""             # what was asked: "sacct on ctl1 (10.60.0.11)", a URL
    note: str = ""              # why it is not ok

    def as_dict(self) -> dict:
        return {"plane": self.plane, "status": self.status, "where": self.where,
                "note": self.note}


@dataclass
class UsageReport:
    start: datetime
    end: datetime
    sources: list[Source] = field(default_factory=list)
    hours: dict[str, dict[str, float]] = field(default_factory=dict)   # plane -> tenant
    per: str = "day"                                        # a bucket: PER's key
    edges: list[datetime] = field(default_factory=list)     # the buckets' bounds
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    limits: dict[str, dict[str, float]] = field(default_factory=dict)  # plane -> GPUs

    @property
    def answered(self) -> bool:
        return any(s.status == "ok" for s in self.sources)

    def rows(self) -> list[tuple[str, str, float]]:
        return [(plane, tenant, h) for plane in PLANES
                for tenant, h in sorted(self.hours.get(plane, {}).items())]

    def notes(self) -> list[str]:
        return [f"{s.plane}: {s.note}: {s.status}" for s in self.sources if s.status != "ok"]

    def chart_rows(self) -> list[tuple[str, str]]:
        """(plane, tenant) for each plane that answered: those that used GPUs, and those
        entitled to some that did not."""
        return [(plane, tenant) for plane in PLANES if plane in self.series
                for tenant in sorted(set(self.series[plane]) |
                                     set(self.limits.get(plane, {})))]

    def bucket(self, plane: str, tenant: str) -> list[float]:
        return self.series.get(plane, {}).get(tenant) or [0.0] * (len(self.edges) - 1)

    def as_dict(self) -> dict:
        return {"period": {"start": iso(self.start), "end": iso(self.end)},
                "unit": "GPU-hours",
                "sources": [s.as_dict() for s in self.sources],
                "rows": [{"plane": p, "tenant": t, "gpu_hours": round(h, 6)}
                         for p, t, h in self.rows()],
                "per": self.per, "buckets": [iso(t) for t in self.edges],
                "series": [{"plane": p, "tenant": t,
                            "gpu_hours": [round(h, 6) for h in self.bucket(p, t)],
                            LIMIT_KIND[p].replace(" ", "_") + "_gpus":
                                self.limits.get(p, {}).get(t)}
                           for p, t in self.chart_rows()],
                "totals": {p: round(sum(self.hours[p].values()), 6)
                           for p in PLANES if p in self.hours}}


def measure(report: UsageReport, plane: str, what: str, where: str,
            count: Callable[[], Usage]) -> None:
    """Ask one source and add its answer, or a note saying why there is none."""
    try:
        found = count()
    except (Unreachable, OSError) as exc:
        report.sources.append(Source(plane, "skipped", where,
                                     f"no {what} reachable at {where}: {_reason(exc)}"))
        return
    except (SourceError, ValueError, KeyError, IndexError, TypeError) as exc:
        report.sources.append(Source(plane, "failed", where, f"{what} at {where}: "
                                     f"{_reason(exc)}"))
        return
    report.sources.append(Source(plane, "ok", where))
    report.hours[plane], report.series[plane] = found.hours, found.series


def skip(report: UsageReport, plane: str, why: str) -> None:
    report.sources.append(Source(plane, "skipped", "", why))


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return str(reason).strip().rstrip(".") or type(exc).__name__   # ssh ends with a '.'


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, now: datetime) -> datetime:
    """--since/--until: `now`, a duration before now (90m, 12h, 7d, 2w) or an ISO date or
    time (2026-12-01, 2026-12-01T08:00, with an offset or Z; without one, UTC)."""
    text = text.strip()
    if text == "now":
        return now
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return now - timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither `now`, a duration such as 7d or 12h, nor an "
                         "ISO date or time such as 2026-12-01 or 2026-12-01T08:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# --- output ---------------------------------------------------------------------------------

def printable(text: str) -> str:
    """A label as it may be shown: control and other unprintable characters (a terminal
    escape in a tenant label) written as Python escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def table_rows(report: UsageReport) -> list[list[str]]:
    return [[plane, printable(tenant) or "-", f"{h:.3f}"] for plane, tenant, h in report.rows()]


def title(report: UsageReport) -> str:
    return f"GPU-hours per tenant, {iso(report.start)} .. {iso(report.end)}"


def render_table(report: UsageReport, output=None, console=None) -> None:
    """The rows as estate.output prints any table; the notes after them."""
    from estate.output import Output, echo, print_rows
    output = output or Output.auto
    print_rows(title(report), ["plane", "tenant", "GPU-hours"], table_rows(report), output,
               console)
    for note in report.notes():
        echo(f"note: {printable(note)}")


def render_json(report: UsageReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


# SVG: a row per tenant, a bar per bucket over a time axis, and a stepped line at what the
# tenant is entitled to in each bucket (its GPUs times the bucket's hours). Every label is
# an ElementTree text or attribute, so the serializer escapes it, after printable() has
# removed what XML cannot hold at all. Each bar and line carries its number (data-*), so
# a test reads the figures back without a browser.
SVG_NS = "http://www.w3.org/2000/svg"
LABEL_W, PANEL_W, PANEL_H, ROW_H, TOP, MARGIN = 220, 480, 40, 64, 72, 16
TOTAL_W = 150
LABEL_MAX = 28


def _short(text: str) -> str:
    text = printable(text) or "-"
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 1] + "\u2026"


def _text(parent, x: float, y: float, text: str, **attrs) -> ET.Element:
    el = ET.SubElement(parent, "text", {"x": f"{x:g}", "y": f"{y:g}", **attrs})
    el.text = text
    return el


def _x(report: UsageReport, t: datetime) -> float:
    """Where a moment sits on the time axis."""
    span = (report.end - report.start).total_seconds() or 1.0
    return MARGIN + LABEL_W + PANEL_W * (t - report.start).total_seconds() / span


def entitled(report: UsageReport, plane: str, tenant: str) -> list[float] | None:
    """GPU-hours the tenant's quota or fair share grants in each bucket."""
    gpus = report.limits.get(plane, {}).get(tenant)
    if gpus is None:
        return None
    return [gpus * (b - a).total_seconds() / 3600
            for a, b in zip(report.edges, report.edges[1:])]


def render_svg(report: UsageReport) -> str:
    rows, notes = report.chart_rows(), report.notes()
    height = TOP + ROW_H * (len(rows) or 1) + 18 * len(notes) + 2 * MARGIN + 8
    width = MARGIN * 2 + LABEL_W + PANEL_W + TOTAL_W
    svg = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}",
                             "font-family": "DejaVu Sans, Helvetica, Arial, sans-serif"})
    _text(svg, MARGIN, 28, title(report), **{"font-size": "16", "font-weight": "bold"})
    _legend(svg, report)
    if not rows:
        _text(svg, MARGIN, TOP + 16, "no GPU-hours in this period", **{"font-size": "12"})
    for i, (plane, tenant) in enumerate(rows):
        _row(svg, report, plane, tenant, TOP + i * ROW_H)
    y = TOP + ROW_H * (len(rows) or 1)
    _text(svg, _x(report, report.start), y, iso(report.start), **{"font-size": "10"})
    _text(svg, _x(report, report.end), y, iso(report.end),
          **{"font-size": "10", "text-anchor": "end"})
    y += MARGIN + 4
    for note in notes:
        _text(svg, MARGIN, y, printable(note), **{"font-size": "11", "fill": "#4b5563"})
        y += 18
    return ET.tostring(svg, encoding="unicode") + "\n"


def _legend(svg: ET.Element, report: UsageReport) -> None:
    _text(svg, MARGIN, 48, f"bars: GPU-hours per {report.per} (UTC); dashed: what the tenant's "
          "quota (Kubernetes) or fair share (Slurm) grants", **{"font-size": "11",
                                                                "fill": "#4b5563"})


def _row(svg: ET.Element, report: UsageReport, plane: str, tenant: str, y: float) -> None:
    hours, grant = report.bucket(plane, tenant), entitled(report, plane, tenant)
    total = report.hours.get(plane, {}).get(tenant, 0.0)
    most = max([*hours, *(grant or [])], default=0.0) or 1.0
    base = y + PANEL_H + 8
    g = ET.SubElement(svg, "g", {"class": f"tenant plane-{plane}", "data-plane": plane,
                                 "data-tenant": printable(tenant),
                                 "data-total": f"{total:.6f}", "data-scale": f"{most:.6f}"})
    ET.SubElement(g, "title").text = f"{plane} {printable(tenant)}: {total:.3f} GPU-hours"
    _text(g, MARGIN, base - 4, f"{plane} / {_short(tenant)}", **{"font-size": "12"})
    ET.SubElement(g, "rect", {"class": "panel", "x": f"{_x(report, report.start):.2f}",
                              "y": f"{base - PANEL_H:.2f}", "width": str(PANEL_W),
                              "height": str(PANEL_H), "fill": "#f3f4f6"})
    ET.SubElement(g, "line", {"x1": f"{_x(report, report.start):.2f}", "y1": f"{base:.2f}",
                              "x2": f"{_x(report, report.end):.2f}", "y2": f"{base:.2f}",
                              "stroke": "#9ca3af", "stroke-width": "1"})
    for (a, b), h in zip(zip(report.edges, report.edges[1:]), hours):
        tall = PANEL_H * h / most
        x0, x1 = _x(report, a), _x(report, b)
        bar = ET.SubElement(g, "rect", {
            "class": "bucket", "data-start": iso(a), "data-end": iso(b),
            "data-gpu-hours": f"{h:.6f}", "x": f"{x0:.2f}", "y": f"{base - tall:.2f}",
            "width": f"{max(x1 - x0 - 1, 0.5):.2f}", "height": f"{tall:.2f}",
            "fill": COLOURS.get(plane, "#6b7280")})
        ET.SubElement(bar, "title").text = f"{iso(a)} .. {iso(b)}: {h:.3f} GPU-hours"
    if grant is not None:
        _grant_line(g, report, plane, tenant, grant, most, base)
    _text(g, MARGIN + LABEL_W + PANEL_W + 8, base - 4, f"{total:.3f} GPU-h",
          **{"font-size": "12", "class": "total"})


def _grant_line(g: ET.Element, report: UsageReport, plane: str, tenant: str,
                grant: list[float], most: float, base: float) -> None:
    """A step per bucket at the GPU-hours the tenant is entitled to there."""
    points = []
    for (a, b), h in zip(zip(report.edges, report.edges[1:]), grant):
        y = base - PANEL_H * h / most
        points += [f"{_x(report, a):.2f},{y:.2f}", f"{_x(report, b):.2f},{y:.2f}"]
    gpus = report.limits[plane][tenant]
    _text(g, MARGIN + LABEL_W + PANEL_W + 8, base - PANEL_H + 10,
          f"{LIMIT_KIND[plane]}: {gpus:.3g} GPUs", **{"font-size": "10", "fill": "#4b5563"})
    line = ET.SubElement(g, "polyline", {
        "class": "grant", "data-kind": LIMIT_KIND[plane], "data-gpus": f"{gpus:.6f}",
        "points": " ".join(points), "fill": "none", "stroke": "#111827",
        "stroke-width": "1", "stroke-dasharray": "4 3"})
    ET.SubElement(line, "title").text = f"{LIMIT_KIND[plane]}: {gpus:g} GPUs"
