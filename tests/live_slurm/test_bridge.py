"""The bridge on real slurmrestd and slurmctld, on every Slurm release: a Kubernetes
tenant's call, from a Kubernetes node's address through slurmrestd's TLS front with the
token the rendered minter got from Slurm, submits a job that runs as the grant's user and
is charged to its account; Slurm refuses what the grant does not allow (another partition,
account or QOS, another user), and an expired token, a token of another tenant and a token
signed with another key. The pod side needs a Kubernetes cluster: tests/live_k8s."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from estate.lab import netns_bridge
from estate.model import bridge
from estate.model.destinations import destination
from estate.verify.bridge import errors
from tests.live_slurm.conftest import RELEASES, ROOT, running_lab, spec_on

pytestmark = pytest.mark.live_slurm

# A second tenant with a bridge of its own: its token must not act for the first.
NOTEBOOKS = {"name": "notebooks", "gpus": {"l4": 0},
             "bridge": {"user": "svc-notebooks", "account": "research",
                        "partitions": ["urgent"], "qos": ["debug"], "token_lifetime": 600}}
NOTEBOOKS_USER = {"name": "svc-notebooks", "uid": 20004, "group": "research",
                  "shell": "/usr/sbin/nologin"}
SCRIPT = "#!/bin/sh\nid -un\nsleep 1\n"


def two_tenants(tmp, version: str):
    spec = spec_on(ROOT / "stacks/lab.yaml", version, tmp)
    data = yaml.safe_load(spec.read_text())
    data["kubernetes"]["tenants"].append(NOTEBOOKS)
    data["identity"]["users"].append(NOTEBOOKS_USER)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


@pytest.fixture(scope="module", params=RELEASES)
def lab(request, tmp_path_factory):
    yield from running_lab(two_tenants(tmp_path_factory.mktemp(f"bridge-{request.param}"),
                                       request.param))


@pytest.fixture(scope="module")
def rest(lab):
    """A client on k8s2 (a node of the plane the grants' tenants run on) and the tokens
    the rendered minter wrote on the controller."""
    return Client(lab, netns_bridge.client(lab, "k8s2"), netns_bridge.mint(lab))


class Client:
    def __init__(self, lab, ns: str, tokens: dict):
        self.lab, self.ns, self.tokens = lab, ns, tokens
        rest_cfg = lab.slurm.slurmrestd
        host = next(iter(lab.estate.role_hosts("slurmrestd")))
        self.url = f"https://{lab.estate.address(host, rest_cfg.segment)}:{rest_cfg.port}"
        self.api = bridge.rest_api(lab.slurm.version)
        self.ca = str(netns_bridge.tls_dir(lab) / "ca.crt")

    def token(self, tenant: str) -> str:
        return self.tokens[tenant].read_text().strip()

    def call(self, path: str, token: str, user: str, body: dict | None = None,
             ns: str | None = None) -> dict:
        req = {"url": self.url, "ca": self.ca, "token": token, "user": user,
               "method": "POST" if body is not None else "GET",
               "path": f"/slurm/{self.api}{path}", "body": body}
        proc = subprocess.run(["ip", "netns", "exec", ns or self.ns, sys.executable, "-m",
                               "estate.verify.bridge"], input=json.dumps(req), text=True,
                              capture_output=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def submit(self, token: str, user: str, **job) -> dict:
        job.setdefault("partition", "gpu")
        job.setdefault("account", "ops")
        return self.call("/job/submit", token, user, bridge.job_request(
            self.lab.slurm.version, SCRIPT, name="bridge", **job))


def job_id(answer: dict) -> int | None:
    return (answer.get("answer") or {}).get("job_id")


def refused(answer: dict) -> str:
    """The refusal's text; fails the test if the request was accepted."""
    assert job_id(answer) is None, f"accepted: {answer}"
    texts = errors(answer.get("answer") or {})
    assert answer.get("status") != 200 or texts, answer
    return " ".join(texts)


def sacct(lab, job: int) -> dict:
    out = lab.run(lab.client(), ["sacct", "-X", "-n", "-P", "-j", str(job), "-o",
                                 "User,Account,Partition,QOS,State"]).stdout.strip()
    return dict(zip(("user", "account", "partition", "qos", "state"), out.split("|")))


def wait_done(lab, job: int, timeout: float = 60) -> dict:
    """The job's accounting record once it has ended and slurmdbd holds it whole: under
    load 22.05's slurmdbd was seen to store the end (COMPLETED) before the start, the
    partition still empty and the QOS 'Unknown' at that moment (make test, 2026-12-05)."""
    end = time.monotonic() + timeout
    while True:
        row = sacct(lab, job)
        ended = row.get("state") in ("COMPLETED", "FAILED", "CANCELLED")
        if (ended and row.get("partition")) or time.monotonic() > end:
            return row
        time.sleep(0.5)


def test_a_job_over_rest_runs_as_the_grant_user_charged_to_its_account(lab, rest):
    answer = rest.submit(rest.token("inference"), "svc-inference", qos="normal")
    job = job_id(answer)
    assert job, answer
    assert wait_done(lab, job) == {"user": "svc-inference", "account": "ops",
                                   "partition": "gpu", "qos": "normal", "state": "COMPLETED"}
    # ... and its state reads back over REST, as the tenant sees it
    state = rest.call(f"/job/{job}", rest.token("inference"), "svc-inference")
    (rec,) = state["answer"]["jobs"]
    assert rec["user_name"] == "svc-inference" and rec["account"] == "ops"
    assert "COMPLETED" in (rec["job_state"] if isinstance(rec["job_state"], list)
                           else [rec["job_state"]])


@pytest.mark.parametrize("job, why", [
    ({"partition": "urgent"}, "partition"),
    ({"account": "research"}, "account"),
    ({"qos": "debug"}, "qos"),
], ids=["partition", "account", "qos"])
def test_slurm_refuses_what_the_grant_does_not_allow(lab, rest, job, why):
    text = refused(rest.submit(rest.token("inference"), "svc-inference", **job))
    assert ("qos" if why == "qos" else "account") in text.lower(), text


def test_a_token_cannot_act_for_another_user(rest):
    refused(rest.submit(rest.token("inference"), "alice"))


def test_another_tenants_token_is_refused(rest):
    # as the first tenant's user: the token names svc-notebooks, auth/jwt refuses the swap
    refused(rest.submit(rest.token("notebooks"), "svc-inference"))
    # as its own user, for the first tenant's account and partition: no association
    refused(rest.submit(rest.token("notebooks"), "svc-notebooks"))


def test_an_expired_token_is_refused(lab, rest):
    ctl = lab.slurm.controllers[0]
    out = lab.run(ctl, ["scontrol", "token", "username=svc-inference", "lifespan=1"]).stdout
    token = out.strip().removeprefix("SLURM_JWT=")
    time.sleep(2.5)
    refused(rest.submit(token, "svc-inference"))


def test_a_token_signed_with_another_key_is_refused(rest):
    now = int(time.time())
    refused(rest.submit(forged({"iat": now, "exp": now + 600, "sun": "svc-inference"}),
                        "svc-inference"))


def forged(claims: dict) -> str:
    """An HS256 JWT with the claims auth/jwt reads, signed with a key Slurm never saw."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(os.urandom(32), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def test_tokens_never_cross_the_segment_in_clear(lab, rest):
    """slurmrestd itself listens on loopback only; the segment address speaks TLS alone."""
    host = next(iter(lab.estate.role_hosts("slurmrestd")))
    port = lab.slurm.slurmrestd.port
    assert netns_bridge.listening(lab, host, bridge.LOOPBACK, port)
    env = lab.artifacts[f"slurm/slurmrestd/{host}.env"].content.decode()
    assert f'"{bridge.LOOPBACK}:{port}"' in env
    assert destination(f"slurm/slurmrestd-tls/{host}.conf") == "/etc/stunnel/slurmrestd.conf"
    addr = rest.url.split("//")[1].rsplit(":", 1)[0]
    probe = ("import socket; s = socket.create_connection(({!r}, {}), 5); "
             "s.sendall(b'GET /slurm/{}/ping HTTP/1.0\\r\\n\\r\\n'); s.settimeout(5)\n"
             "try: print(s.recv(200))\nexcept (socket.timeout, ConnectionResetError): "
             "print(b'')").format(addr, port, rest.api)
    proc = subprocess.run(["ip", "netns", "exec", rest.ns, sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "HTTP/" not in proc.stdout, f"plain HTTP answered on the segment: {proc.stdout}"


def test_only_the_bridge_nodes_reach_the_front(lab, rest):
    """A host of the segment that is no Kubernetes node (login1's service address) is
    dropped by the controller's rendered firewall; k8s2 gets through (the tests above)."""
    ns = netns_bridge.client(lab, "login1", name="intruder")
    target = rest.url.split("//")[1].rsplit(":", 1)
    probe = (f"import socket; socket.create_connection(({target[0]!r}, {target[1]}), 3)")
    proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and ("timed out" in proc.stderr or "Timeout" in proc.stderr), \
        proc.stderr
