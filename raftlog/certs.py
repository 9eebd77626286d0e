"""A certificate authority for local use: a CA, node and client certificates as PEM files.

Used by ``raftlog tls init`` (and so ``raftlog up --security``) and by the tests. It needs
the ``cryptography`` package (the ``server`` extra); nothing in the core imports this
module, so the client SDK still runs without it.

Files (``LocalCA.dir``):

| file | content | mode |
|---|---|---|
| ``ca.pem`` | the CA certificate (``ssl.truststore.location``, ``ssl_cafile``) | 0644 |
| ``ca.key`` | the CA private key | 0600 |
| ``<name>.pem`` | a certificate, followed by its key when issued as a keystore | 0644 / 0600 |
| ``<name>.key`` | the certificate's private key (not for a keystore) | 0600 |

This is material to try TLS on one machine, not key management: keys are unencrypted
PEM (PKCS#8, EC P-256), and the CA key sits next to the certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftlog.errors import RaftlogError

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
KEY_MODE = 0o600
CERT_MODE = 0o644
DAYS_MAX = 3650
_DAY = datetime.timedelta(days=1)


class CertsError(RaftlogError):
    """A CA directory that cannot be used (missing or unreadable files); says which."""


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_file(path: str, data: bytes, mode: int) -> str:
    """Write ``data`` to ``path`` with ``mode`` from the first byte on (a key is never
    readable by others, not even for a moment); replaces an existing file."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # (the umask may have narrowed a 0644 file: keep it readable)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    assert os.stat(path).st_mode & 0o777 == mode
    return path


def _sans(hosts) -> list:
    out = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


@dataclass
class LocalCA:
    """A CA whose certificate and key are files in ``dir``."""

    dir: str
    ca_key: object
    ca_cert: object
    org: str = "raftlog"

    @property
    def cafile(self) -> str:
        return os.path.join(self.dir, CA_CERT_FILE)

    @classmethod
    def create(cls, directory: str, *, cn: str = "raftlog local CA", org: str = "raftlog",
               days: int = 365) -> LocalCA:
        """A fresh CA: ``ca.pem`` and ``ca.key`` (0600) in ``directory`` (made 0700 if new).
        The files are written, not fsynced: local material, made again in a second."""
        assert 1 <= days <= DAYS_MAX, days
        os.makedirs(directory, mode=0o700, exist_ok=True)
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False)
        cert = (x509.CertificateBuilder().subject_name(_name(cn, org))
                .issuer_name(_name(cn, org)).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - _DAY).not_valid_after(now + days * _DAY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(usage, critical=True)
                .sign(key, hashes.SHA256()))
        ca = cls(directory, key, cert, org)
        write_file(os.path.join(directory, CA_KEY_FILE), _pem_key(key), KEY_MODE)
        write_file(ca.cafile, cert.public_bytes(serialization.Encoding.PEM), CERT_MODE)
        return ca

    @classmethod
    def load(cls, directory: str) -> LocalCA:
        """The CA of an earlier :meth:`create` in ``directory``.

        Raises:
            CertsError: ``ca.pem`` or ``ca.key`` is missing or not a PEM certificate/key.
        """
        paths = [os.path.join(directory, f) for f in (CA_CERT_FILE, CA_KEY_FILE)]
        try:
            with open(paths[0], "rb") as f:
                cert = x509.load_pem_x509_certificate(f.read())
            with open(paths[1], "rb") as f:
                key = serialization.load_pem_private_key(f.read(), password=None)
        except (OSError, ValueError) as e:
            raise CertsError(f"cannot load the CA in {directory} ({e}); make one with "
                             f"`raftlog tls init {directory}`") from None
        orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return cls(directory, key, cert, orgs[0].value if orgs else "raftlog")

    def issue(self, name: str, cn: str, *, hosts=("127.0.0.1", "localhost"),
              days: int = 365, expired: bool = False, client: bool = False,
              keystore: bool = False) -> tuple[str, str]:
        """A certificate for ``cn`` signed by the CA, valid for ``hosts`` (IP addresses
        or DNS names in its subjectAltName); ``client`` makes it a client certificate.

        Returns:
            (certfile, keyfile): ``<name>.pem`` and ``<name>.key``; with ``keystore`` both
            are ``<name>.pem`` (certificate then key, mode 0600: a node's
            ``ssl.keystore.location``).
        """
        assert 1 <= days <= DAYS_MAX, days
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + days * _DAY)
        purpose = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        b = (x509.CertificateBuilder().subject_name(_name(cn, self.org))
             .issuer_name(self.ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(start).not_valid_after(end)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if not client:  # a node dials its peers too: it is a TLS client as well
            b = b.add_extension(x509.ExtendedKeyUsage(
                [purpose, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        if hosts:
            b = b.add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
        pem = b.sign(self.ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        certfile = os.path.join(self.dir, f"{name}.pem")
        if keystore:
            write_file(certfile, pem + _pem_key(key), KEY_MODE)
            return certfile, certfile
        keyfile = write_file(os.path.join(self.dir, f"{name}.key"), _pem_key(key), KEY_MODE)
        write_file(certfile, pem, CERT_MODE)
        return certfile, keyfile
