"""The bridge minter renews its own client certificate (slurm_conf/bridge-renew.sh.j2), so no
apply is needed before it expires: the rendered script is run (real curl, real openssl, real
TLS with the current certificate) against a local HTTPS stand-in for the API server's
CertificateSigningRequest API, which signs an approved request with the cluster CA as the
controller-manager does. What Kubernetes itself does with the request is the live tier's;
the approver's rules and the RBAC are read from the rendered files here."""
from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from estate.model import bridge, certificates as certs
from estate.model import kubernetes as k8s
from estate.pipeline import build
from estate.provision import kube_pki, tls
from estate.render.bridge import MINT_DIR, RENEW_DAYS, RENEW_UNIT, SIGNER, minter_context, \
    renewal
from estate.spec.hostlist import Hostlist
from tests.unit.test_kube_pki import _server_cert

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime.now(dt.timezone.utc)
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks/lab.yaml")
    assert result.ok
    return result


@pytest.fixture
def issued(lab, tmp_path) -> Path:
    """Credentials issued two months ago: the certificate has under RENEW_DAYS left."""
    (tmp_path / kube_pki.SEED).write_bytes(os.urandom(32))
    month = (NOW.replace(day=1) - dt.timedelta(days=40)).replace(day=1).date()
    kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, month)
    return tmp_path


class Api(http.server.BaseHTTPRequestHandler):
    """The CSR API: a request is stored (201, 409 if its name exists), read back (404 if
    unknown), and, once `approve` is set, issued for its own key and subject by `ca`."""
    csrs: dict = {}
    approve = False
    issue_key = None     # issue for another key than the request's (a wrong answer)
    ca: tuple = ()
    users: list = []

    def _peer(self) -> str:
        peer = x509.load_der_x509_certificate(self.connection.getpeercert(binary_form=True))
        return peer.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value

    def _send(self, code: int, doc: dict) -> None:
        body = json.dumps(doc, indent=2).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):   # noqa: N802
        self.users.append(self._peer())
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = doc["metadata"]["name"]
        if name in self.csrs:
            return self._send(409, {})
        self.csrs[name] = doc
        self._send(201, doc)

    def do_GET(self):   # noqa: N802
        self.users.append(self._peer())
        name = self.path.rsplit("/", 1)[-1]
        doc = self.csrs.get(name)
        if doc is None:
            return self._send(404, {"kind": "Status", "code": 404})
        if self.approve:
            doc = doc | {"status": {"certificate": base64.b64encode(self._sign(doc)).decode()}}
        self._send(200, doc)

    def _sign(self, doc: dict) -> bytes:
        req = x509.load_pem_x509_csr(base64.b64decode(doc["spec"]["request"]))
        ca_key, ca_cert = self.ca
        cert = (x509.CertificateBuilder().subject_name(req.subject)
                .issuer_name(ca_cert.subject)
                .public_key(self.issue_key or req.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(NOW - dt.timedelta(minutes=5))
                .not_valid_after(NOW + dt.timedelta(seconds=doc["spec"]["expirationSeconds"]))
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False))
        return tls.cert_pem(tls.sign(cert, ca_key))

    def log_message(self, *args):
        pass


@pytest.fixture
def api(issued, tmp_path):
    ca_key, ca_cert = kube_pki.cluster_ca(issued, (issued / kube_pki.SEED).read_bytes())
    crt, key = _server_cert(tmp_path, ca_key, ca_cert)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.load_verify_locations(cafile=str(issued / bridge.K8S_CA_CERT))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server = http.server.HTTPServer(("127.0.0.1", 0), Api)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    Api.csrs, Api.approve, Api.issue_key, Api.ca, Api.users = {}, False, None, \
        (ca_key, ca_cert), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _script(lab, work: Path) -> Path:
    """The rendered renewal, its directories moved under work (else byte for byte the
    controllers')."""
    ctx = minter_context(lab.estate, "stacks/lab.yaml") | {"token_dir": str(work / "run"),
                                                           "kubeconfig_dir": str(work)}
    ctl = Hostlist.from_names(bridge.minter_hosts(lab.estate))
    text = renewal(lab.estate, ctx, ctl)[0].content.decode()
    assert text.replace(str(work / "run"), bridge.TOKEN_DIR).replace(
        str(work), bridge.KUBECONFIG_DIR) == \
        lab.artifacts[f"{MINT_DIR}{RENEW_UNIT}"].content.decode()
    path = work / RENEW_UNIT
    path.write_text(text)
    return path


def _run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=60)


