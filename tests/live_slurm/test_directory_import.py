"""`estate import --directory` against a real slapd (Debian's), started by this module on
loopback with an ldaps listener whose certificate a throwaway CA signs, and stopped at the
end. The directory speaks rfc2307 (OpenLDAP's nis schema); rfc2307bis's member DNs are the
unit tests' (tests/unit/test_directory.py).

Run alone: flock /tmp/estate-live.lock .venv/bin/pytest -q tests/live_slurm/test_directory_import.py
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from estate.cli import app
from estate.spec.model import Spec

BASE = "dc=example,dc=org"
BIND_DN = f"uid=estate-sssd,ou=services,{BASE}"
BIND_PW = "bind-pw-for-the-test"
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")
SLURM_CONF = "ClusterName=demo\nSlurmctldHost=head\nNodeName=cn[1-2]\nPartitionName=batch Nodes=cn[1-2] Default=YES\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _certificates(d: Path) -> None:
    """A CA, and a server certificate for 127.0.0.1 it signs."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "estate test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName(
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (d / "ca.crt").write_bytes(ca.public_bytes(pem))
    (d / "server.crt").write_bytes(server.public_bytes(pem))
    (d / "server.key").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


LDIF = f"""\
dn: {BASE}
objectClass: dcObject
objectClass: organization
o: example
dc: example

dn: ou=people,{BASE}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{BASE}
objectClass: organizationalUnit
ou: groups

dn: ou=services,{BASE}
objectClass: organizationalUnit
ou: services

dn: {BIND_DN}
objectClass: account
objectClass: simpleSecurityObject
uid: estate-sssd
userPassword: {BIND_PW}
""" + "".join(f"""
dn: uid={name},ou=people,{BASE}
objectClass: inetOrgPerson
objectClass: posixAccount
uid: {name}
cn: {name}
sn: {name}
uidNumber: {uid}
gidNumber: {gid}
homeDirectory: /home/{name}
loginShell: /bin/bash
""" for name, uid, gid in (("alice", 20101, 20001), ("bob", 20102, 20002),
                           ("eve", 20109, 20009))) + "".join(f"""
dn: cn={name},ou=groups,{BASE}
objectClass: posixGroup
cn: {name}
gidNumber: {gid}
""" + "".join(f"memberUid: {m}\n" for m in members)
   for name, gid, members in (("research", 20001, ("alice", "bob")),
                              ("ml-platform", 20002, ("bob",)), ("other", 20009, ())))


def _slapd_conf(d: Path) -> str:
    return "\n".join([*(f"include /etc/ldap/schema/{s}.schema" for s in SCHEMAS),
                      f"pidfile {d}/slapd.pid", "modulepath /usr/lib/ldap",
                      "moduleload back_mdb", f"TLSCACertificateFile {d}/ca.crt",
                      f"TLSCertificateFile {d}/server.crt",
                      f"TLSCertificateKeyFile {d}/server.key",
                      # only a bound identity reads; anonymous may only bind
                      "access to attrs=userPassword by anonymous auth by * none",
                      "access to * by users read by * none",
                      "database mdb", f'suffix "{BASE}"', f"directory {d}/db", ""])


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    if os.geteuid() != 0 or not (shutil.which("slapd") and shutil.which("slapadd")):
        pytest.skip("needs root and Debian's slapd: apt-get install slapd ldap-utils")
    d = tmp_path_factory.mktemp("slapd")
    (d / "db").mkdir()
    _certificates(d)
    (d / "slapd.conf").write_text(_slapd_conf(d))
    (d / "data.ldif").write_text(LDIF)
    subprocess.run(["slapadd", "-f", str(d / "slapd.conf"), "-l", str(d / "data.ldif")],
                   check=True, capture_output=True, timeout=60)
    port = _free_port()
    # -d keeps it in the foreground, a child of this test, stopped below
    proc = subprocess.Popen(["slapd", "-f", str(d / "slapd.conf"), "-h",
                             f"ldaps://127.0.0.1:{port}/", "-d", "0"],
                            stdout=subprocess.DEVNULL, stderr=open(d / "slapd.log", "w"))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (d / "slapd.log").read_text()
                time.sleep(0.1)
        yield d, f"ldaps://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _import(tmp: Path, uri: str, ca: Path, *extra: str):
    conf = tmp / "slurm.conf"
    conf.write_text(SLURM_CONF)
    (tmp / "bind.pw").write_text(BIND_PW + "\n")
    out = tmp / "spec.yaml"
    res = CliRunner().invoke(app, [
        "import", str(conf), "-o", str(out), "--directory", uri,
        "--users-base", f"ou=people,{BASE}", "--groups-base", f"ou=groups,{BASE}",
        "--ldap-schema", "rfc2307", "--ca", str(ca), "--bind-dn", BIND_DN,
        "--bind-secret", str(tmp / "bind.pw"), *extra])
    return res, out


def test_import_reads_the_directorys_people_into_a_spec_that_checks(slapd, tmp_path):
    d, uri = slapd
    res, out = _import(tmp_path, uri, d / "ca.crt", "--directory-group", "research")
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert BIND_PW not in text
    doc = yaml.safe_load(text)
    ident = doc["identity"]
    users = {u["name"]: (u["uid"], u["group"], u.get("source")) for u in ident["users"]}
    # research's members (bob is one through memberUid, his primary group is ml-platform);
    # eve is in neither; slurm and munge stay local
    assert users["alice"] == (20101, "research", "directory")
    assert users["bob"] == (20102, "ml-platform", "directory")
    assert "eve" not in users and users["slurm"][2] is None
    assert {g["name"] for g in ident["groups"] if g.get("source")} == {"research", "ml-platform"}
    assert ident["directory"]["bind_secret"] == {"file": "ldap-bind.secret",
                                                 "env": "ESTATE_LDAP_BIND_B64"}
    Spec.model_validate(doc)
    check = CliRunner().invoke(app, ["check", str(out)])
    assert check.exit_code == 0, check.output


def test_a_server_the_ca_does_not_sign_is_refused(slapd, tmp_path):
    d, uri = slapd
    other = tmp_path / "other-ca"
    other.mkdir()
    _certificates(other)
    res, out = _import(tmp_path, uri, other / "ca.crt")
    assert res.exit_code == 1 and not out.exists()
    assert "--directory" in res.output and BIND_PW not in res.output


def test_a_wrong_password_is_refused_without_echoing_it(slapd, tmp_path):
    d, uri = slapd
    res, out = _import(tmp_path, uri, d / "ca.crt")
    assert res.exit_code == 0, res.output    # the right one, for contrast
    (tmp_path / "bad.pw").write_text("not-the-password\n")
    conf = tmp_path / "slurm.conf"
    bad = CliRunner().invoke(app, [
        "import", str(conf), "-o", str(tmp_path / "bad.yaml"), "--directory", uri,
        "--users-base", f"ou=people,{BASE}", "--groups-base", f"ou=groups,{BASE}",
        "--ldap-schema", "rfc2307", "--ca", str(d / "ca.crt"), "--bind-dn", BIND_DN,
        "--bind-secret", str(tmp_path / "bad.pw")])
    assert bad.exit_code == 1 and "not-the-password" not in bad.output
    assert "invalidCredentials" in bad.output or "Bind" in bad.output, bad.output
