"""What the firewall costs job traffic on the fabric (docs/jobs.md), measured in the Docker
lab: iperf3 from gpu2 to gpu1 over their fabric addresses, in paired rounds with the
rendered ruleset loaded and with Estate's table deleted (no filter, no conntrack), then the
median of the per-round ratios. The claim it checks: the ruleset costs at most 2% of
throughput. Then an all-to-all burst of connections between the two workers on the fabric,
with the ruleset loaded: gpu1's conntrack count must stay where it was (the fabric's job
traffic is untracked), while the same burst on the management segment, as a control,
raises it (so the count is measured where it moves).

Needs a running lab (`estate lab up`, or `make lab`): containers estate-lab-gpu1 and
estate-lab-gpu2, reached with `docker exec`, provisioned (the firewall role installs the
ruleset at /etc/nftables.conf). Installs iperf3 on the two workers if missing (Debian's
package; the lab nodes reach the mirror). Leaves the ruleset loaded when it ends, even on
failure. Prints a line for BENCHMARKS.md.

    .venv/bin/python bench/bench_fabric.py [--rounds 7] [--seconds 10] [--spec stacks/lab.yaml]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONTAINER = "estate-lab-{}"
RULESET = "/etc/nftables.conf"      # where roles/firewall installs the node's ruleset
COUNT = "/proc/sys/net/netfilter/nf_conntrack_count"
LIMIT = 0.02                        # the firewall may cost at most 2% of throughput

# Many short connections from this node to each peer (an all-to-all's connection storm),
# and a listener that accepts them: run on both workers at once.
LISTEN = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1024); s.settimeout(0.5)
end = time.time() + float(sys.argv[3])
while time.time() < end:
    try:
        s.accept()[0].close()
    except OSError:
        pass
"""
BURST = r"""
import socket, sys
src, port, n, peers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
ok = 0
for _ in range(n):
    for peer in peers:
        s = socket.socket(); s.settimeout(2); s.bind((src, 0))
        try:
            s.connect((peer, port)); ok += 1
        except OSError:
            pass
        s.close()
print(ok)
"""


class BenchError(RuntimeError):
    pass


def docker(node: str, command: str, check: bool = True, timeout: float = 600
           ) -> subprocess.CompletedProcess:
    argv = ["docker", "exec", CONTAINER.format(node), "sh", "-c", command]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise BenchError(f"{node}: `{command}` failed ({out.returncode}): "
                         f"{(out.stderr or out.stdout).strip()[-500:]}")
    return out


def lab_facts(spec: Path) -> dict:
    """The workers' fabric and management addresses and the job ports, from the spec."""
    from estate.model import jobs
    from estate.pipeline import build
    result = build(spec)
    if not result.ok:
        raise BenchError(f"{spec} does not check: {result.findings[:3]}")
    est = result.estate
    fabric = jobs.fabrics(est)
    if not fabric:
        raise BenchError(f"{spec}: the workers have no fabric address; nothing to measure")
    mgmt = est.spec.slurm.address_segment
    lo, hi = jobs.ports(est)
    port = 5201 if lo <= 5201 <= hi else hi   # iperf3's default, or a job port
    return {"fabric": {n: str(est.address(n, fabric[0])) for n in ("gpu1", "gpu2")},
            "management": {n: str(est.address(n, mgmt)) for n in ("gpu1", "gpu2")},
            "port": port, "burst_port": port + 1 if port + 1 <= hi else port - 1}


def preflight(facts: dict) -> None:
    for node in ("gpu1", "gpu2"):
        out = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}",
                              CONTAINER.format(node)], capture_output=True, text=True)
        if out.stdout.strip() != "true":
            raise BenchError(f"container {CONTAINER.format(node)} is not running: start the "
                             "lab (estate lab up) first")
        addrs = docker(node, "ip -o -4 addr show").stdout
        for seg in ("fabric", "management"):
            if f" {facts[seg][node]}/" not in addrs:
                raise BenchError(f"{node} has no address {facts[seg][node]} ({seg}) on any "
                                 f"interface: is the lab provisioned from this spec?\n{addrs}")
        if docker(node, f"test -s {RULESET} && nft list table inet estate >/dev/null",
                  check=False).returncode != 0:
            raise BenchError(f"{node}: no Estate ruleset loaded from {RULESET}: provision "
                             "the lab (the firewall role) first")
        if docker(node, f"grep -q 'job-tcp' {RULESET} && grep -q notrack {RULESET}",
                  check=False).returncode != 0:
            raise BenchError(f"{node}: {RULESET} has no job flows (job-tcp, notrack): the "
                             "lab was provisioned from an Estate without them, and would "
                             "drop the benchmark's traffic; provision it from this checkout")
        if docker(node, "command -v iperf3", check=False).returncode != 0:
            print(f"{node}: installing iperf3", flush=True)
            docker(node, "DEBIAN_FRONTEND=noninteractive apt-get install -y "
                         "--no-install-recommends iperf3 >/dev/null 2>&1 || "
                         "(apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive "
                         "apt-get install -y --no-install-recommends iperf3 >/dev/null)")


def ruleset(loaded: bool) -> None:
    for node in ("gpu1", "gpu2"):
        if loaded:
            docker(node, f"nft -f {RULESET}")
        else:
            docker(node, "nft delete table inet estate", check=False)
    for node in ("gpu1", "gpu2"):
        have = docker(node, "nft list table inet estate", check=False).returncode == 0
        if have != loaded:
            raise BenchError(f"{node}: the ruleset is {'not ' if loaded else ''}loaded")


