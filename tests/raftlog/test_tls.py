"""TLS contexts with real handshakes over a socket pair; certificates made in the test."""

from __future__ import annotations

import os
import socket
import ssl
import threading

import pytest

from raftlog.tls import (
    TlsConfigError,
    client_context,
    describe_handshake_error,
    distinguished_name,
    principal_from_cert,
    server_context,
)
from tests.certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    c = make_certs(str(tmp_path_factory.mktemp("certs")))
    c.server = c.issue("server", "node1")
    c.expired = c.issue("expired", "old", expired=True)
    c.wrong_host = c.issue("wrong", "elsewhere", hosts=("10.9.9.9", "elsewhere.example"))
    c.client = c.issue("client", "alice", hosts=())
    return c


def handshake(server_ctx, client_ctx, server_hostname="localhost"):
    """(server's view of the peer cert, client error or None, server error or None)."""
    a, b = socket.socketpair()
    out = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                out["peer"] = s.getpeercert()
                s.sendall(b"hi")
        except Exception as e:
            out["server_error"] = e

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_hostname) as c:
            assert c.recv(2) == b"hi"
            assert c.version() in ("TLSv1.2", "TLSv1.3")
        err = None
    except Exception as e:
        err = e
        b.close()
    t.join(10)
    a.close()
    return out.get("peer"), err, out.get("server_error")


def test_handshake_and_hostname_verification(certs):
    srv = server_context(*certs.server)
    _, err, _ = handshake(srv, client_context(certs.cafile))
    assert err is None
    _, err, _ = handshake(srv, client_context(certs.cafile), server_hostname="other.example")
    assert isinstance(err, ssl.SSLCertVerificationError)
    assert "not valid for that name" in describe_handshake_error(err, "other.example")
    # hostname check off: the chain is still verified
    _, err, _ = handshake(srv, client_context(certs.cafile, check_hostname=False), "x.example")
    assert err is None


def test_expired_and_wrong_host_certificates_fail_clearly(certs):
    _, err, _ = handshake(server_context(*certs.expired), client_context(certs.cafile))
    assert "has expired" in describe_handshake_error(err, "localhost")
    _, err, _ = handshake(server_context(*certs.wrong_host), client_context(certs.cafile))
    assert "not valid for that name" in describe_handshake_error(err, "localhost")


def test_unknown_ca_fails(certs, tmp_path):
    other = make_certs(str(tmp_path / "other"))
    _, err, _ = handshake(server_context(*certs.server), client_context(other.cafile))
    assert "cannot verify" in describe_handshake_error(err)


def test_mutual_tls_gives_a_principal(certs):
    srv = server_context(*certs.server, cafile=certs.cafile, client_auth="required")
    peer, err, _ = handshake(srv, client_context(certs.cafile, *certs.client))
    assert err is None
    assert principal_from_cert(peer) == "User:CN=alice,O=raftlog-test"
    _, err, server_err = handshake(srv, client_context(certs.cafile))  # no client cert
    assert err is not None or server_err is not None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls_1_1_is_refused(certs):
    srv = server_context(*certs.server)
    cli = client_context(certs.cafile)
    cli.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    cli.maximum_version = ssl.TLSVersion.TLSv1_1
    _, err, _ = handshake(srv, cli)
    assert err is not None


def test_bad_files_are_clear_errors(certs, tmp_path):
    with pytest.raises(TlsConfigError, match="cannot read"):
        server_context(str(tmp_path / "missing.pem"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(TlsConfigError, match="not usable"):
        server_context(str(junk))
    with pytest.raises(TlsConfigError, match="CA file"):
        client_context(str(junk))
    with pytest.raises(TlsConfigError, match="not usable"):  # key of another certificate
        server_context(certs.server[0], certs.client[1])
    with pytest.raises(TlsConfigError, match="ssl.client.auth"):
        server_context(*certs.server, client_auth="maybe")
    with pytest.raises(TlsConfigError, match="truststore"):
        server_context(*certs.server, client_auth="required")
    assert os.path.exists(certs.cafile)


def test_distinguished_name_escapes_and_orders():
    subject = ((("countryName", "SE"),), (("organizationName", "A, B"),),
               (("commonName", "x+y"),))
    assert distinguished_name(subject) == "CN=x\\+y,O=A\\, B,C=SE"
    assert principal_from_cert(None) is None
