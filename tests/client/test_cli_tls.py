"""`raftlog tls init DIR` and the overrides of `raftlog up --security`, without a node:
the files, their modes, a real TLS handshake with them, re-runs that keep what exists,
and bad input that says what to do."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import subprocess
import sys
import threading

import pytest

from raftlog import tls
from raftlog.client.cli_tls import tls_init
from raftlog.client.cli_up_security import security_overrides
from raftlog.client.security import load_command_config


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftlog.client.cli", *args],
                          capture_output=True, text=True, timeout=60)


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, host: str) -> str:
    """A TLS handshake over a real loopback socket; the principal the server sees."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        seen: list = []

        def serve():
            conn, _ = srv.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as s:
                    seen.append(tls.principal_from_cert(s.getpeercert()))
                    s.sendall(b"ok")
            except (ssl.SSLError, OSError):  # the client refused us: it raises
                conn.close()

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(srv.getsockname(), timeout=10) as raw:
            with client_ctx.wrap_socket(raw, server_hostname=host) as s:
                assert s.recv(2) == b"ok"
        t.join(10)
    return seen[0]


def test_tls_init_makes_a_ca_node_keystores_and_a_client_certificate(tmp_path):
    d = str(tmp_path / "tls")
    r = _cli("tls", "init", d, "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert "made: ca.pem, ca.key, node-1.pem, node-2.pem, client.pem, client.key" in r.stdout
    assert sorted(os.listdir(d)) == ["ca.key", "ca.pem", "client.key", "client.pem",
                                     "node-1.pem", "node-2.pem"]
    for private in ("ca.key", "client.key", "node-1.pem", "node-2.pem"):
        assert _mode(os.path.join(d, private)) == 0o600, private
    assert _mode(os.path.join(d, "ca.pem")) == 0o644
    assert _mode(d) == 0o700
    # the node keystore serves TLS that a client trusting ca.pem accepts, by IP and name;
    # the client certificate authenticates (mTLS) as its subject
    server = tls.server_context(os.path.join(d, "node-1.pem"),
                                cafile=os.path.join(d, "ca.pem"), client_auth="required")
    for host in ("127.0.0.1", "localhost"):
        client = tls.client_context(os.path.join(d, "ca.pem"), os.path.join(d, "client.pem"),
                                    os.path.join(d, "client.key"))
        assert _handshake(server, client, host) == "User:CN=client,O=raftlog"


def test_tls_init_again_keeps_what_exists_and_adds_what_is_missing(tmp_path):
    d = str(tmp_path / "tls")
    first = tls_init(d, nodes=1)
    ca, node1 = open(first.cafile).read(), open(first.keystores[0]).read()
    again = tls_init(d, nodes=3)
    assert again.made == ("node-2.pem", "node-3.pem")
    assert open(again.cafile).read() == ca and open(again.keystores[0]).read() == node1
    assert tls_init(d, nodes=3).made == ()


def test_tls_init_other_hosts(tmp_path):
    d = str(tmp_path / "tls")
    tls_init(d, nodes=1, hosts=("127.0.0.2", "broker.example"))
    server = tls.server_context(os.path.join(d, "node-1.pem"))
    cafile = os.path.join(d, "ca.pem")
    assert _handshake(server, tls.client_context(cafile), "broker.example") is None  # no client certificate
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, tls.client_context(cafile), "localhost")


@pytest.mark.parametrize(("args", "says"), [
    (["--nodes", "0"], "--nodes must be between 1 and 9, not 0"),
    (["--days", "0"], "--days must be between 1"),
])
def test_tls_init_bad_arguments(tmp_path, args, says):
    r = _cli("tls", "init", str(tmp_path / "tls"), *args)
    assert r.returncode == 1 and says in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "tls" / "ca.key")


def test_tls_init_on_a_broken_ca_says_what_to_do_and_changes_nothing(tmp_path):
    d = tmp_path / "tls"
    d.mkdir()
    (d / "ca.pem").write_text("not a certificate")
    r = _cli("tls", "init", str(d))
    assert r.returncode == 1
    assert f"cannot load the CA in {d}" in r.stderr and "Traceback" not in r.stderr
    assert sorted(os.listdir(d)) == ["ca.pem"]


def test_up_security_overrides_per_node_and_a_private_client_properties_file(tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    nodes, props = security_overrides(data, 3, host="127.0.0.1", port=9300, kafka_port=19300)
    assert sorted(nodes) == [1, 2, 3]
    for i, o in nodes.items():
        assert o["listeners"] == f"SASL_SSL://127.0.0.1:{9300 + i - 1}"
        assert o["kafka.listener"] == f"SASL_SSL://127.0.0.1:{19300 + i - 1}"
        assert o["ssl.keystore.location"] == os.path.join(data, "tls", f"node-{i}.pem")
        assert os.path.exists(o["ssl.keystore.location"])
        assert o["inter.broker.sasl.username"] == "admin" and o["super.users"] == "User:admin"
    password = nodes[1]["inter.broker.sasl.password"]
    assert len(password) >= 16
    assert props == os.path.join(data, "client.properties")
    assert _mode(props) == 0o600 and _mode(os.path.join(data, "admin.password")) == 0o600
    assert load_command_config(props) == {
        "security_protocol": "SASL_SSL", "ssl_cafile": os.path.join(data, "tls", "ca.pem"),
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin",
        "sasl_plain_password": password}
    # a restart: same password (the stored credential stays valid), same CA
    again, _ = security_overrides(data, 3, host="127.0.0.1", port=9300)
    assert again[2]["inter.broker.sasl.password"] == password
    assert "kafka.listener" not in again[2]
