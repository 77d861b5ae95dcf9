"""Benchmark: `estate diff` of two 10,000-node specs against `estate render` of one (issue 31 §4).

The specs are bench_check_render.big_spec (40 racks of 250 H100 nodes, prod's shape).
NEW differs from OLD in one partition (interactive's MaxTime) and one node group (rack 5's
RealMemory); a second NEW changes ten groups, to show what the diff's own work adds as the
change grows. Every figure is a whole process of the venv's `estate` (interpreter start and
imports included), measured in interleaved rounds (one of each in turn) so that a slower
spell of the machine weighs on both sides of a ratio; one warm-up of each first (Python's
bytecode; Estate keeps nothing between runs, so every diff renders both sides). `estate
diff` runs with --no-diff --output json and must exit 3 (a change found). Measured:

- render: `estate render OLD -o DIR` (the yardstick);
- diff: `estate diff OLD NEW`;
- diff_10_groups: `estate diff OLD NEW10`;
- diff_against: `estate diff NEW --against DIR`, DIR the tree render wrote.

Usage: python bench/bench_diff.py [--runs N] [--racks R] [--json FILE]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_check_render import big_spec  # noqa: E402

ESTATE = Path(sys.executable).with_name("estate")


def changed(spec: dict, groups: int) -> dict:
    """One partition's MaxTime and `groups` node groups' RealMemory changed."""
    new = copy.deepcopy(spec)
    new["slurm"]["partitions"][1]["max_time"] = "12:00:00"
    racks = [g for g in new["nodes"] if g.get("rack", "").startswith("r")
             and g["hosts"].startswith("gpu")]
    for g in racks[4:4 + groups]:
        g["slurm"]["real_memory_mb"] -= 1024
    return new


def timed(argv: list[str], expect: int = 0) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}, not {expect}:\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--racks", type=int, default=40, help="racks of 250 nodes (40: 10,000)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    spec = big_spec(racks=args.racks)
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(),
           "nodes": args.racks * 250, "loadavg_start": os.getloadavg(),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()}
    with tempfile.TemporaryDirectory(prefix="estate-bench-diff-") as work:
        w = Path(work)
        old, new1, new10 = w / "old.yaml", w / "new1.yaml", w / "new10.yaml"
        old.write_text(yaml.safe_dump(spec, sort_keys=False))
        new1.write_text(yaml.safe_dump(changed(spec, 1), sort_keys=False))
        new10.write_text(yaml.safe_dump(changed(spec, 10), sort_keys=False))
        render = [str(ESTATE), "render", str(old), "-o", str(w / "out")]
        estate = [str(ESTATE), "diff"]
        tail = ["--no-diff", "--output", "json"]
        cases = {
            "render": (render, 0),
            "diff": ([*estate, str(old), str(new1), *tail], 3),
            "diff_10_groups": ([*estate, str(old), str(new10), *tail], 3),
            "diff_against": ([*estate, str(new1), "--against", str(w / "out"), *tail], 3),
        }
        timed(render)   # the tree --against reads
        for argv, code in cases.values():   # warm-up
            timed(argv, code)
        times = {k: [] for k in cases}
        for _ in range(args.runs):
            for k, (argv, code) in cases.items():
                times[k].append(timed(argv, code))
        diff1 = cases["diff"][0]
        report = json.loads(subprocess.run(diff1, capture_output=True, text=True).stdout)
    for k, ts in times.items():
        res[f"{k}_s"] = round(statistics.median(ts), 3)
        res[f"{k}_all"] = [round(t, 3) for t in ts]
    for k in times:
        if k != "render":
            res[f"ratio_{k}"] = round(res[f"{k}_s"] / res["render_s"], 2)
            # each round's own ratio: a slower spell of the machine weighs on both sides
            paired = [a / b for a, b in zip(times[k], times["render"])]
            res[f"paired_{k}_max"] = round(max(paired), 2)
    res["changed_artifacts"] = len(report["artifacts"])
    res["node_rows"] = [(r["hosts"], r["action"]) for r in report["nodes"]][:6]
    res["loadavg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    print("| nodes | estate render | estate diff | ten groups | --against |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {res['nodes']:,} | {res['render_s']} s | {res['diff_s']} s "
          f"({res['ratio_diff']}) | {res['diff_10_groups_s']} s "
          f"({res['ratio_diff_10_groups']}) | {res['diff_against_s']} s "
          f"({res['ratio_diff_against']}) |")
    print(f"largest ratio of one round: diff {res['paired_diff_max']}, ten groups "
          f"{res['paired_diff_10_groups_max']}, --against {res['paired_diff_against_max']} "
          f"({args.runs} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
