"""Benchmark: load + check + render a 10,000-node, 80,000-GPU estate.

The spec is generated in memory (40 racks of 250 H100 nodes, one leaf switch per
rack, 4 spines, a core; 625 NVLink-style blocks of 16 where the host's Slurm reads blocks,
>= 23.11) plus the service, Kubernetes
and storage nodes of stacks/example-prod.yaml. Reference measurements in the same
run make the figures comparable across machines:

- yaml.safe_load of the same spec text (the floor for anything that reads the spec);
- ``scontrol show hostnames`` expanding the same 10,000-node hostlist (if installed).

Usage: python bench/bench_check_render.py [--repeat N] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from estate.catalogue import DEFAULT_SLURM  # noqa: E402
from estate.check import check_spec, load_domains  # noqa: E402
from estate.model.slurm import BLOCK_TOPOLOGY  # noqa: E402
from estate.model.slurm_keys import at_least  # noqa: E402
from estate.render import render_all  # noqa: E402
from estate.spec.load import load_text  # noqa: E402
from estate.spec.resolved import Estate  # noqa: E402

RACKS, PER_RACK, BLOCK = 40, 250, 16
GPU_NODES = RACKS * PER_RACK
ALL_GPUS = f"gpu[00001-{GPU_NODES:05d}]"


def _blocks(nodes: int) -> list[tuple[int, int]]:
    """First and last node of each block of BLOCK; the last block takes any remainder
    (slurmctld refuses a block under the base size)."""
    starts = range(1, nodes - BLOCK + 2, BLOCK)
    return [(lo, lo + BLOCK - 1) for lo in starts[:-1]] + [(starts[-1], nodes)]


def big_spec(racks: int = RACKS, k8s_workers: int = 0, per_rack: int = PER_RACK) -> dict:
    """prod's shape at scale: racks of per_rack Slurm nodes (the default: 10,000 in racks
    of 250; prod's own racks hold 32), one node group and leaf switch each, and, when
    k8s_workers is set, that many L40S Kubernetes workers instead of prod's four."""
    gpu_nodes = racks * per_rack
    all_gpus = f"gpu[00001-{gpu_nodes:05d}]"
    prod = yaml.safe_load((ROOT / "stacks" / "example-prod.yaml").read_text())
    prod["name"] = "bench"
    # /18 holds 16,382 hosts; bigger estates get /16s (65,534)
    wide = "/16" if gpu_nodes > 16000 or k8s_workers > 500 else None
    prod["segments"] = [
        {"name": "management", "cidr": f"10.0.0.0{wide or '/18'}", "vlan": 100,
         "purpose": "management"},
        {"name": "fabric", "cidr": f"10.1.0.0{wide or '/18'}", "vlan": 200,
         "purpose": "fabric", "mtu": 9000},
        {"name": "service", "cidr": f"10.2.0.0{wide or '/22'}", "vlan": 300,
         "purpose": "service"},
        {"name": "storage", "cidr": f"10.3.0.0{wide or '/18'}", "vlan": 400,
         "purpose": "storage", "mtu": 9000},
    ]
    service = [g for g in prod["nodes"] if not g["hosts"].startswith("gpu")]
    for group in service:  # prod's explicit addresses lie outside the bigger segments
        group["addresses"] = {seg: "auto" for seg in group["addresses"]}
    if k8s_workers:
        width = max(2, len(str(k8s_workers)))
        inf = f"inf[{1:0{width}d}-{k8s_workers:0{width}d}]"
        for group in service:
            if group["hosts"].startswith("inf"):
                group["hosts"] = inf
        tenants = prod["kubernetes"]["tenants"]
        tenants[0]["gpus"]["l40s"] = 8 * k8s_workers - tenants[1]["gpus"]["l40s"]
        prod["kubernetes"]["pod_cidr"] = "10.128.0.0/10"   # a /24 per node
        for mount in prod["storage"]["mounts"]:
            mount["clients"] = mount["clients"].replace("inf[01-04]", inf)
    rack_groups = [{
        "hosts": f"gpu[{r * per_rack + 1:05d}-{(r + 1) * per_rack:05d}]", "class": "h100-8x",
        "plane": "slurm", "roles": ["slurm_worker"], "rack": f"r{r + 1:02d}",
        "switch": f"leaf{r + 1:02d}",
        "addresses": {"management": "auto", "fabric": "auto", "storage": "auto"},
        "slurm": {"real_memory_mb": 2000000, "features": ["h100", "ib"]},
    } for r in range(racks)]
    prod["nodes"] = service[:2] + rack_groups + service[2:]
    spines = [{"name": f"spine{s + 1}",
               "switches": [f"leaf{r + 1:02d}" for r in range(s * 10, min(s * 10 + 10, racks))]}
              for s in range(-(-racks // 10))]
    prod["topology"] = {
        "switches": [{"name": "core", "switches": [s["name"] for s in spines]}] + spines
        + [{"name": f"leaf{r + 1:02d}"} for r in range(racks)]}
    # Rendered for this host's Slurm, the one bench_scale's slurmctld reference runs; its
    # blocks only where that release reads them (topology/block, >= 23.11).
    prod["slurm"]["version"] = DEFAULT_SLURM
    if at_least(DEFAULT_SLURM, BLOCK_TOPOLOGY):
        prod["topology"] |= {
            "blocks": [{"name": f"b{b + 1:03d}", "nodes": f"gpu[{lo:05d}-{hi:05d}]"}
                       for b, (lo, hi) in enumerate(_blocks(gpu_nodes))],
            "block_sizes": [16, 32, 64, 128]}
    prod["slurm"]["partitions"] = [
        {"name": "batch", "nodes": all_gpus, "default": True, "max_time": "2-00:00:00",
         "qos": "normal"},
        {"name": "interactive", "nodes": "gpu[00001-00500]", "max_time": "08:00:00",
         "qos": "interactive", "priority_tier": 2},
        {"name": "debug", "nodes": f"gpu[{gpu_nodes - 15:05d}-{gpu_nodes:05d}]",
         "max_time": "00:30:00", "qos": "debug", "priority_tier": 3},
    ]
    for mount in prod["storage"]["mounts"]:
        mount["clients"] = mount["clients"].replace("gpu[001-128]", all_gpus)
    return prod


def timed(fn, repeat: int, clock=time.perf_counter) -> tuple[float, float, object]:
    """Best and median time of repeat runs, and the last result. Wall time by default;
    time.process_time gives CPU time, which other load on a shared machine disturbs less."""
    times, result = [], None
    for _ in range(repeat):
        t = clock()
        result = fn()
        times.append(clock() - t)
    return min(times), statistics.median(times), result


def pipeline(text: str):
    loaded = load_text(text, "bench.yaml")
    assert loaded.spec is not None, loaded.findings[:3]
    estate = Estate(loaded.spec)
    findings = check_spec(estate, loaded.source.locate)
    artifacts = render_all(estate, "bench.yaml")
    return findings, artifacts


def stages(text: str) -> dict[str, float]:
    """One run split by stage (the Estate's caches are fresh each run)."""
    out, t = {}, time.perf_counter()
    loaded = load_text(text, "bench.yaml")
    out["load"], t = time.perf_counter() - t, time.perf_counter()
    estate = Estate(loaded.spec)
    check_spec(estate, loaded.source.locate)
    out["check"], t = time.perf_counter() - t, time.perf_counter()
    render_all(estate, "bench.yaml")
    out["render"] = time.perf_counter() - t
    return out


def scontrol_expand(repeat: int):
    exe = shutil.which("scontrol")
    if not exe:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        # scontrol reads a slurm.conf before anything else; two lines are enough offline.
        conf = Path(tmp) / "slurm.conf"
        conf.write_text("ClusterName=bench\nSlurmctldHost=localhost\n")
        env = {**os.environ, "SLURM_CONF": str(conf)}

        def run():
            out = subprocess.run([exe, "show", "hostnames", ALL_GPUS], capture_output=True,
                                 text=True, check=True, env=env).stdout
            assert out.count("\n") == GPU_NODES
        return timed(run, repeat)[:2]


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")),
                "unknown")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    load_domains()
    text = yaml.safe_dump(big_spec(), sort_keys=False)
    # The first run pays for template compilation and cold caches, as one CLI call does.
    first = timed(lambda: pipeline(text), 1)[0]
    best, median, (findings, artifacts) = timed(lambda: pipeline(text), args.repeat)
    cpu_best = timed(lambda: pipeline(text), args.repeat, time.process_time)[0]
    y_cpu = timed(lambda: yaml.safe_load(text), args.repeat, time.process_time)[0]
    errors = [f for f in findings if f.severity.value == "error"]
    split = min((stages(text) for _ in range(args.repeat)), key=lambda s: sum(s.values()))
    y_best, y_median, _ = timed(lambda: yaml.safe_load(text), args.repeat)
    sc = scontrol_expand(args.repeat)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(), "loadavg_1m": round(os.getloadavg()[0], 2),
        "nodes": GPU_NODES, "gpus": GPU_NODES * 8, "spec_bytes": len(text),
        "findings": len(findings), "errors": len(errors), "artifacts": len(artifacts),
        "pipeline_first_s": round(first, 4), "pipeline_best_s": round(best, 4),
        "pipeline_cpu_best_s": round(cpu_best, 4), "yaml_safe_load_cpu_best_s": round(y_cpu, 4), "pipeline_median_s": round(median, 4),
        "stages_s": {k: round(v, 4) for k, v in split.items()},
        "yaml_safe_load_best_s": round(y_best, 4),
        "scontrol_hostnames_best_s": round(sc[0], 4) if sc else None,
        "ratio_pipeline_to_yaml": round(best / y_best, 2),
        "ratio_pipeline_to_yaml_cpu": round(cpu_best / y_cpu, 2),
        "ratio_pipeline_to_scontrol": round(best / sc[0], 2) if sc else None,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:28} {v}")
    if errors:
        print("unexpected errors:", *[f"{f.id} {f.path}: {f.message}" for f in errors[:5]],
              sep="\n  ", file=sys.stderr)
        return 1
    return 0 if best < 1.0 else 2


if __name__ == "__main__":
    sys.exit(main())
