"""The metrics listener is operator-only (issue 35 item 7): loopback unless given a
host, HTTPS with the node's kind of PEM files, and HTTP basic authentication -- a
scrape without the right credentials gets 401 and no metric."""

from __future__ import annotations

import base64
import http.client
import os
import re
import socket
import ssl

import pytest

from raftlog.errors import ConfigError
from raftlog.node.config import NodeConfig
from raftlog.node.metrics_http import authorized, http_response, request_header
from tests.certs import make_certs
from tests.conftest import NodeProcess, free_port, wait_for_port

AUTH = ("prometheus", "scrape-secret-123")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def head(*headers: str) -> bytes:
    return ("GET /metrics HTTP/1.1\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in headers)
            + "\r\n").encode()


def test_basic_auth_check():
    assert authorized(head(), None)  # no auth configured
    assert not authorized(head(), AUTH)
    assert authorized(head(f"Authorization: {basic(*AUTH)}"), AUTH)
    assert authorized(head(f"authorization:  {basic(*AUTH)} "), AUTH)
    assert not authorized(head(f"Authorization: {basic(AUTH[0], 'wrong')}"), AUTH)
    assert not authorized(head(f"Authorization: {basic('other', AUTH[1])}"), AUTH)
    assert not authorized(head("Authorization: Basic !!notbase64"), AUTH)
    assert not authorized(head("Authorization: Bearer abc"), AUTH)
    token = base64.b64encode(b"prometheusscrape-secret-123").decode()  # no colon
    assert not authorized(head(f"Authorization: Basic {token}"), AUTH)
    assert request_header(head("X-A: 1"), "x-a") == "1" and request_header(head(), "x-a") is None
    r = http_response("401 Unauthorized", b"no\n", headers=("WWW-Authenticate: Basic",))
    assert r.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and b"\r\nWWW-Authenticate: Basic\r\n" in r


def test_metrics_config():
    for v in ("9404", ":9404"):  # a port only: loopback
        c = NodeConfig.from_properties({"metrics.listener": v})
        assert (c.metrics_host, c.metrics_port) == ("127.0.0.1", 9404)
    ok = {"metrics.listener": "127.0.0.1:9404", "metrics.basic.auth.username": "p"}
    with pytest.raises(ConfigError, match="exactly one of metrics.basic.auth.password"):
        NodeConfig.from_properties(ok)
    with pytest.raises(ConfigError, match="exactly one of"):
        NodeConfig.from_properties({**ok, "metrics.basic.auth.password": "x",
                                    "metrics.basic.auth.password.file": "/f"})
    with pytest.raises(ConfigError, match="metrics.basic.auth.password needs "
                                          "metrics.basic.auth.username"):
        NodeConfig.from_properties({"metrics.basic.auth.password": "x"})
    with pytest.raises(ConfigError, match="must not contain ':'"):
        NodeConfig.from_properties({"metrics.basic.auth.username": "a:b",
                                    "metrics.basic.auth.password": "x"})
    with pytest.raises(ConfigError, match="password in the clear off loopback"):
        NodeConfig.from_properties({**ok, "metrics.listener": "0.0.0.0:9404",
                                    "metrics.basic.auth.password": "x"})
    NodeConfig.from_properties({**ok, "metrics.listener": "0.0.0.0:9404",
                                "metrics.basic.auth.password": "x",
                                "metrics.ssl.keystore.location": "/k.pem"})
    with pytest.raises(ConfigError, match="needs metrics.ssl.truststore.location"):
        NodeConfig.from_properties({"metrics.ssl.keystore.location": "/k.pem",
                                    "metrics.ssl.client.auth": "required"})
    with pytest.raises(ConfigError, match="metrics.ssl.truststore.location needs "
                                          "metrics.ssl.keystore.location"):
        NodeConfig.from_properties({"metrics.ssl.truststore.location": "/ca.pem"})


def get(port: int, *, tls: ssl.SSLContext | None = None, auth=None) -> tuple[int, dict, bytes]:
    cls = http.client.HTTPSConnection if tls is not None else http.client.HTTPConnection
    kw = {"context": tls} if tls is not None else {}
    c = cls("127.0.0.1", port, timeout=10, **kw)
    try:
        c.request("GET", "/metrics", headers={"Authorization": basic(*auth)} if auth else {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_default_bind_is_loopback(tmp_path):
    port = free_port()
    node = NodeProcess(str(tmp_path / "n"), free_port(), extra={"metrics.listener": str(port)})
    node.start()
    try:
        wait_for_port("127.0.0.1", port, 20, node.proc)  # (started after the client port)
        status, _, body = get(port)
        assert status == 200 and b"raftlog_up_seconds" in body
        assert re.search(rf"metrics_listening host=127\.0\.0\.1 port={port}", node.log_text())
        s = socket.create_connection(("127.0.0.1", port), 10)
        assert s.getpeername()[0] == "127.0.0.1"
        s.close()
    finally:
        node.stop()


def test_https_and_basic_auth_with_a_real_node(tmp_path):
    certs = make_certs(str(tmp_path / "certs"))
    cert, key = certs.issue("metrics", "metrics", hosts=("127.0.0.1",))
    pw_file = tmp_path / "metrics.password"
    pw_file.write_text(AUTH[1] + "\n")
    pw_file.chmod(0o600)
    port = free_port()
    node = NodeProcess(str(tmp_path / "n"), free_port(), extra={
        "metrics.listener": f"127.0.0.1:{port}",
        "metrics.ssl.keystore.location": cert, "metrics.ssl.key.location": key,
        "metrics.basic.auth.username": AUTH[0],
        "metrics.basic.auth.password.file": str(pw_file),
        "connection.failed.authentication.delay.ms": "0"})
    node.start()
    try:
        wait_for_port("127.0.0.1", port, 20, node.proc)
        tls = ssl.create_default_context(cafile=certs.cafile)
        status, headers, body = get(port, tls=tls)  # no credentials
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
        assert b"raftlog_" not in body
        assert get(port, tls=tls, auth=(AUTH[0], "wrong"))[0] == 401
        status, _, body = get(port, tls=tls, auth=AUTH)
        assert status == 200 and b"raftlog_up_seconds" in body
        # plain HTTP on the HTTPS port: no metrics (the TLS handshake fails)
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            get(port, auth=AUTH)
        # a client that does not trust the node's CA: refused before any HTTP
        other = make_certs(str(tmp_path / "other"))
        with pytest.raises(ssl.SSLError):
            get(port, tls=ssl.create_default_context(cafile=other.cafile), auth=AUTH)
        assert get(port, tls=tls, auth=AUTH)[0] == 200  # still serving
        assert "metrics_unauthorized" in node.log_text()
    finally:
        node.stop()


def test_a_world_readable_password_file_stops_the_node(tmp_path):
    pw_file = tmp_path / "metrics.password"
    pw_file.write_text("pw\n")
    pw_file.chmod(0o644)
    node = NodeProcess(str(tmp_path / "n"), free_port(), extra={
        "metrics.listener": f"127.0.0.1:{free_port()}", "metrics.basic.auth.username": "p",
        "metrics.basic.auth.password.file": str(pw_file)})
    with pytest.raises(RuntimeError, match="exited with 2"):
        node.start()
    assert f"chmod o-r {pw_file}" in node.log_text()
    assert os.path.exists(pw_file)
