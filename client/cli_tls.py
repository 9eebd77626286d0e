"""``raftlog tls init DIR``: a CA, node certificates and a client certificate for trying TLS
on one machine (raftlog.certs; needs the ``cryptography`` package of the server extra).

Run again on the same DIR, it keeps the CA and every file that exists and makes only what
is missing (say ``--nodes 5`` after ``--nodes 3``), so ``raftlog up --security`` can call
it on every start.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

NODES_MAX = 9
DEFAULT_HOSTS = ("127.0.0.1", "localhost")
CLIENT_NAME = "client"


def node_keystore(directory: str, node_id: int) -> str:
    """Where ``tls init`` puts node ``node_id``'s keystore (certificate + key, PEM)."""
    return os.path.join(directory, f"node-{node_id}.pem")


@dataclass(frozen=True)
class TlsFiles:
    """What ``tls init`` made or kept in ``dir``."""

    dir: str
    cafile: str
    keystores: tuple[str, ...]  # node i's is keystores[i - 1]
    client_cert: str
    client_key: str
    made: tuple[str, ...]  # the files written by this call


def tls_init(directory: str, nodes: int = 1, hosts=DEFAULT_HOSTS, days: int = 365) -> TlsFiles:
    """Make (or complete) the TLS material of a local cluster in ``directory``.

    Args:
        directory: made 0700 if missing.
        nodes: node certificates ``node-1.pem`` .. ``node-N.pem`` (keystores: certificate
            then key, 0600), CN ``node-I``, valid for every name in ``hosts``.
        hosts: IP addresses or DNS names the nodes are reached on.
        days: validity of what is made.

    Raises:
        ValueError: bad arguments (the message says which).
        raftlog.certs.CertsError: ``ca.pem`` exists but the CA cannot be loaded.
    """
    if not 1 <= nodes <= NODES_MAX:
        raise ValueError(f"--nodes must be between 1 and {NODES_MAX}, not {nodes}")
    if not hosts:
        raise ValueError("at least one --host is needed (the address the nodes listen on)")
    from raftlog.certs import CA_CERT_FILE, DAYS_MAX, LocalCA

    if not 1 <= days <= DAYS_MAX:
        raise ValueError(f"--days must be between 1 and {DAYS_MAX}, not {days}")
    made = []
    if os.path.exists(os.path.join(directory, CA_CERT_FILE)):
        ca = LocalCA.load(directory)
    else:
        ca = LocalCA.create(directory, days=days)
        made += ["ca.pem", "ca.key"]
    keystores = []
    for i in range(1, nodes + 1):
        path = node_keystore(directory, i)
        if not os.path.exists(path):
            ca.issue(f"node-{i}", f"node-{i}", hosts=tuple(hosts), days=days, keystore=True)
            made.append(os.path.basename(path))
        keystores.append(path)
    client_cert = os.path.join(directory, f"{CLIENT_NAME}.pem")
    client_key = os.path.join(directory, f"{CLIENT_NAME}.key")
    if not (os.path.exists(client_cert) and os.path.exists(client_key)):
        ca.issue(CLIENT_NAME, CLIENT_NAME, hosts=(), days=days, client=True)
        made += [f"{CLIENT_NAME}.pem", f"{CLIENT_NAME}.key"]
    return TlsFiles(directory, ca.cafile, tuple(keystores), client_cert, client_key, tuple(made))


def cmd_tls(args) -> int:
    try:
        import cryptography  # noqa: F401 -- only to say what is missing
    except ImportError:
        print("raftlog tls: needs the cryptography package: pip install 'raftlog[server]'",
              file=sys.stderr)
        return 1
    directory = os.path.abspath(args.dir)
    files = tls_init(directory, args.nodes, args.host or DEFAULT_HOSTS, args.days)
    print(f"TLS material in {directory} (made: {', '.join(files.made) or 'nothing, all there'})")
    print(f"  CA certificate:  {files.cafile}   (ssl.truststore.location / ssl_cafile)")
    for i, path in enumerate(files.keystores, 1):
        print(f"  node {i} keystore: {path}   (ssl.keystore.location; key inside, 0600)")
    print(f"  client (mTLS):   {files.client_cert} + {files.client_key}")
    return 0


def add_parsers(sub) -> None:
    tls = sub.add_parser("tls", help="make a CA and certificates for local TLS")
    tsub = tls.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = tsub.add_parser(
        "init", help="a CA, node certificates and a client certificate in DIR",
        description="Make a CA (ca.pem, ca.key), one keystore per node (node-I.pem: "
                    "certificate + key) and a client certificate (client.pem, client.key) "
                    "in DIR; keys are mode 0600. Files already there are kept.")
    init.add_argument("dir", metavar="DIR")
    init.add_argument("--nodes", type=int, default=1, help="node certificates (default 1)")
    init.add_argument("--host", action="append", default=None, metavar="NAME",
                      help="an address or DNS name of the nodes, repeatable "
                           "(default: 127.0.0.1 and localhost)")
    init.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    tls.set_defaults(fn=cmd_tls)
