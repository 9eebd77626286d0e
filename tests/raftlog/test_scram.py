"""SCRAM-SHA-256/512 and PLAIN, sans-IO: RFC 7677's exchange, failures, round trips."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog import scram
from raftlog.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramError,
    ScramServer,
    derive_credential,
    encode_plain,
    parse_plain,
    verify_plain,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential():
    return derive_credential(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)


def test_rfc7677_client_side():
    c = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert c.first() == RFC_CLIENT_FIRST
    assert c.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    c.verify(RFC_SERVER_FINAL)


def test_rfc7677_server_side():
    cred = rfc_credential()
    s = ScramServer(SCRAM_SHA_256, {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    assert s.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert s.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert s.username == "user"


def exchange(mechanism, creds, user, password):
    c = ScramClient(mechanism, user, password)
    s = ScramServer(mechanism, creds.get)
    server_final = s.final(c.final(s.first(c.first())))
    c.verify(server_final)
    return s.username


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_round_trip_and_wrong_password(mech):
    creds = {"alice": derive_credential(mech, "s3cret!")}
    assert exchange(mech, creds, "alice", "s3cret!") == "alice"
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange(mech, creds, "alice", "wrong")


def test_unknown_user_fails_like_a_wrong_password():
    creds = {"alice": derive_credential(SCRAM_SHA_256, "pw")}
    s = ScramServer(SCRAM_SHA_256, creds.get)
    c = ScramClient(SCRAM_SHA_256, "mallory", "pw")
    first = s.first(c.first())
    assert b",s=" in first and b",i=8192" in first  # looks like a real user's
    with pytest.raises(ScramError, match="invalid credentials"):
        s.final(c.final(first))
    assert s.username is None


def test_mechanism_mismatch_is_an_unknown_user():
    creds = {"alice": derive_credential(SCRAM_SHA_512, "pw")}
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange(SCRAM_SHA_256, creds, "alice", "pw")


def test_replayed_client_final_fails_in_a_new_exchange():
    creds = {"alice": derive_credential(SCRAM_SHA_256, "pw")}
    c = ScramClient(SCRAM_SHA_256, "alice", "pw")
    s = ScramServer(SCRAM_SHA_256, creds.get)
    client_first = c.first()
    client_final = c.final(s.first(client_first))
    s.final(client_final)
    s2 = ScramServer(SCRAM_SHA_256, creds.get)
    s2.first(client_first)
    with pytest.raises(ScramError, match="nonce"):
        s2.final(client_final)


def test_server_without_the_credential_cannot_impersonate():
    real = {"alice": derive_credential(SCRAM_SHA_256, "pw")}
    fake = {"alice": derive_credential(SCRAM_SHA_256, "pw", salt=real["alice"].salt)}
    fake["alice"] = scram.ScramCredential(SCRAM_SHA_256, real["alice"].salt, 8192,
                                          real["alice"].stored_key, b"x" * 32)
    c = ScramClient(SCRAM_SHA_256, "alice", "pw")
    s = ScramServer(SCRAM_SHA_256, fake.get)
    final = s.final(c.final(s.first(c.first())))
    with pytest.raises(ScramError, match="server signature"):
        c.verify(final)


def test_username_escaping_round_trips():
    name = "a=b,c"
    creds = {name: derive_credential(SCRAM_SHA_256, "pw")}
    assert exchange(SCRAM_SHA_256, creds, name, "pw") == name


@pytest.mark.parametrize("msg", [
    b"", b"garbage", b"n,,", b"n,,n=user", b"p=tls-unique,,n=u,r=abc", b"x,,n=u,r=abc",
    b"n,,n=u=ZZ,r=abc", b"n,,r=abc,n=u", b"n,a=other,n=u,r=abc", b"\xff\xfe",
    b"n,,n=u,r=a" + b"b" * 5000, b"n,,n=u,r=a,m=ext", b"n,,n=,r=abc",
])
def test_bad_client_first_is_a_clear_error(msg):
    s = ScramServer(SCRAM_SHA_256, {}.get)
    with pytest.raises(ScramError):
        s.first(msg)
    with pytest.raises(ScramError, match="out of order"):
        s.final(b"c=biws,r=x,p=AAAA")


@pytest.mark.parametrize("mutate", [
    lambda f: f[:-4],  # truncated proof
    lambda f: f.replace(b"c=biws", b"c=eSws"),  # other channel binding
    lambda f: f.replace(b",p=", b",x=1,p="),
    lambda f: f + b"!",
    lambda f: f.split(b",p=")[0],
    lambda f: b"garbage",
])
def test_bad_client_final_fails(mutate):
    creds = {"alice": derive_credential(SCRAM_SHA_256, "pw")}
    c = ScramClient(SCRAM_SHA_256, "alice", "pw")
    s = ScramServer(SCRAM_SHA_256, creds.get)
    final = c.final(s.first(c.first()))
    with pytest.raises(ScramError):
        s.final(mutate(final))
    assert s.username is None


def test_client_rejects_a_server_nonce_not_extending_its_own():
    c = ScramClient(SCRAM_SHA_256, "u", "p", nonce="abc")
    c.first()
    with pytest.raises(ScramError, match="nonce"):
        c.final(b"r=xyz123,s=QUJD,i=4096")


def test_client_rejects_too_few_iterations():
    c = ScramClient(SCRAM_SHA_256, "u", "p", nonce="abc")
    c.first()
    with pytest.raises(ScramError, match="iteration"):
        c.final(b"r=abcdef,s=QUJD,i=1000")


def test_credential_validation():
    with pytest.raises(ScramError, match="iteration"):
        derive_credential(SCRAM_SHA_256, "pw", iterations=100)
    with pytest.raises(ScramError, match="unknown SCRAM mechanism"):
        derive_credential("SCRAM-MD5", "pw")
    with pytest.raises(ScramError, match="empty"):
        derive_credential(SCRAM_SHA_256, "")
    a = derive_credential(SCRAM_SHA_256, "pw")
    b = derive_credential(SCRAM_SHA_256, "pw")
    assert a.salt != b.salt and a.stored_key != b.stored_key  # salted
    assert b"pw" not in repr(a).encode()


def test_plain_parse_and_verify():
    cred = derive_credential(SCRAM_SHA_512, "hunter2")
    authzid, user, pw = parse_plain(encode_plain("bob", "hunter2"))
    assert (authzid, user, pw) == ("", "bob", "hunter2")
    assert verify_plain(cred, pw)
    assert not verify_plain(cred, "hunter3")
    assert parse_plain(b"bob\0bob\0x") == ("bob", "bob", "x")
    for bad in (b"bob\0pw", b"\0\0pw", b"\0bob\0", b"eve\0bob\0pw", b"a\0b\0c\0d", b"\xff\0a\0b"):
        with pytest.raises(ScramError):
            parse_plain(bad)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_server_never_raises_anything_but_scram_error(data):
    s = ScramServer(SCRAM_SHA_256, {}.get)
    try:
        s.first(data)
    except ScramError:
        return
    try:
        s.final(data)
    except ScramError:
        pass


@settings(max_examples=20, deadline=None)
@given(st.text(min_size=1, max_size=20).filter(lambda u: "\0" not in u),
       st.text(min_size=1, max_size=20))
def test_any_user_and_password_round_trip(user, password):
    cred = derive_credential(SCRAM_SHA_256, password, iterations=4096)
    assert exchange(SCRAM_SHA_256, {user: cred}, user, password) == user
