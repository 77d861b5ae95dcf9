"""The TLS front's certificates (estate.provision.tls): a pure function of the seed, so
every driver issues the same bytes; they verify against the CA (openssl, the same library
stunnel uses; Debian's openssl is on every machine of this kind); a site CA takes over; a
new year renews the server certificate."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from estate.pipeline import build
from estate.provision import tls

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks/lab.yaml")
    assert result.ok
    return result.estate


def seeded(d: Path, seed: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / tls.SEED).write_bytes(seed)
    return d


def tree(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


def test_one_seed_gives_the_same_bytes_anywhere_and_a_rerun_writes_nothing(lab, tmp_path):
    seed = os.urandom(32)
    a, b = seeded(tmp_path / "a", seed), seeded(tmp_path / "b", seed)
    assert sorted(tls.ensure_tls(a, lab)) == ["ca.crt", "slurmrestd-ctl1.crt",
                                             "slurmrestd-ctl1.key"]
    assert tls.ensure_tls(a, lab) == []
    tls.ensure_tls(b, lab)
    assert tree(a) == tree(b)
    assert (a / "slurmrestd-ctl1.key").stat().st_mode & 0o777 == 0o600
    other = seeded(tmp_path / "c", os.urandom(32))
    tls.ensure_tls(other, lab)
    assert tree(other)["ca.crt"] != tree(a)["ca.crt"]


def _verify(d: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", "verify", "-CAfile", str(d / "ca.crt"),
                           str(d / "slurmrestd-ctl1.crt")], capture_output=True, text=True)


def test_the_certificate_names_the_front_and_verifies_against_the_ca(lab, tmp_path):
    d = seeded(tmp_path, os.urandom(32))
    tls.ensure_tls(d, lab)
    assert _verify(d).returncode == 0, _verify(d).stdout + _verify(d).stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                           str(d / "slurmrestd-ctl1.crt")], capture_output=True, text=True)
    assert "IP Address:10.62.0.11" in text.stdout and "DNS:ctl1" in text.stdout


def test_a_site_ca_signs_instead(lab, tmp_path):
    site, ours = seeded(tmp_path / "site", bytes(32)), seeded(tmp_path / "ours", bytes(32))
    tls.ensure_tls(ours, lab)
    key, cert = tls._ca(tmp_path / "nowhere", os.urandom(32))   # any other CA
    (site / tls.CA_KEY).write_bytes(tls.key_pem(key))
    (site / tls.CA_CERT).write_bytes(tls.cert_pem(cert))
    tls.ensure_tls(site, lab)
    assert tree(site)["ca.crt"] == tls.cert_pem(cert)
    assert tree(site)["slurmrestd-ctl1.crt"] != tree(ours)["slurmrestd-ctl1.crt"]
    assert _verify(site).returncode == 0


def test_a_new_year_renews_the_server_certificate_only(lab, tmp_path):
    d = seeded(tmp_path, os.urandom(32))
    tls.ensure_tls(d, lab, today=dt.date(2026, 6, 1))
    before = tree(d)
    assert tls.ensure_tls(d, lab, today=dt.date(2026, 12, 31)) == []
    assert tls.ensure_tls(d, lab, today=dt.date(2027, 1, 1)) == ["slurmrestd-ctl1.crt"]
    assert tree(d)["ca.crt"] == before["ca.crt"]


def test_without_the_seed_it_says_how_to_get_one(lab, tmp_path):
    with pytest.raises(tls.TlsError, match="ESTATE_TLS_SEED_B64"):
        tls.ensure_tls(tmp_path, lab)
