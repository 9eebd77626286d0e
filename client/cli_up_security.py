"""``raftlog up --security``: what turns a local cluster into a SASL_SSL one.

Pure of processes: it makes (or keeps) files in DATA_DIR and returns config overrides;
``cmd_up`` starts the nodes with them. Files (all kept across restarts):

- ``DATA_DIR/tls/``: ``raftlog tls init`` output (CA, ``node-I.pem`` keystores, client
  certificate), made for ``n_nodes`` nodes on ``host`` if missing;
- ``DATA_DIR/admin.password`` (0600): the password of the SCRAM user ``admin``, the nodes'
  inter-broker user and so the cluster's first administrator (a super user);
- ``DATA_DIR/client.properties`` (0600): ``--command-config`` for the CLI and the client
  settings for the SDK (``load_command_config``), logged in as ``admin``.
"""

from __future__ import annotations

import os
import secrets

from raftlog import filemodes

from .cli_tls import DEFAULT_HOSTS, node_keystore, tls_init

ADMIN_USER = "admin"
MECHANISM = "SCRAM-SHA-512"
PASSWORD_FILE = "admin.password"
CLIENT_PROPERTIES_FILE = "client.properties"
TLS_DIR = "tls"


def security_overrides(data_dir: str, n_nodes: int, *, host: str = "127.0.0.1",
                       port: int = 9092, kafka_port: int | None = None
                       ) -> tuple[dict[int, dict[str, str]], str]:
    """Node config overrides for a SASL_SSL local cluster, and its client properties file.

    Args:
        data_dir: the cluster's data dir (absolute); the files above are made in it.
        n_nodes: nodes 1..n_nodes; node i listens on ``SASL_SSL://host:port+i-1`` (and,
            with ``kafka_port``, Kafka clients on ``SASL_SSL://host:kafka_port+i-1``).

    Returns:
        ({node id: {config key: value}}, path of ``client.properties``). The overrides
        hold the admin password: give them to the node in a 0600 file, not its argv.
    """
    assert os.path.isabs(data_dir), data_dir
    assert n_nodes >= 1, n_nodes
    hosts = DEFAULT_HOSTS if host in DEFAULT_HOSTS else (*DEFAULT_HOSTS, host)
    tls = tls_init(os.path.join(data_dir, TLS_DIR), n_nodes, hosts)
    password = filemodes.stored_secret(os.path.join(data_dir, PASSWORD_FILE),
                                       lambda: secrets.token_urlsafe(24))
    nodes = {}
    for i in range(1, n_nodes + 1):
        own = {
            "listeners": f"SASL_SSL://{host}:{port + i - 1}",
            "ssl.keystore.location": node_keystore(tls.dir, i),
            "ssl.truststore.location": tls.cafile,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "inter.broker.sasl.username": ADMIN_USER,
            "inter.broker.sasl.password": password,
            "super.users": f"User:{ADMIN_USER}",
            "authorizer.enable": "true",
        }
        if kafka_port is not None:
            own["kafka.listener"] = f"SASL_SSL://{host}:{kafka_port + i - 1}"
        nodes[i] = own
    props = os.path.join(data_dir, CLIENT_PROPERTIES_FILE)
    filemodes.write_private(props, "\n".join([
        "# written by raftlog up --security: raftlog ... --command-config THIS_FILE",
        "security.protocol=SASL_SSL",
        f"ssl.truststore.location={tls.cafile}",
        f"sasl.mechanism={MECHANISM}",
        f"sasl.username={ADMIN_USER}",
        f"sasl.password={password}",
        "",
    ]))
    return nodes, props
