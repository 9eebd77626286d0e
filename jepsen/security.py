"""SASL_SSL for a harness cluster: a throwaway CA, one certificate per node (its own
loopback address), the broker user, and the client options every harness client uses.

The material lives in the run's data directory and is made fresh per run; it proves
nothing about key management, only that the cluster keeps its guarantees when every
connection (clients, replication, heartbeats) is TLS + SCRAM.
"""

from __future__ import annotations

BROKER_USER = "jepsen-broker"
BROKER_PASSWORD = "jepsen-broker-password-0123"
DAYS = 7


class SaslSslMaterial:
    """A CA in ``directory`` and a keystore (certificate + key, PEM) per host
    (raftlog.certs, as `raftlog tls init`)."""

    def __init__(self, directory: str):
        from raftlog.certs import LocalCA

        self.dir = directory
        self._ca = LocalCA.create(directory, cn="raftlog jepsen CA", days=DAYS)
        self.cafile = self._ca.cafile

    def keystore(self, node_id: int, host: str) -> str:
        certfile, _ = self._ca.issue(f"node-{node_id}", f"node{node_id}", hosts=(host,),
                                     days=DAYS, keystore=True)
        return certfile

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
