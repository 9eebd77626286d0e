"""SASL_SSL for a harness cluster: a throwaway CA, one certificate per node (its own
loopback address), the broker user, and the client options every harness client uses.

The material lives in the run's data directory and is made fresh per run; it proves
nothing about key management, only that the cluster keeps its guarantees when every
connection (clients, replication, heartbeats) is TLS + SCRAM.
"""

from __future__ import annotations

import datetime
import ipaddress
import os

BROKER_USER = "jepsen-broker"
BROKER_PASSWORD = "jepsen-broker-password-0123"
_DAY = datetime.timedelta(days=1)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_private(path: str, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


class SaslSslMaterial:
    """A CA in ``directory`` and a keystore (certificate + key, PEM) per host."""

    def __init__(self, directory: str):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self._ser = serialization
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raftlog jepsen CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                    .public_key(self._ca_key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - _DAY).not_valid_after(now + 7 * _DAY)
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                    .sign(self._ca_key, hashes.SHA256()))
        self.cafile = os.path.join(directory, "ca.pem")
        with open(self.cafile, "wb") as f:
            f.write(self._ca.public_bytes(serialization.Encoding.PEM))

    def keystore(self, node_id: int, host: str) -> str:
        x509, NameOID = self._x509, self._oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                            f"node{node_id}")]))
                .issuer_name(self._ca.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - _DAY).not_valid_after(now + 7 * _DAY)
                .add_extension(x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address(host))]), False)
                .sign(self._ca_key, self._hashes.SHA256()))
        return _write_private(os.path.join(self.dir, f"node-{node_id}.pem"),
                              cert.public_bytes(self._ser.Encoding.PEM) + _pem_key(key))

    def node_config(self, node_id: int, host: str, port: int) -> dict:
        return {
            "listeners": f"SASL_SSL://{host}:{port}",
            "ssl.keystore.location": self.keystore(node_id, host),
            "ssl.truststore.location": self.cafile,
            "inter.broker.sasl.username": BROKER_USER,
            "inter.broker.sasl.password": BROKER_PASSWORD,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        }

    def client_options(self) -> dict:
        return {"security_protocol": "SASL_SSL", "ssl_cafile": self.cafile,
                "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": BROKER_USER,
                "sasl_plain_password": BROKER_PASSWORD}
