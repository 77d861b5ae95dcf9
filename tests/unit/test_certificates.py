"""Certificates over time (estate.model.certificates): the table names every holder, the
collector script (estate.render.certificates) reads the real certificates Estate issues and
writes their notAfter for node_exporter, and with the clock moved on, promtool shows
CertificateExpiring firing 30 days ahead naming the renewing command, and a renewal
silencing it. The script reads no key and prints none."""
from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from estate.model import bridge, certificates as certs
from estate.pipeline import build
from estate.provision import kube_pki, tls
from estate.render import certificates as collector
from estate.render import monitoring as render

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks/lab.yaml")
    assert result.ok
    return result


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/install-deps.sh")
    return path


def test_every_label_value_is_safe_in_the_metric_and_the_script():
    """The collector prints names, paths and commands inside Prometheus label quotes."""
    for cert in certs.CERTIFICATES:
        for text in (cert.name, cert.renew, *cert.paths):
            assert not re.search(r'["\\\n]', text), text
    assert "'" not in certs.METRIC_HELP   # the script prints it in single quotes


def test_the_lab_holders_are_the_roles_that_install_the_files(lab):
    held = {n: [(c.name, p) for c, p in v] for n, v in certs.held(lab.estate).items()}
    assert held["ctl1"] == [("estate-ca", bridge.TLS_CA),
                            ("slurmrestd-front", bridge.TLS_CERT),
                            ("bridge-minter", bridge.kubeconfig_path("inference"))]
    assert ("cluster-ca", "/etc/kubernetes/pki/ca.crt") in held["k8s1"]
    assert ("kubeadm", "/etc/kubernetes/pki/apiserver.crt") in held["k8s1"]
    assert [c for c, _ in held["k8s2"]] == ["kubelet-client"]
    assert "gpu1" not in held and "login1" not in held
    # the collector and its timer go to exactly those nodes
    units = lab.artifacts[f"{collector.DIR}{certs.UNIT}.timer"]
    assert set(units.consumers) == set(held)


