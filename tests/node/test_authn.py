"""SASL sessions and the failed-authentication limiter (pure, no sockets)."""

from __future__ import annotations

import pytest

from raftlog import scram
from raftlog.errors import ApiError, ErrorCode
from raftlog.node.authn import FailureLimiter, SaslSession
from raftlog.protocol import Api

CREDS = {("alice", scram.SCRAM_SHA_256): scram.derive_credential(scram.SCRAM_SHA_256, "pw"),
         ("bob", scram.SCRAM_SHA_512): scram.derive_credential(scram.SCRAM_SHA_512, "pw2")}
MECHS = (scram.SCRAM_SHA_256, scram.SCRAM_SHA_512, scram.PLAIN)


def session():
    return SaslSession(MECHS, lambda u, m: CREDS.get((u, m)))


def code_of(fn, *args):
    with pytest.raises(ApiError) as e:
        fn(*args)
    return e.value.code


def test_scram_session():
    s = session()
    s.check_api(Api.API_VERSIONS)
    assert code_of(s.check_api, Api.PRODUCE) == ErrorCode.ILLEGAL_SASL_STATE
    assert code_of(s.authenticate, b"x") == ErrorCode.ILLEGAL_SASL_STATE
    assert s.handshake(scram.SCRAM_SHA_256)["mechanisms"] == list(MECHS)
    c = scram.ScramClient(scram.SCRAM_SHA_256, "alice", "pw")
    first = s.authenticate(c.first())
    assert not first["done"] and not s.authenticated
    final = s.authenticate(c.final(first["auth"]))
    c.verify(final["auth"])
    assert final["done"] and s.principal == "User:alice"
    s.check_api(Api.PRODUCE)
    assert code_of(s.handshake, scram.PLAIN) == ErrorCode.ILLEGAL_SASL_STATE


def test_plain_session_and_failures():
    s = session()
    s.handshake(scram.PLAIN)
    assert s.authenticate(scram.encode_plain("bob", "pw2"))["done"]
    assert s.principal == "User:bob"
    for msg in (scram.encode_plain("bob", "nope"), scram.encode_plain("eve", "pw"), b"\xff"):
        s = session()
        s.handshake(scram.PLAIN)
        assert code_of(s.authenticate, msg) == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert not s.authenticated


def test_unknown_mechanism_and_garbage():
    s = session()
    assert code_of(s.handshake, "GSSAPI") == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    s.handshake(scram.SCRAM_SHA_512)
    assert code_of(s.authenticate, b"garbage") == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_limiter_blocks_after_repeated_failures_and_forgets():
    lim = FailureLimiter(max_failures=3, window_s=60, block_s=30, max_addresses=2)
    assert not lim.record_failure("a", 0) and not lim.record_failure("a", 1)
    assert lim.record_failure("a", 2) and lim.blocked("a", 3) and not lim.blocked("b", 3)
    assert not lim.blocked("a", 33)  # block over
    lim.record_failure("b", 100)
    lim.record_failure("b", 170)  # the first is out of the window
    assert not lim.record_failure("c", 171) and not lim.blocked("b", 172)
    for t in (0, 1, 2):
        lim.record_failure("d", 200 + t)
    lim.record_failure("e", 203)
    lim.record_failure("f", 204)  # bounded: "d" is forgotten first
    assert not lim.blocked("d", 205)


def test_peer_address_prefers_our_inter_broker_listener_name():
    from raftlog.node.peer import peer_address

    both = (("10.0.0.1", 9092, "PLAINTEXT"), ("10.0.0.1", 9094, "SASL_SSL"))
    assert peer_address(both, "SASL_SSL") == ("10.0.0.1", 9094)
    assert peer_address(both, "PLAINTEXT") == ("10.0.0.1", 9092)
    assert peer_address((("h", 1),), "SASL_SSL") == ("h", 1)  # registered before names
