"""Estate's Slurm exporter: jobs, pending reasons, nodes, GPUs per account, the scheduler.

No Slurm exporter is packaged in Debian, and the ones on PyPI and GitHub either need a Go
toolchain or scrape text formats that changed between 22.05 and 24.11. This one is small,
standalone (the standard library and prometheus_client: Debian's python3-prometheus-client
on the nodes) and reads Slurm through its own clients over munge like any user's squeue:
it holds no token and no key. It runs as SlurmUser (roles/slurm_exporter), which
PrivateData never hides a job from; as another user it would count that user's jobs only. `squeue --json` (both releases; the
shapes differ and are read alike here), `sinfo` and `sdiag`.

The metrics, their labels and help come from the rendered configuration (Estate's
estate.model.monitoring.SLURM_METRICS, the contract the rendered rules read), so the names
live in one place; this file computes each one and refuses to start on one it does not know.

    python3 slurm_exporter.py /etc/estate/monitoring/slurm-exporter.json

The configuration: {"listen": "ADDR:PORT", "interval": SECONDS, "node_states": [...],
"metrics": [{"name", "kind", "labels", "help"}, ...]}. Estate installs this file itself on
the controllers (estate.render.monitoring), so it imports nothing of Estate's.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

ACTIVE = ("pending", "running", "suspended", "completing")
# sinfo's extended state, its flags stripped (idle~ powered down, down* not responding)
_STATE_WORD = re.compile(r"[a-z]+")


def _number(value) -> float:
    """24.11 writes numbers as {"set": bool, "number": n}; 22.05 as plain numbers."""
    if isinstance(value, dict):
        return float(value.get("number") or 0) if value.get("set", True) else 0.0
    return float(value or 0)


def _state(value) -> str:
    """A job's base state in lower case: 22.05 writes a string, 24.11 a list of flags
    (the base state first)."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).lower()


def _gpus(tres: str) -> int:
    """The untyped gres/gpu count of a TRES string (typed entries repeat it)."""
    for part in (tres or "").split(","):
        key, _, count = part.partition("=")
        if key == "gres/gpu":
            return int(count or 0)
    return 0


def _gres_gpus(gres: str) -> int:
    """GPUs of a node's Gres as sinfo prints it: gpu:a100:2(S:0-1),gpu:l4:1 -> 3."""
    total = 0
    for part in re.sub(r"\([^)]*\)", "", gres or "").split(","):
        fields = part.split(":")
        if fields[0] == "gpu" and len(fields) > 1 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def jobs(squeue_json: str, now: float) -> dict[str, dict[tuple, float]]:
    """Job metrics from `squeue --json`, keyed by metric and label values."""
    out: dict[str, dict[tuple, float]] = {"slurm_jobs": {}, "slurm_jobs_pending": {}, "slurm_job_pending_seconds_max": {},
           "slurm_gpus_allocated": {}, "slurm_job_info": {}}
    for job in json.loads(squeue_json).get("jobs", []):
        state = _state(job.get("job_state"))
        if state not in ACTIVE:
            continue
        part, account = str(job.get("partition", "")), str(job.get("account", ""))
        key = (state, part, account, str(job.get("user_name", "")))
        out["slurm_jobs"][key] = out["slurm_jobs"].get(key, 0) + 1
        if state == "pending":
            reason = str(job.get("state_reason", "")) or "None"
            pkey = (reason, part, account)
            out["slurm_jobs_pending"][pkey] = out["slurm_jobs_pending"].get(pkey, 0) + 1
            waited = max(0.0, now - _number(job.get("submit_time")))
            prev = out["slurm_job_pending_seconds_max"].get(pkey, 0.0)
            out["slurm_job_pending_seconds_max"][pkey] = max(prev, waited)
        elif state == "running":
            out["slurm_job_info"][(str(job.get("job_id", "")), part, account, key[3])] = 1
            gkey = (part, account)
            out["slurm_gpus_allocated"][gkey] = out["slurm_gpus_allocated"].get(gkey, 0) + \
                _gpus(str(job.get("tres_alloc_str", "")))
    return out