def throughput(facts: dict, seconds: int) -> float:
    """Gbit/s gpu2 -> gpu1 on the fabric, one iperf3 stream, as the receiver counted it."""
    dst, src, port = facts["fabric"]["gpu1"], facts["fabric"]["gpu2"], facts["port"]
    try:
        out = docker("gpu2", f"iperf3 -J --connect-timeout 5000 -c {dst} -B {src} -p {port} "
                             f"-t {seconds} -O 1", timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        docker("gpu2", "pids=$(pidof iperf3) && kill $pids; true", check=False)
        raise BenchError(f"iperf3 gpu2 -> gpu1 {dst}:{port} did not finish in {seconds + 60} s")
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def count(node: str) -> int:
    return int(docker(node, f"cat {COUNT}").stdout.strip())


def burst(facts: dict, segment: str, n: int) -> int:
    """Both workers connect to each other n times at once; returns connections made."""
    addr, port = facts[segment], facts["burst_port"]
    listeners = [subprocess.Popen(["docker", "exec", CONTAINER.format(node), "python3", "-c",
                                   LISTEN, addr[node], str(port), "60"])
                 for node in ("gpu1", "gpu2")]
    time.sleep(1.0)
    try:
        senders = [subprocess.Popen(["docker", "exec", CONTAINER.format(node), "python3", "-c",
                                     BURST, addr[node], str(port), str(n),
                                     addr["gpu2" if node == "gpu1" else "gpu1"]],
                                    stdout=subprocess.PIPE, text=True)
                   for node in ("gpu1", "gpu2")]
        return sum(int(p.communicate(timeout=300)[0].strip() or 0) for p in senders)
    finally:
        for p in listeners:   # the listeners in the containers end by themselves (60 s)
            p.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=500,
                    help="connections each worker opens to the other in the burst")
    ap.add_argument("--spec", type=Path, default=ROOT / "stacks" / "lab.yaml")
    args = ap.parse_args()
    facts = lab_facts(args.spec)
    preflight(facts)
    server = f"iperf3 -s -D -B {facts['fabric']['gpu1']} -p {facts['port']}"
    stop = "pids=$(pidof iperf3) && kill $pids; true"   # pidof: sysvinit-utils, essential
    docker("gpu1", f"{stop}; sleep 0.5; {server}")
    rounds, ok = [], True
    try:
        for i in range(args.rounds):
            # paired: both conditions in each round, the order alternating
            pair = {}
            for loaded in ((True, False) if i % 2 == 0 else (False, True)):
                ruleset(loaded)
                pair[loaded] = throughput(facts, args.seconds)
            rounds.append(pair)
            print(f"round {i + 1}: ruleset {pair[True]:.2f} Gbit/s, none {pair[False]:.2f} "
                  f"Gbit/s, ratio {pair[True] / pair[False]:.3f}", flush=True)
        ruleset(True)
        # the all-to-all's connections on the fabric: untracked, the count stays
        before = count("gpu1")
        made = burst(facts, "fabric", args.connections)
        fabric_delta = count("gpu1") - before
        before = count("gpu1")
        made_mgmt = burst(facts, "management", args.connections // 5)
        mgmt_delta = count("gpu1") - before
    finally:
        docker("gpu1", stop, check=False)
        ruleset(True)
    ratio = statistics.median(r[True] / r[False] for r in rounds)
    with_fw = statistics.median(r[True] for r in rounds)
    without = statistics.median(r[False] for r in rounds)
    print(f"\nthroughput gpu2 -> gpu1 on the fabric, median of {args.rounds} paired rounds of "
          f"{args.seconds} s: ruleset {with_fw:.2f} Gbit/s, none {without:.2f} Gbit/s, "
          f"ratio {ratio:.3f} (claim: >= {1 - LIMIT:.2f})")
    if ratio < 1 - LIMIT:
        ok = False
        print(f"FAIL: the ruleset costs {1 - ratio:.1%} of throughput, more than {LIMIT:.0%}")
    print(f"conntrack on gpu1: {made} connections on the fabric changed the count by "
          f"{fabric_delta:+d}; {made_mgmt} on management (tracked, the control) by "
          f"{mgmt_delta:+d}")
    if made < 2 * args.connections * 0.99:
        ok = False
        print(f"FAIL: only {made} of {2 * args.connections} fabric connections opened")
    if fabric_delta > max(10, made // 100):
        ok = False
        print("FAIL: the fabric's job connections were tracked")
    if mgmt_delta < made_mgmt // 2:
        print("note: the management burst did not raise the count either: check that "
              f"{COUNT} moves in these containers")
    print(f"\nBENCHMARKS.md: firewall on the fabric (bench/bench_fabric.py, Docker lab, "
          f"{args.rounds} paired rounds x {args.seconds} s, iperf3 1 stream): "
          f"{ratio:.3f}x the throughput without it ({with_fw:.2f} vs {without:.2f} Gbit/s); "
          f"{made} fabric connections moved conntrack by {fabric_delta:+d} "
          f"(management control: {mgmt_delta:+d} for {made_mgmt})")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench_fabric: {exc}", file=sys.stderr)
        sys.exit(2)