def _issue(lab, secrets: Path, root: Path, today: dt.date) -> None:
    """Estate's own certificates for the day, laid out under root as ctl1 holds them."""
    tls.ensure_tls(secrets, lab.estate, today)
    kube_pki.ensure_bridge_credentials(secrets, lab.estate, today)
    key_file, cert_file = tls.server_files("ctl1")
    for src, dest in ((tls.CA_CERT, bridge.TLS_CA), (cert_file, bridge.TLS_CERT),
                      (bridge.kubeconfig_secret("inference"),
                       bridge.kubeconfig_path("inference"))):
        (root / dest.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(secrets / src, root / dest.lstrip("/"))


def _collect(lab, root: Path) -> dict[str, int]:
    """Run ctl1's rendered collector over root: certificate -> notAfter (Unix time)."""
    script = root / "collector.sh"
    script.write_bytes(lab.artifacts[f"{collector.DIR}ctl1.sh"].content)
    proc = subprocess.run(["sh", str(script)], env={**os.environ, "ESTATE_CERT_ROOT": str(root)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "PRIVATE" not in proc.stderr
    text = (root / certs.TEXTFILE.lstrip("/")).read_text()
    assert f"# TYPE {certs.METRIC} gauge" in text and "PRIVATE" not in text
    found = re.findall(rf'^{certs.METRIC}\{{certificate="([^"]+)",path="([^"]+)",'
                       rf'renew="([^"]+)"\}} (\d+)$', text, re.M)
    assert [(c, p, r) for c, p, r, _ in found] == [
        (c.name, p, c.renew) for c, p in certs.held(lab.estate)["ctl1"]]
    return {c: int(s) for c, _, _, s in found}


@pytest.fixture
def secrets(tmp_path) -> Path:
    d = tmp_path / "secrets"
    d.mkdir()
    (d / tls.SEED).write_bytes(os.urandom(32))
    (d / kube_pki.SEED).write_bytes(os.urandom(32))
    return d


def test_the_collector_reads_each_certificates_notafter(lab, secrets, tmp_path):
    _issue(lab, secrets, tmp_path / "root", NOW.date())
    got = _collect(lab, tmp_path / "root")
    kc = (secrets / bridge.kubeconfig_secret("inference")).read_text()
    want = certs.not_after(kc, certs.KUBECONFIG)
    assert got["bridge-minter"] == int(want.timestamp())
    assert got["estate-ca"] == int(tls.CA_UNTIL.timestamp())
    assert got["slurmrestd-front"] == int(dt.datetime(NOW.year + tls.SERVER_YEARS, 1, 1,
                                                      tzinfo=dt.timezone.utc).timestamp())


def test_a_missing_certificate_fails_the_run_and_the_others_are_written(lab, secrets,
                                                                        tmp_path):
    root = tmp_path / "root"
    _issue(lab, secrets, root, NOW.date())
    (root / bridge.TLS_CERT.lstrip("/")).unlink()
    script = root / "collector.sh"
    script.write_bytes(lab.artifacts[f"{collector.DIR}ctl1.sh"].content)
    proc = subprocess.run(["sh", str(script)], env={**os.environ, "ESTATE_CERT_ROOT": str(root)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "slurmrestd-front" in proc.stderr
    text = (root / certs.TEXTFILE.lstrip("/")).read_text()
    assert 'certificate="bridge-minter"' in text and "slurmrestd-front" not in text


# --- the clock moves: the alert fires 30 days ahead, a renewal silences it ----------------

def _promtool_test(lab, promtool, tmp: Path, expiry: dict[str, int], at_h: int,
                   firing: list[str]) -> subprocess.CompletedProcess:
    """promtool's clock starts at NOW (time() is 0 there): each series is its notAfter less
    NOW; at `at_h` hours later exactly `firing` certificates' alerts fire."""
    rules = yaml.safe_load(lab.artifacts[render.RULES].content)
    rule = next(r for g in rules["groups"] for r in g["rules"]
                if r.get("alert") == "CertificateExpiring")
    held = {c.name: (c, p) for c, p in certs.held(lab.estate)["ctl1"]}

    def labels(name):
        return {"certificate": name, "node": "ctl1", "path": held[name][1], "plane": "slurm",
                "renew": held[name][0].renew}

    def series(name):
        inner = ",".join(f'{k}="{v}"' for k, v in labels(name).items())
        return {"series": f"{certs.METRIC}{{{inner}}}",
                "values": f"{expiry[name] - int(NOW.timestamp())}x{at_h + 2}"}

    def alert(name):
        lab_ = labels(name)
        expand = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: lab_[m.group(1)], v)
                  for k, v in {**rule["labels"], **rule["annotations"]}.items()}
        return {"exp_labels": {**lab_, **{k: expand[k] for k in rule["labels"]}},
                "exp_annotations": {k: expand[k] for k in rule["annotations"]}}
    doc = {"rule_files": [Path(render.RULES).name], "evaluation_interval": "1h",
           "tests": [{"interval": "1h", "input_series": [series(n) for n in expiry],
                      "alert_rule_test": [
                          {"eval_time": "0h", "alertname": "CertificateExpiring",
                           "exp_alerts": []},
                          {"eval_time": f"{at_h}h", "alertname": "CertificateExpiring",
                           "exp_alerts": [alert(n) for n in firing]}]}]}
    (tmp / Path(render.RULES).name).write_bytes(lab.artifacts[render.RULES].content)
    (tmp / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp, capture_output=True,
                          text=True, timeout=120)


def test_with_the_clock_moved_the_alert_fires_and_a_renewal_silences_it(lab, promtool,
                                                                       secrets, tmp_path):
    root = tmp_path / "root"
    _issue(lab, secrets, root, NOW.date())
    first = _collect(lab, root)
    # the clock moves to a day inside the minter's last 30 days (and a little past the hold)
    warn_at = first["bridge-minter"] - certs.WARN_DAYS * 86400 + 3600
    hours = (warn_at - int(NOW.timestamp())) // 3600 + 2
    proc = _promtool_test(lab, promtool, tmp_path, first, hours, ["bridge-minter"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the same, expecting silence, fails: the proof can fail
    proc = _promtool_test(lab, promtool, tmp_path, first, hours, [])
    assert proc.returncode != 0 and "CertificateExpiring" in proc.stdout + proc.stderr
    # the renewal runs on that day (the monthly reissue: the minter's own renewal is
    # tests/unit/test_bridge_renew.py's): its new notAfter is past the window, silence
    moved = dt.datetime.fromtimestamp(int(NOW.timestamp()) + hours * 3600, dt.timezone.utc)
    _issue(lab, secrets, root, moved.date())
    renewed = _collect(lab, root)
    assert renewed["bridge-minter"] > first["bridge-minter"]
    proc = _promtool_test(lab, promtool, tmp_path, renewed, hours, [])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_certificate_minutes_from_expiry_is_reported(lab):
    """doctor and drift read a certificate's file (a kubeconfig's certificate line only)
    and describe it within 30 days."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "soon")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(minutes=5)))
    pem = tls.cert_pem(tls.sign(cert, key))
    end = certs.not_after(pem, certs.PEM)
    assert end == NOW + dt.timedelta(minutes=5)
    assert certs.expiring(end, NOW) and not certs.expiring(end, NOW - dt.timedelta(days=31))
    text = certs.describe(certs.BY_NAME["slurmrestd-front"], bridge.TLS_CERT, end, NOW)
    assert text.startswith("slurmrestd-front (/etc/estate/tls/slurmrestd.crt) expires in 5 "
                           "minutes")
    import base64
    line = base64.b64encode(pem).decode() + "\n"
    assert certs.not_after(line, certs.KUBECONFIG) == end


def _pem(minutes: float) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=minutes)))
    return tls.cert_pem(tls.sign(cert, key))


def test_doctor_warns_of_a_node_certificate_within_30_days_naming_its_renewal(lab):
    import base64
    from estate import doctor
    from tests.unit.test_doctor import FakeRunner, every_package, plugin_files

    class Certs(FakeRunner):
        def run(self, argv):
            if argv == certs.read_command(certs.PEM, bridge.TLS_CERT):
                return doctor.Proc(0, _pem(5).decode())
            if argv == certs.read_command(certs.KUBECONFIG, bridge.kubeconfig_path("inference")):
                return doctor.Proc(0, base64.b64encode(_pem(60 * 24 * 45)).decode() + "\n")
            return super().run(argv)
    runner = Certs(every_package(), files=plugin_files(lab.estate))
    checks = doctor.doctor_nodes(lab.estate, lab.artifacts, lambda need: runner, limit="ctl1")
    found = {c.message.split(" (")[0]: c for c in checks if c.id == "doctor.certificate_expiry"}
    front, minter = found["ctl1: slurmrestd-front"], found["ctl1: bridge-minter"]
    assert (front.status, front.severity) == ("warn", doctor.WARNING)
    assert re.search(r"expires in [0-5] minutes", front.message), front.message
    assert front.fix.startswith("estate apply SPEC")
    assert minter.ok and "expires in 44 days" in minter.message
    assert not doctor.failed(found.values())   # a warning: apply still runs


def test_drift_reports_a_certificate_within_30_days_with_its_renewal():
    from estate.operate.drift import logic as drift
    soon, later = _pem(5).decode(), _pem(60 * 24 * 45).decode()
    front, ca = certs.BY_NAME["slurmrestd-front"], certs.BY_NAME["estate-ca"]
    found = drift.certificate_findings(
        "ctl1", [(front, bridge.TLS_CERT, soon), (ca, bridge.TLS_CA, later),
                 (ca, "/missing", "")], NOW)
    assert [(f.node, f.aspect, f.what, f.status, f.fix) for f in found] == [
        ("ctl1", "certificate", bridge.TLS_CERT, drift.DRIFT, "estate apply SPEC")]
    assert "expires in" in found[0].actual and "minutes" in found[0].actual
    report = drift.DriftReport()
    report.add("ctl1", "certificate", found, 3)
    assert not report.ok and b"certificate" in drift.junit(report)