def nodes(sinfo: str, node_states: list[str]) -> dict[str, dict[tuple, float]]:
    """Node metrics from `sinfo -h -N -a -o %N|%P|%T|%G`: every state of every partition
    (0 where none), and each partition's configured GPUs."""
    count: dict[tuple, float] = {}
    gpus: dict[tuple, float] = {}
    member: dict[tuple, float] = {}
    for line in sinfo.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        node, part, state, gres = fields
        part = part.rstrip("*")     # sinfo marks the default partition
        word = _STATE_WORD.match(state)
        state = word.group(0) if word else state
        for s in node_states:
            count.setdefault((s, part), 0)
        count[(state, part)] = count.get((state, part), 0) + 1
        gpus[(part,)] = gpus.get((part,), 0) + _gres_gpus(gres)
        member[(node, part)] = 1
    return {"slurm_nodes": count, "slurm_gpus_total": gpus, "slurm_node_partition": member}


def scheduler(sdiag: str) -> dict[str, dict[tuple, float]]:
    """The main scheduler's last cycle (sdiag prints microseconds)."""
    main = sdiag.split("Main schedule statistics", 1)[-1]
    found = re.search(r"Last cycle:\s+(\d+)", main)
    return {"slurm_scheduler_cycle_seconds":
            {(): int(found.group(1)) / 1e6} if found else {}}


def collect(run, node_states: list[str], now: float | None = None
            ) -> dict[str, dict[tuple, float]]:
    """Every metric's samples; run(argv) -> stdout runs a Slurm client. A client that fails
    (slurmctld unreachable, munge down, a timeout, output it cannot parse) leaves slurm_up
    at 0 and no other series: the exporter keeps answering, so Prometheus tells a Slurm it
    cannot read from an exporter that is down, and no stale number stands in for the queue."""
    now = time.time() if now is None else now
    try:
        out = jobs(run(["squeue", "--json", "--all"]), now)
        out.update(nodes(run(["sinfo", "-h", "-N", "-a", "-o", "%N|%P|%T|%G"]), node_states))
        out.update(scheduler(run(["sdiag"])))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"slurm_exporter: cannot read Slurm: {exc}", file=sys.stderr, flush=True)
        return {"slurm_up": {(): 0}}
    out["slurm_up"] = {(): 1}
    return out


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


class SlurmCollector:
    """prometheus_client's custom collector: at most one set of Slurm queries per
    interval, however many scrapers ask (Slurm's RPCs are the expensive part)."""

    def __init__(self, config: dict, run=_run):
        self.metrics = config["metrics"]
        self.states = config["node_states"]
        self.interval = float(config.get("interval", 15))
        self.run = run
        self.lock = threading.Lock()
        self.cached: tuple[float, dict] | None = None
        unknown = [m["name"] for m in self.metrics
                   if tuple(m["labels"]) != KNOWN.get(m["name"])]
        if unknown:
            raise SystemExit(f"slurm_exporter: the configuration asks for metrics (or "
                             f"labels) this exporter does not compute: {', '.join(unknown)}")

    def samples(self) -> dict:
        with self.lock:
            if self.cached is None or time.monotonic() - self.cached[0] >= self.interval:
                self.cached = (time.monotonic(), collect(self.run, self.states))
            return self.cached[1]

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        data = self.samples()
        for m in self.metrics:
            family = (CounterMetricFamily if m["kind"] == "counter" else GaugeMetricFamily)(
                m["name"], m["help"], labels=m["labels"])
            for values, value in sorted(data.get(m["name"], {}).items()):
                family.add_metric(list(values), value)
            yield family


# What this file computes: metric -> its label values' order in the samples' keys.
KNOWN = {"slurm_jobs": ("state", "partition", "account", "user"),
         "slurm_jobs_pending": ("reason", "partition", "account"),
         "slurm_job_pending_seconds_max": ("reason", "partition", "account"),
         "slurm_nodes": ("state", "partition"),
         "slurm_gpus_allocated": ("partition", "account"),
         "slurm_job_info": ("job_id", "partition", "account", "user"),
         "slurm_gpus_total": ("partition",),
         "slurm_scheduler_cycle_seconds": (),
         "slurm_node_partition": ("nodename", "partition"),
         "slurm_up": ()}


def main(argv: list[str]) -> int:
    from prometheus_client import REGISTRY, start_http_server
    with open(argv[1]) as f:
        config = json.load(f)
    addr, _, port = config["listen"].rpartition(":")
    REGISTRY.register(SlurmCollector(config))   # type: ignore[arg-type]  # a collector by its collect()
    start_http_server(int(port), addr=addr)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
