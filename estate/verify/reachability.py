"""The reachability matrix: every designed flow succeeds, every undesigned one fails.

For every ordered pair of the nodes checked, every (protocol, port, segment) of the flow
matrix (estate.model.flows; a port range by its ends and middle) and a sample of ports
outside it, a real connection is tried from the source to the destination's address on
that segment. Each destination first gets a listener on every such port nothing listens
on yet (a real daemon keeps its port); each source then tries all of its targets at once
with a short timeout, in one process (one remote command per node, not per probe).

A connection that opens, or is refused (a RST or ICMP port-unreachable came back), went
through the firewall; one that times out was dropped. The expectation is the matrix's,
by address, exactly as the rendered rules match.
"""
from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from estate.model.flows import matrix

# Ports outside the matrix that a firewall must drop: web, databases, the ports just
# around srun's range, Kubernetes' and common UDP services. torchrun's MASTER_PORT and an
# ephemeral port (NCCL's bootstrap, Open MPI's TCP transport) are job ports between the
# workers (the job flows; every port unless narrowed) and dropped from anywhere else.
SAMPLE = (("tcp", 80), ("tcp", 443), ("tcp", 3306), ("tcp", 5432), ("tcp", 8080),
          ("tcp", 9100), ("tcp", 10250), ("tcp", 60000), ("tcp", 63001),
          ("tcp", 29500), ("tcp", 45123),
          ("udp", 53), ("udp", 123), ("udp", 8472), ("udp", 60001),
          ("udp", 45123))
TIMEOUT = 3.0          # per probe, all of a source's probes run at once
LISTEN_SECONDS = 120   # listeners exit by themselves if the verify run dies

LISTENER = r"""
import json, os, socket, sys, select, time
ports, seconds = json.loads(sys.argv[1]), float(sys.argv[2])
socks = []
for proto, port in ports:
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("0.0.0.0", port))
        if proto == "tcp":
            s.listen(64)
        s.setblocking(False)
        socks.append((proto, s))
    except OSError:
        s.close()   # a daemon has the port: it answers for itself
pid = os.fork()
if pid:
    print(json.dumps({"pid": pid, "bound": len(socks)}))
    sys.exit(0)
os.setsid()
for fd in (0, 1, 2):
    os.close(fd)
end = time.monotonic() + seconds
while time.monotonic() < end:
    ready, _, _ = select.select([s for _, s in socks], [], [], 1.0)
    for s in ready:
        try:
            if s.type == socket.SOCK_STREAM:
                s.accept()[0].close()
            else:
                data, peer = s.recvfrom(512)
                s.sendto(data, peer)
        except OSError:
            pass
"""

PROBE = r"""
import errno, json, socket, sys, select, time
probes, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
out, pending = {}, {}
for i, (proto, addr, port) in enumerate(probes):
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.setblocking(False)
    try:
        if proto == "tcp":
            s.connect_ex((addr, port))
        else:
            s.connect((addr, port))
            s.send(b"estate-probe")
        pending[s] = i
    except OSError as e:
        out[i] = "unreachable" if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) else "error"
        s.close()
end = time.monotonic() + timeout
while pending and time.monotonic() < end:
    tcp = [s for s in pending if s.type == socket.SOCK_STREAM]
    udp = [s for s in pending if s.type == socket.SOCK_DGRAM]
    r, w, _ = select.select(udp, tcp, [], max(0.0, end - time.monotonic()))
    for s in w + r:
        i = pending.pop(s)
        try:
            if s.type == socket.SOCK_STREAM:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                out[i] = "open" if err == 0 else "refused" if err == errno.ECONNREFUSED else \
                    "unreachable" if err in (errno.EHOSTUNREACH, errno.ENETUNREACH) else \
                    "timeout" if err == errno.ETIMEDOUT else "error"
            else:
                s.recv(512)
                out[i] = "open"
        except ConnectionRefusedError:
            out[i] = "refused"
        except OSError:
            out[i] = "error"
        s.close()
for s, i in pending.items():
    out[i] = "timeout"
    s.close()
print(json.dumps(out))
"""
# What came back: the packet went through the destination's firewall, or it did not.
PASSED = {"open", "refused"}


