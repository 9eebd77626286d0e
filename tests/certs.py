"""Certificates made in the test (the cryptography package): a CA, server and client
certificates, an expired one and one for the wrong host. Written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_DAY = datetime.timedelta(days=1)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str = "raftlog-test") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: str, *pems: bytes) -> str:
    with open(path, "wb") as f:
        for p in pems:
            f.write(p)
    return path


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class Certs:
    dir: str
    ca_key: object
    ca_cert: object

    @property
    def cafile(self) -> str:
        return os.path.join(self.dir, "ca.pem")

    def issue(self, name: str, cn: str, *, hosts=("127.0.0.1", "localhost"),
              expired: bool = False, client: bool = False) -> tuple[str, str]:
        """(certfile, keyfile) of a certificate signed by the CA."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
        sans = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(start).not_valid_after(end)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(self.ca_key, hashes.SHA256())
        certfile = _write(os.path.join(self.dir, f"{name}.pem"),
                          cert.public_bytes(serialization.Encoding.PEM))
        keyfile = _write(os.path.join(self.dir, f"{name}.key"), _pem_key(key))
        return certfile, keyfile


def make_certs(directory: str) -> Certs:
    """A fresh CA in ``directory`` (ca.pem)."""
    os.makedirs(directory, exist_ok=True)
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("raftlog test CA"))
            .issuer_name(_name("raftlog test CA")).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    c = Certs(directory, key, cert)
    _write(c.cafile, cert.public_bytes(serialization.Encoding.PEM))
    return c
