"""Job traffic through the rendered firewall, in the kernel (docs/jobs.md): two network
namespaces stand for gpu1 and gpu2 of the lab, joined by a veth pair that carries their
fabric and management addresses (and, on gpu2's side, a login node's and a Kubernetes
node's management addresses, to connect from). Each loads the workers' rendered nftables.

- worker to worker, at torchrun's port and an ephemeral one: connects, on the fabric and on
  the management segment; from the login node's or the Kubernetes node's address: dropped;
- the fabric's job traffic is not tracked: a burst of connections leaves gpu1's conntrack
  count where it was (the management segment's adds entries);
- narrowed (firewall.jobs.ports), a port inside connects (its untracked replies come back
  by source port) and one outside is dropped.

Root, ip and nft only (no Slurm daemons); run inside the live lock:
flock /tmp/estate-live.lock python -m pytest tests/live_slurm/test_job_traffic.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from estate.pipeline import build
from tests.live_slurm.conftest import ROOT

A, B = "estj-gpu1", "estj-gpu2"

LISTEN = r"""
import socket, sys, time
socks = []
for port in map(int, sys.argv[2:]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(256); s.setblocking(False); socks.append(s)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], int(sys.argv[2])))
u.setblocking(False)
print("ready", flush=True)
end = time.time() + 60
while time.time() < end:
    for s in socks:
        try:
            s.accept()[0].close()
        except BlockingIOError:
            pass
    try:
        data, peer = u.recvfrom(64); u.sendto(data, peer)
    except BlockingIOError:
        pass
    time.sleep(0.001)
"""

CONNECT = r"""
import socket, sys
src, dst, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ok = 0
for _ in range(n):
    s = socket.socket(); s.settimeout(1.0); s.bind((src, 0))
    try:
        s.connect((dst, port)); ok += 1
    except OSError:
        pass
    s.close()
print(ok)
"""

UDP = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.0)
s.bind((sys.argv[1], 0)); s.sendto(b"x", (sys.argv[2], int(sys.argv[3])))
try:
    s.recv(64); print("open")
except OSError:
    print("timeout")
"""


def ns(name: str, *cmd: str, check: bool = True) -> str:
    out = subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True, text=True,
                         timeout=120)
    if check and out.returncode:
        raise AssertionError(f"{name}: {' '.join(cmd)}: {out.stderr}")
    return out.stdout.strip()


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def _lab(edit=None):
    data = yaml.safe_load((ROOT / "stacks" / "lab.yaml").read_text())
    if edit:
        edit(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        result = build(path)
    assert result.ok, result.findings
    return result


def _ruleset(result) -> bytes:
    group = next(i for i, g in enumerate(result.estate.spec.nodes) if g.hosts == "gpu[1-2]")
    return result.artifacts[f"network/nftables/group-{group:03d}.nft"].content


@pytest.fixture(scope="module")
def pair():
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nft")):
        pytest.skip("needs root, ip and nft")
    lab = _lab()
    est = lab.estate
    addr = {(n, s): str(est.address(n, s)) for n in ("gpu1", "gpu2", "login1", "k8s1")
            for s in ("fabric", "management")
            if est.address(n, s) is not None}
    for name in (A, B):
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        sh("ip", "netns", "add", name)
        ns(name, "ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "estj-a", "netns", A, "type", "veth", "peer", "estj-b", "netns", B)
    for name, dev, mine in ((A, "estj-a", ["gpu1"]), (B, "estj-b", ["gpu2", "login1", "k8s1"])):
        for (node, seg), ip in addr.items():
            if node in mine:
                ns(name, "ip", "addr", "add", f"{ip}/24", "dev", dev)
        ns(name, "ip", "link", "set", dev, "up")
    yield addr
    for name in (A, B):
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _load(ruleset: bytes) -> None:
    for name in (A, B):
        out = subprocess.run(["ip", "netns", "exec", name, "nft", "-f", "-"], input=ruleset,
                             capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr.decode()


def _listen(ip: str, *ports: int):
    proc = subprocess.Popen(["ip", "netns", "exec", A, "python3", "-c", LISTEN, ip,
                             *map(str, ports)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _connects(src: str, dst: str, port: int, n: int = 1) -> int:
    return int(ns(B, "python3", "-c", CONNECT, src, dst, str(port), str(n)))


def _count() -> int:
    return int(ns(A, "cat", "/proc/sys/net/netfilter/nf_conntrack_count"))


def test_workers_reach_each_other_and_nobody_else_reaches_a_job_port(pair):
    _load(_ruleset(_lab()))
    fab, mgmt = pair[("gpu1", "fabric")], pair[("gpu1", "management")]
    for ip in (fab, mgmt):
        proc = _listen(ip, 29500, 45123)
        try:
            src = pair[("gpu2", "fabric" if ip == fab else "management")]
            assert _connects(src, ip, 29500) == 1, f"gpu2 -> gpu1 {ip}:29500"
            assert _connects(src, ip, 45123) == 1, f"gpu2 -> gpu1 {ip}:45123"
            if ip == mgmt:
                for other in ("login1", "k8s1"):
                    assert _connects(pair[(other, "management")], ip, 45123) == 0, other
        finally:
            proc.kill()
    proc = _listen(fab, 45123)
    try:
        assert ns(B, "python3", "-c", UDP, pair[("gpu2", "fabric")], fab, "45123") == "open"
    finally:
        proc.kill()


def test_the_fabric_is_not_tracked_and_management_is(pair):
    _load(_ruleset(_lab()))
    fab, mgmt = pair[("gpu1", "fabric")], pair[("gpu1", "management")]
    proc = _listen(fab, 45123)
    try:
        before = _count()
        assert _connects(pair[("gpu2", "fabric")], fab, 45123, 200) == 200
        assert _count() - before <= 5, "the fabric's job connections were tracked"
    finally:
        proc.kill()
    proc = _listen(mgmt, 45123)
    try:
        before = _count()
        assert _connects(pair[("gpu2", "management")], mgmt, 45123, 50) == 50
        assert _count() - before >= 40, "management stays tracked"
    finally:
        proc.kill()


def test_a_narrowed_range_lets_its_ports_through_and_replies_back(pair):
    def narrow(data):
        data["firewall"]["jobs"] = {"ports": [50000, 50100], "launchers": ["openmpi",
                                                                          "torchrun"]}
    _load(_ruleset(_lab(narrow)))
    fab = pair[("gpu1", "fabric")]
    proc = _listen(fab, 50000, 45123)
    try:
        assert _connects(pair[("gpu2", "fabric")], fab, 50000) == 1
        assert _connects(pair[("gpu2", "fabric")], fab, 45123) == 0
    finally:
        proc.kill()
