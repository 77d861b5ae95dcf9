"""`estate report SPEC`: GPU-hours per tenant on both planes over a period.

The Slurm plane's come from Slurm accounting (sacct, one line per job allocation), the
Kubernetes plane's from Prometheus (the recording rule tenant:gpus_allocated:sum that
estate.render.monitoring renders, integrated over the period). Both are reached through
callables the caller hands in, so everything here is pure: ``run`` takes an argv and
returns its stdout (ssh to the controller, a lab's namespace), ``query`` takes PromQL and
returns Prometheus' JSON answer. estate/report_cli.py wires them to the nodes.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

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


def slurm_gpu_hours(run: Callable[[list[str]], str], start: datetime,
                    end: datetime) -> dict[str, float]:
    """GPU-hours per Slurm account over [start, end], from sacct through `run`."""
    out: dict[str, float] = {}
    for job in parse_sacct(run(sacct_argv(start, end))):
        seconds = gpu_seconds(job, start, end)
        if seconds:
            out[job.account] = out.get(job.account, 0.0) + seconds / 3600
    return out


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
class Report:
    start: datetime
    end: datetime
    sources: list[Source] = field(default_factory=list)
    hours: dict[str, dict[str, float]] = field(default_factory=dict)   # plane -> tenant

    @property
    def answered(self) -> bool:
        return any(s.status == "ok" for s in self.sources)

    def rows(self) -> list[tuple[str, str, float]]:
        return [(plane, tenant, h) for plane in PLANES
                for tenant, h in sorted(self.hours.get(plane, {}).items())]

    def notes(self) -> list[str]:
        return [f"{s.plane}: {s.note}: {s.status}" for s in self.sources if s.status != "ok"]

    def as_dict(self) -> dict:
        return {"period": {"start": iso(self.start), "end": iso(self.end)},
                "unit": "GPU-hours",
                "sources": [s.as_dict() for s in self.sources],
                "rows": [{"plane": p, "tenant": t, "gpu_hours": round(h, 6)}
                         for p, t, h in self.rows()],
                "totals": {p: round(sum(self.hours[p].values()), 6)
                           for p in PLANES if p in self.hours}}


def measure(report: Report, plane: str, what: str, where: str,
            count: Callable[[], dict[str, float]]) -> None:
    """Ask one source and add its answer, or a note saying why there is none."""
    try:
        hours = count()
    except (Unreachable, OSError) as exc:
        report.sources.append(Source(plane, "skipped", where,
                                     f"no {what} reachable at {where}: {_reason(exc)}"))
        return
    except (SourceError, ValueError, KeyError, IndexError, TypeError) as exc:
        report.sources.append(Source(plane, "failed", where, f"{what} at {where}: "
                                     f"{_reason(exc)}"))
        return
    report.sources.append(Source(plane, "ok", where))
    report.hours[plane] = hours


def skip(report: Report, plane: str, why: str) -> None:
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


def table_rows(report: Report) -> list[list[str]]:
    return [[plane, printable(tenant) or "-", f"{h:.3f}"] for plane, tenant, h in report.rows()]


def title(report: Report) -> str:
    return f"GPU-hours per tenant, {iso(report.start)} .. {iso(report.end)}"


def render_table(report: Report, output=None, console=None) -> None:
    """The rows as estate.output prints any table; the notes after them."""
    from estate.output import Output, echo, print_rows
    output = output or Output.auto
    print_rows(title(report), ["plane", "tenant", "GPU-hours"], table_rows(report), output,
               console)
    for note in report.notes():
        echo(f"note: {printable(note)}")


def render_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


# SVG: one bar per row; every label an ElementTree text or attribute, so the serializer
# escapes it, after printable() has removed what XML cannot hold at all.
SVG_NS = "http://www.w3.org/2000/svg"
LABEL_W, BAR_W, ROW_H, TOP, MARGIN = 240, 400, 24, 56, 16
LABEL_MAX = 32


def _short(text: str) -> str:
    text = printable(text) or "-"
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 1] + "\u2026"


def _text(parent, x: float, y: float, text: str, **attrs) -> ET.Element:
    el = ET.SubElement(parent, "text", {"x": f"{x:g}", "y": f"{y:g}", **attrs})
    el.text = text
    return el


def render_svg(report: Report) -> str:
    rows, notes = report.rows(), report.notes()
    most = max((h for _, _, h in rows), default=0.0) or 1.0
    height = TOP + ROW_H * (len(rows) or 1) + 18 * len(notes) + 2 * MARGIN
    width = MARGIN * 2 + LABEL_W + BAR_W + 100
    svg = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}",
                             "font-family": "DejaVu Sans, Helvetica, Arial, sans-serif"})
    _text(svg, MARGIN, 28, title(report), **{"font-size": "16", "font-weight": "bold"})
    if not rows:
        _text(svg, MARGIN, TOP + 16, "no GPU-hours in this period", **{"font-size": "12"})
    for i, (plane, tenant, h) in enumerate(rows):
        y = TOP + i * ROW_H
        bar = ET.SubElement(svg, "g", {"class": f"bar plane-{plane}", "data-plane": plane,
                                       "data-tenant": printable(tenant)})
        ET.SubElement(bar, "title").text = f"{plane} {printable(tenant)}: {h:.3f} GPU-hours"
        _text(bar, MARGIN, y + 16, f"{plane} / {_short(tenant)}", **{"font-size": "12"})
        w = BAR_W * h / most
        ET.SubElement(bar, "rect", {"x": str(MARGIN + LABEL_W), "y": str(y + 4),
                                    "width": f"{w:.1f}", "height": str(ROW_H - 8),
                                    "fill": COLOURS.get(plane, "#6b7280")})
        _text(bar, MARGIN + LABEL_W + w + 6, y + 16, f"{h:.3f}", **{"font-size": "12"})
    y = TOP + ROW_H * (len(rows) or 1) + MARGIN
    for note in notes:
        _text(svg, MARGIN, y, printable(note), **{"font-size": "11", "fill": "#4b5563"})
        y += 18
    return ET.tostring(svg, encoding="unicode") + "\n"
