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
    lim = FailureLimiter(max_failures=3, window_s=60, block_s=30, max_addresses=2,
                         max_failures_per_address=3)
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


def test_limiter_blocks_a_user_from_an_address_not_the_others():
    lim = FailureLimiter(max_failures=2, window_s=60, block_s=30, max_failures_per_address=5)
    assert not lim.record_failure("a", 0, "alice")
    assert lim.record_failure("a", 1, "alice")  # alice blocked from a
    assert lim.blocked_for("a", "alice", 2) == 29
    assert lim.blocked_for("a", "admin", 2) == 0 and lim.blocked_for("b", "alice", 2) == 0
    assert not lim.blocked("a", 2)
    with pytest.raises(ApiError) as e:
        lim.check_login("a", "alice", 2.5)
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert e.value.message == "too many failed logins for user alice from a: blocked for 29 s"
    lim.check_login("a", "admin", 2.5)  # not collateral
    # refused while blocked: not counted again (towards the address either)
    for t in range(10):
        assert not lim.record_failure("a", 3 + t * 0.1, "alice")  # (no new block)
    assert not lim.blocked("a", 4)
    lim.check_login("a", "alice", 31.5)  # the block is over
    # the address's own bound: many users (or none named) from one address
    assert not lim.record_failure("a", 40, "u1") and not lim.record_failure("a", 41)
    assert lim.record_failure("a", 42, "u3")  # 5 within the window (alice's 2 too)
    assert lim.blocked("a", 43)
    with pytest.raises(ApiError, match=r"too many failed logins from a: blocked for 29 s$"):
        lim.check_login("a", "admin", 43)


def test_a_blocked_user_is_refused_before_the_password_is_checked():
    lim = FailureLimiter(max_failures=1, window_s=60, block_s=30)
    lim.record_failure("10.0.0.1", 0, "alice")
    s = SaslSession(MECHS, lambda u, m: CREDS.get((u, m)),
                    admit=lambda user: lim.check_login("10.0.0.1", user, 1))
    s.handshake(scram.SCRAM_SHA_256)
    c = scram.ScramClient(scram.SCRAM_SHA_256, "alice", "right")
    with pytest.raises(ApiError, match="too many failed logins for user alice from 10.0.0.1"):
        s.authenticate(c.first())
    assert s.user == "alice" and not s.authenticated
    p = SaslSession(MECHS, lambda u, m: CREDS.get((u, m)),
                    admit=lambda user: lim.check_login("10.0.0.1", user, 1))
    p.handshake(scram.PLAIN)
    with pytest.raises(ApiError, match="blocked for 29 s"):
        p.authenticate(scram.encode_plain("alice", "right"))


def test_fake_salts_need_the_cluster_secret():
    s = SaslSession(MECHS, lambda u, m: None, fake_secret=lambda: b"")
    with pytest.raises(ApiError) as e:
        s.handshake(scram.SCRAM_SHA_256)
    assert e.value.code == ErrorCode.BROKER_NOT_AVAILABLE

    def salt(secret: bytes) -> str:
        t = SaslSession(MECHS, lambda u, m: None, fake_secret=lambda: secret)
        t.handshake(scram.SCRAM_SHA_256)
        first = t.authenticate(scram.ScramClient(scram.SCRAM_SHA_256, "nobody", "x").first())
        return dict(x.split("=", 1) for x in first["auth"].decode().split(","))["s"]

    assert salt(b"k" * 32) == salt(b"k" * 32) != salt(b"j" * 32)