@dataclass(frozen=True)
class Probe:
    src: str
    dst: str
    addr: str
    proto: str
    port: int
    segment: str
    flow: str | None     # the flow that allows it; None: undesigned, must fail


@dataclass
class Outcome:
    probe: Probe
    got: str

    @property
    def passed(self) -> bool:
        return self.got in PASSED

    @property
    def ok(self) -> bool:
        return self.passed == (self.probe.flow is not None)

    def as_dict(self) -> dict:
        p = self.probe
        return {"source": p.src, "destination": p.dst, "address": p.addr,
                "proto": p.proto, "port": p.port, "segment": p.segment,
                "designed": p.flow, "expected": "open" if p.flow else "blocked",
                "got": self.got}

    def __str__(self) -> str:
        p = self.probe
        want = f"designed ({p.flow})" if p.flow else "undesigned"
        return (f"{p.src} -> {p.dst} {p.addr} {p.proto}/{p.port} ({p.segment}): {want}, "
                f"got {self.got}")


def plan(estate, nodes: list[str]) -> list[Probe]:
    """Every ordered pair of nodes x the matrix's ports and the sample, on each segment
    the destination has an address on."""
    m = matrix(estate)
    designed = m.ports()
    seen = {(proto, port, seg) for proto, port, seg in designed}
    segments = [s.name for s in estate.spec.segments]
    sample = [(proto, port, seg) for seg in segments for proto, port in SAMPLE
              if (proto, port, seg) not in seen]
    out = []
    for src in nodes:
        for dst in nodes:
            if src == dst:
                continue
            for proto, port, seg in designed + sample:
                addr = estate.address(dst, seg)
                if addr is None:
                    continue
                flow = m.allows(src, dst, proto, port, seg)
                out.append(Probe(src, dst, str(addr), proto, port, seg,
                                 flow.name if flow else None))
    return out


def probe_all(ctx, nodes: list[str]) -> list[Outcome]:
    """Listeners on every destination, every source's probes at once, listeners gone."""
    probes = plan(ctx.estate, nodes)
    listeners = {}
    for dst in nodes:
        ports = sorted({(p.proto, p.port) for p in probes if p.dst == dst})
        out = ctx.host(dst).run(f"python3 -c {shlex.quote(LISTENER)} "
                                f"{shlex.quote(json.dumps(ports))} {shlex.quote(str(LISTEN_SECONDS))}")
        if out.rc != 0:
            raise RuntimeError(f"{dst}: the probe listener did not start: {out.stderr[-300:]}")
        listeners[dst] = json.loads(out.stdout)["pid"]
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            results = list(pool.map(lambda src: _probe_from(ctx, src, probes), nodes))
    finally:
        for dst, pid in listeners.items():
            ctx.host(dst).run(f"kill {shlex.quote(str(int(pid)))}")
    return [o for batch in results for o in batch]


def _probe_from(ctx, src: str, probes: list[Probe]) -> list[Outcome]:
    mine = [p for p in probes if p.src == src]
    if not mine:
        return []
    args = json.dumps([(p.proto, p.addr, p.port) for p in mine])
    out = ctx.host(src).run(f"python3 -c {shlex.quote(PROBE)} {shlex.quote(args)} "
                          f"{shlex.quote(str(TIMEOUT))}")
    if out.rc != 0:
        raise RuntimeError(f"{src}: the probe did not run: {out.stderr[-300:]}")
    got = json.loads(out.stdout)
    return [Outcome(p, got.get(str(i), "error")) for i, p in enumerate(mine)]


def summary(outcomes: list[Outcome]) -> dict:
    """The counts `estate verify` prints and verify.json carries, with every violation."""
    designed = [o for o in outcomes if o.probe.flow]
    return {"probes": len(outcomes),
            "designed_ok": sum(o.ok for o in designed),
            "denied_ok": sum(o.ok for o in outcomes if not o.probe.flow),
            "violations": [o.as_dict() for o in outcomes if not o.ok]}
