"""The certificates of slurmrestd's TLS front, derived from the estate's TLS seed.

The seed (tls-ca.seed, 32 random bytes) is a secret like the munge and JWT keys: the labs
generate it, the Pulumi program keeps it in its state, `estate apply` takes it from the
secrets directory or ESTATE_TLS_SEED_B64. Everything else is a pure function of it, so
every driver and every run issues the same bytes and a re-run changes nothing:

- the estate's CA: a P-256 key derived from the seed, a self-signed certificate with a
  fixed validity; a site that has its own PKI puts its CA (or an intermediate) as
  ca.key and ca.crt in the secrets directory instead, and that CA signs;
- each slurmrestd node's key (derived from the seed and the node's name) and certificate
  for its address on the slurmrestd segment, valid from January 1 of this year for two
  years: it renews itself each new year, the same on every driver.

ECDSA signatures are deterministic here (RFC 6979), so a certificate's bytes repeat too.
The files land in the secrets directory: ca.crt, slurmrestd-<node>.key/.crt. Nothing
here prints a key.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import ipaddress
import os
from pathlib import Path
from typing import Iterable

from estate.model.bridge import CA_CERT, CA_KEY, server_files
from estate.model.services import KEYS
from estate.spec.resolved import Estate

__all__ = ["CA_CERT", "CA_KEY", "TlsError", "ensure_tls", "server_files",
           "site_or_derived_ca", "derive_key", "serial_number", "sign", "key_pem", "cert_pem",
           "put_file", "read_seed"]

SEED = KEYS["tls"].file
CA_FROM = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
CA_UNTIL = dt.datetime(2045, 1, 1, tzinfo=dt.timezone.utc)
SERVER_YEARS = 2


class TlsError(RuntimeError):
    """The secrets directory lacks what the TLS front needs."""


def ensure_tls(directory: str | Path, estate: Estate, today: dt.date | None = None,
               nodes: Iterable[str] | None = None) -> list[str]:
    """The CA certificate and the key and certificate of every slurmrestd node (of
    `nodes`, where given: a run for other nodes needs no seed) in the directory; the files
    written anew (none on a re-run)."""
    rest = estate.spec.slurm.slurmrestd
    hosts = list(estate.role_hosts("slurmrestd")) if rest else []
    if nodes is not None:
        wanted = set(nodes)
        hosts = [h for h in hosts if h in wanted]
    if not hosts:
        return []
    d = Path(directory)
    seed = read_seed(d)
    ca_key, ca_cert = _ca(d, seed)
    written = put_file(d / CA_CERT, cert_pem(ca_cert), 0o644)
    year = (today or dt.date.today()).year
    for name in hosts:
        key, cert = _server(seed, ca_key, ca_cert, name,
                            str(estate.address(name, rest.segment)), year)
        key_file, cert_file = server_files(name)
        written += put_file(d / key_file, key_pem(key), 0o600)
        written += put_file(d / cert_file, cert_pem(cert), 0o644)
    return written


def read_seed(d: Path, needed_for: str = "slurmrestd's TLS front is",
              key: str = "tls") -> bytes:
    seed = KEYS[key]
    path = d / seed.file
    if not path.is_file():
        raise TlsError(f"{d} has no {seed.file}: create the secrets (the labs do) or hand it "
                       f"in {seed.env}; {needed_for} issued from it")
    return path.read_bytes()


def derive_key(seed: bytes, label: str):
    """A P-256 private key that is a pure function of the seed and the label."""
    from cryptography.hazmat.primitives.asymmetric import ec
    order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    digest = hmac.new(seed, f"estate-tls:{label}".encode(), hashlib.sha512).digest()
    return ec.derive_private_key(int.from_bytes(digest, "big") % (order - 1) + 1,
                                 ec.SECP256R1())


def serial_number(seed: bytes, label: str) -> int:
    return int.from_bytes(hmac.new(seed, f"serial:{label}".encode(), hashlib.sha256)
                          .digest()[:16], "big") >> 1 or 1


def _ca(d: Path, seed: bytes):
    """The site's CA where the directory has one, else the one derived from the seed."""
    return site_or_derived_ca(d, seed, CA_KEY, CA_CERT, "ca", "Estate CA")


def site_or_derived_ca(d: Path, seed: bytes, key_file: str, cert_file: str, label: str,
                       common_name: str):
    """(key, certificate) of a CA: the site's, where the directory has key_file (and
    cert_file beside it), else derived from the seed under `label`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    if (d / key_file).is_file():
        if not (d / cert_file).is_file():
            raise TlsError(f"{d} has {key_file} but no {cert_file}: put the site CA's "
                           "certificate beside its key")
        return (serialization.load_pem_private_key((d / key_file).read_bytes(), None),
                x509.load_pem_x509_certificate((d / cert_file).read_bytes()))
    from cryptography.x509.oid import NameOID
    key = derive_key(seed, label)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(serial_number(seed, label))
            .not_valid_before(CA_FROM).not_valid_after(CA_UNTIL)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True))
    return key, sign(cert, key)


def _server(seed: bytes, ca_key, ca_cert, node: str, addr: str, year: int):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    key = derive_key(seed, f"server:{node}")
    start = dt.datetime(year, 1, 1, tzinfo=dt.timezone.utc)
    sans = [x509.IPAddress(ipaddress.ip_address(addr)), x509.DNSName(node)]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(serial_number(seed, f"{node}:{addr}:{year}"))
            .not_valid_before(start).not_valid_after(start.replace(year=year + SERVER_YEARS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False))
    return key, sign(cert, ca_key)


def sign(builder, key):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    deterministic = isinstance(key, ec.EllipticCurvePrivateKey) or None
    return builder.sign(key, hashes.SHA256(), ecdsa_deterministic=deterministic)


def key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return cert.public_bytes(serialization.Encoding.PEM)


def put_file(path: Path, data: bytes, mode: int) -> list[str]:
    """Write the file whole (a temporary name, then a rename) unless it holds the bytes."""
    if path.is_file() and path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
        return []
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return [path.name]