def _held(kc: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(certs.client_certificate(kc.read_text()))


def _setup(lab, issued, tmp_path, server) -> tuple[Path, Path]:
    work = tmp_path / "minter"
    work.mkdir()
    kc = work / "inference.kubeconfig"
    kc.write_text((issued / bridge.kubeconfig_secret("inference")).read_text()
                  .replace("https://10.62.0.13:6443", server))
    return _script(lab, work), kc


def test_the_minter_renews_its_certificate_through_the_api_without_an_apply(
        lab, issued, api, tmp_path):
    script, kc = _setup(lab, issued, tmp_path, api)
    before = _held(kc)
    assert before.not_valid_after_utc - NOW < dt.timedelta(days=RENEW_DAYS)
    key_b64 = yaml.safe_load(kc.read_text())["users"][0]["user"]["client-key-data"]
    first = _run(script)
    assert first.returncode == 0, first.stderr
    assert "asked for a new certificate" in first.stderr
    (name, doc), = Api.csrs.items()
    assert doc["spec"]["signerName"] == SIGNER
    assert doc["spec"]["usages"] == ["digital signature", "client auth"]
    req = x509.load_pem_x509_csr(base64.b64decode(doc["spec"]["request"]))
    assert req.subject.rfc4514_string() == f"CN={bridge.minter_user('inference')}"
    assert req.public_key() == before.public_key()       # the key it holds, not a new one
    assert _held(kc) == before                           # nothing installed until issued
    # a run before approval leaves it waiting, still no error
    waiting = _run(script)
    assert waiting.returncode == 0 and "not issued yet" in waiting.stderr
    Api.approve = True
    done = _run(script)
    assert done.returncode == 0 and "renewed" in done.stderr, done.stderr
    after = _held(kc)
    assert after.public_key() == before.public_key()
    assert after.not_valid_after_utc - NOW > dt.timedelta(days=certs.WARN_DAYS + 30)
    assert yaml.safe_load(kc.read_text())["users"][0]["user"]["client-key-data"] == key_b64
    assert set(Api.users) == {bridge.minter_user("inference")}   # its current certificate
    # renewed: the next run asks nothing
    calls = len(Api.users)
    assert _run(script).returncode == 0 and len(Api.users) == calls
    for run in (first, waiting, done):
        assert key_b64 not in run.stderr + run.stdout and "PRIVATE" not in run.stderr
    assert not list((tmp_path / "minter" / "run").iterdir()), "the key's copy is left behind"


def test_a_certificate_issued_for_another_key_is_not_installed(lab, issued, api, tmp_path):
    from cryptography.hazmat.primitives.asymmetric import ec
    script, kc = _setup(lab, issued, tmp_path, api)
    before = kc.read_text()
    assert _run(script).returncode == 0
    Api.approve, Api.issue_key = True, ec.generate_private_key(ec.SECP256R1()).public_key()
    run = _run(script)
    assert run.returncode == 1 and "issued for another key" in run.stderr
    assert kc.read_text() == before


def test_an_api_server_that_does_not_answer_leaves_it_for_a_later_run(lab, issued, tmp_path):
    from tests.unit.test_kube_pki import _free_port
    script, kc = _setup(lab, issued, tmp_path, f"https://127.0.0.1:{_free_port()}")
    run = _run(script)
    assert run.returncode == 0 and "renewed on a later run" in run.stderr


def test_the_approver_approves_a_minters_request_for_itself_only(lab):
    """The control planes' approver: signer, requester and subject must all be a minter's
    own; and the minters may create and read requests, nothing more."""
    text = lab.artifacts[f"{k8s.SBIN}estate-{k8s.BRIDGE_APPROVE}"].content.decode()
    assert f'minters="{bridge.minter_user("inference")}"' in text
    assert f'[ "$signer" = {SIGNER} ]' in text and '"subject=CN=$user"' in text
    timer = lab.artifacts[f"{k8s.SYSTEMD_UNITS}{k8s.timer_unit(k8s.BRIDGE_APPROVE)}"]
    assert set(timer.consumers) == {n.name for n in k8s.control_planes(lab.estate)}
    docs = list(yaml.safe_load_all(lab.artifacts["kubernetes/manifests/00-tenants.yaml"]
                                   .content))
    role = next(d for d in docs if d and d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("minter-renew"))
    assert role["rules"] == [{"apiGroups": ["certificates.k8s.io"],
                              "resources": ["certificatesigningrequests"],
                              "verbs": ["create", "get"]}]
    binding = next(d for d in docs if d and d["kind"] == "ClusterRoleBinding"
                   and d["roleRef"]["name"] == role["metadata"]["name"])
    assert [s["name"] for s in binding["subjects"]] == [bridge.minter_user("inference")]
