"""Cluster checks, run through the controller and a login node: Slurm's view equals the
spec, a GPU job runs on every GPU node, a job spans two workers, the REST API takes
a JWT. Jobs run as a user with a Slurm account, so they go through accounting."""
from __future__ import annotations

import shlex

import pytest

from estate.model.bridge import TLS_CA, rest_api
from estate.verify.plugin import on_nodes
from estate.verify.slurm_view import collect, compare

ROLE = "cluster"
JOB = "timeout 90 srun -t 2 --quiet"


def _submit(ctx, command: str):
    node = ctx.submit_node()
    if node is None:
        pytest.skip("no login node or controller among the nodes checked")
    user = ctx.job_user()
    return ctx.host(node).run(f"runuser -u {shlex.quote(user)} -- {command}")


@on_nodes(lambda ctx: ctx.controller())
def test_slurm_view_matches_spec(host, node, ctx):
    view = collect(lambda cmd: host.check_output(shlex.join(cmd)))
    mismatches = compare(ctx.estate, view)
    assert not mismatches, "; ".join(str(m) for m in mismatches)


@on_nodes(lambda ctx: ctx.gpu_nodes())
def test_gpu_job(node, ctx):
    devices = ctx.gpu_devices(node)
    out = _submit(ctx, f"{JOB} -w {shlex.quote(node)} -N1 -n1 "
                       f"{shlex.quote(f'--gres=gpu:{len(devices)}')} "
                       "sh -c 'echo $CUDA_VISIBLE_DEVICES'")
    assert out.rc == 0, f"GPU job on {node} failed: {out.stderr.strip()}"
    want = ",".join(str(i) for i in range(len(devices)))
    assert out.stdout.strip() == want, f"CUDA_VISIBLE_DEVICES={out.stdout.strip()!r}, not {want}"


@on_nodes(lambda ctx: ctx.controller())
def test_job_across_two_workers(node, ctx):
    workers = ctx.with_deploy("slurm_worker")[:2]
    if len(workers) < 2:
        pytest.skip("fewer than two workers among the nodes checked")
    out = _submit(ctx, f"{JOB} -N2 -w {shlex.quote(','.join(workers))} hostname")
    assert out.rc == 0, f"two-node job failed: {out.stderr.strip()}"
    assert sorted(out.stdout.split()) == sorted(workers)


REST = """\
import json, ssl, sys, urllib.request, urllib.error
url, user, token, ca = sys.argv[1:5]
tls = ssl.create_default_context(cafile=ca)   # the front's certificate, from the estate's CA
def get(tok):
    req = urllib.request.Request(url, headers={"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": tok})
    try:
        with urllib.request.urlopen(req, timeout=10, context=tls) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None
good, body = get(token)
bad, _ = get("not-a-token")
print(good, bad, body["pings"][0]["ping"] if body else "-")
"""


@on_nodes(lambda ctx: ctx.with_deploy("slurmrestd"))
def test_rest_api_takes_a_jwt(host, node, ctx):
    """A token from `scontrol token` opens the API through its TLS front, whose
    certificate checks against the estate's CA; a made-up token does not. The token lives
    only inside the remote shell (never in the command line or this report)."""
    url = f"https://{ctx.rest_front(node)}/slurm/{rest_api(ctx.estate.spec.slurm.version)}/ping"
    user = ctx.job_user()
    script = shlex.quote(REST)
    out = host.run(f"T=$(scontrol token {shlex.quote('username=' + user)} lifespan=120 "
                   f"| cut -d= -f2) && python3 -c {script} {shlex.quote(url)} "
                   f"{shlex.quote(user)} \"$T\" {shlex.quote(TLS_CA)}")
    assert out.rc == 0, f"REST check failed to run: {out.stderr.strip()[-300:]}"
    good, bad, ping = out.stdout.split()
    assert (good, ping) == ("200", "UP"), f"with a JWT: HTTP {good}, ping {ping}"
    assert bad != "200", "slurmrestd accepted a made-up token"


# Reachability only: any TLS answer counts, so the certificate is not checked here.
REACH = """\
import ssl, sys, urllib.request, urllib.error
ASK = {"X-SLURM-USER-NAME": "nobody", "X-SLURM-USER-TOKEN": "not-a-token"}
try:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
    direct.open(urllib.request.Request(sys.argv[1], headers=ASK), timeout=float(sys.argv[2]))
    print("answered")
except urllib.error.HTTPError:
    print("answered")   # an error status for the made-up token: slurmrestd answered
except Exception as e:
    print("timeout" if "timed out" in str(e) else "error:" + type(e).__name__)
"""
REACH_TIMEOUT = 5
# A made-up token: slurmrestd answers it with an error status, which is all we ask.
REACH_ASK = {"X-SLURM-USER-NAME": "nobody", "X-SLURM-USER-TOKEN": "not-a-token"}


def _reach_here(url: str) -> str:
    """REACH's answer, from this process."""
    import urllib.error
    import urllib.request
    import ssl
    direct = urllib.request.build_opener(  # no proxy; reachability only (see REACH)
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
    try:
        direct.open(urllib.request.Request(url, headers=REACH_ASK), timeout=REACH_TIMEOUT)
        return "answered"
    except urllib.error.HTTPError:
        return "answered"
    except Exception as exc:  # noqa: BLE001 - reported as the answer
        return "timeout" if "timed out" in str(exc) else f"error:{type(exc).__name__}"


def _reach_argv(url: str) -> list[str]:
    return ["python3", "-c", REACH, url, str(REACH_TIMEOUT)]


@on_nodes(lambda ctx: ctx.with_deploy("slurmrestd") if ctx.reachability_probe else [])
def test_rest_api_reach_follows_the_flows(node, ctx):
    """slurmrestd answers where the flow matrix allows (from here: in the lab an admin
    host) and times out from a node it does not allow."""
    import socket
    from estate.model.flows import matrix
    listen = ctx.rest_front(node)
    addr, port = listen.rsplit(":", 1)
    url = f"https://{listen}/slurm/{rest_api(ctx.estate.spec.slurm.version)}/ping"
    m = matrix(ctx.estate)
    flow = next(f for f in m.flows if f.name == "slurmrestd")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:   # sends nothing
        s.connect((addr, int(port)))
        here = int.from_bytes(socket.inet_aton(s.getsockname()[0]), "big")
    allowed_here = any(lo <= here <= hi for lo, hi in m.source_ranges(flow))
    got = _reach_here(url)
    assert got == ("answered" if allowed_here else "timeout"), \
        f"from this host ({socket.inet_ntoa(here.to_bytes(4, 'big'))}): {got}"
    forbidden = [n for n in ctx.nodes if n != node and
                 m.allows(n, node, "tcp", int(port), flow.segment) is None and
                 ctx.estate.address(n, flow.segment) is not None]
    if not forbidden:
        pytest.skip("every node checked may reach slurmrestd")
    got = ctx.host(forbidden[0]).run(shlex.join(_reach_argv(url))).stdout.strip()
    assert got == "timeout", f"from {forbidden[0]}, which the flows forbid: {got}"
