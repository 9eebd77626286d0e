"""The Raft port's hello, frame bound and address limits (metadata/raft_hello.py):
bytes in, decisions out -- no sockets."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.metadata import raft_hello as H
from raftlog.metadata.errors import FrameError, HelloError

KEY = H.hello_key("test-secret-0123456789")


def _hello(identity="127.0.0.1:9193", key=KEY):
    nonce = os.urandom(H.NONCE_BYTES)
    challenge = H.challenge(nonce)
    assert len(challenge) == H.CHALLENGE_BYTES
    return nonce, H.answer(key, H.read_challenge(challenge), identity)


def test_a_correct_answer_names_its_identity():
    nonce, answer = _hello()
    assert len(answer) == H.ANSWER_BYTES
    assert H.check_answer(KEY, nonce, answer) == "127.0.0.1:9193"
    nonce, answer = _hello(H.READONLY_IDENTITY)
    assert H.check_answer(KEY, nonce, answer) == "readonly"


def test_the_key_depends_on_the_password_only():
    assert H.hello_key("test-secret-0123456789") == KEY
    assert H.hello_key("test-secret-0123456780") != KEY
    assert len(KEY) == 32


@pytest.mark.parametrize("why", ["password", "nonce", "identity", "mac"])
def test_a_wrong_answer_is_refused(why):
    nonce, answer = _hello()
    if why == "password":
        answer = H.answer(H.hello_key("another-secret-0123456"), nonce, "127.0.0.1:9193")
    elif why == "nonce":  # an answer recorded on another connection
        nonce = os.urandom(H.NONCE_BYTES)
    elif why == "identity":  # another name spliced in, the MAC kept
        name = b"127.0.0.1:9195"
        answer = (answer[:H.IDENTITY_LENGTH_OFFSET] + struct.pack(">H", len(name))
                  + name.ljust(H.IDENTITY_FIELD_BYTES, b"\0") + answer[H.MAC_OFFSET:])
    else:
        answer = answer[:-1] + bytes([answer[-1] ^ 1])
    with pytest.raises(HelloError, match="wrong Raft hello MAC"):
        H.check_answer(KEY, nonce, answer)


@pytest.mark.parametrize("mangle", [
    lambda a: a[:-1],  # short
    lambda a: b"X" + a[1:],  # not our magic
    lambda a: a[:H.IDENTITY_LENGTH_OFFSET] + b"\0\0" + a[H.IDENTITY_OFFSET:],  # empty name
    lambda a: a[:H.IDENTITY_LENGTH_OFFSET] + b"\xff\xff" + a[H.IDENTITY_OFFSET:],  # too long
    lambda a: a[:H.MAC_OFFSET - 1] + b"x" + a[H.MAC_OFFSET:],  # junk after the name
])
def test_a_malformed_answer_is_refused(mangle):
    nonce, answer = _hello()
    with pytest.raises(HelloError):
        H.check_answer(KEY, nonce, mangle(answer))


@given(st.binary(max_size=H.ANSWER_BYTES + 8))
def test_random_bytes_never_pass_the_hello(data):
    with pytest.raises(HelloError):
        H.check_answer(KEY, b"\0" * H.NONCE_BYTES, data)


def test_a_client_refuses_a_server_that_does_not_speak_first_our_way():
    with pytest.raises(HelloError, match="did not open with a raftlog hello"):
        H.read_challenge(struct.pack("i", 10) + b"\0" * (H.CHALLENGE_BYTES - 4))
    with pytest.raises(HelloError, match="shorter host name"):
        H.answer(KEY, b"\0" * 32, "h" * (H.IDENTITY_FIELD_BYTES + 1))


def test_frame_lengths_are_bounded_before_the_body():
    assert H.frame_length(struct.pack("i", 0)) == 0
    assert H.frame_length(struct.pack("i", H.FRAME_BYTES_MAX)) == H.FRAME_BYTES_MAX
    for bad in (H.FRAME_BYTES_MAX + 1, 2**31 - 1, -1, -(2**31)):
        with pytest.raises(FrameError, match="at most"):
            H.frame_length(struct.pack("i", bad))


def test_the_frame_bound_leaves_room_for_the_largest_envelope():
    """What the quorum may replicate (ENVELOPE_BYTES_MAX, plus a 64 KiB batch of
    others) fits a frame even incompressible: pickled, Fernet's base64 (x4/3) and
    its 57 bytes."""
    from raftlog.metadata.quorum import ENVELOPE_BYTES_MAX

    worst = (ENVELOPE_BYTES_MAX + 64 * 1024 + 4096) * 4 // 3 + 128
    assert worst < H.FRAME_BYTES_MAX
    assert ENVELOPE_BYTES_MAX + 64 * 1024 + 4096 < H.MESSAGE_BYTES_MAX


def test_address_limits():
    lim = H.AddressLimits(per_address_max=3, hellos_per_address_max=2, hellos_max=3)
    assert lim.admit("a") is None and lim.admit("a") is None
    assert "hellos already pending from a" in lim.admit("a")
    lim.authenticated("a")
    assert lim.admit("a") is None  # 3 open, 2 in their hello
    assert "3 Raft connections already open from a" in lim.admit("a")
    assert lim.admit("b") is None  # another address: its own count ...
    assert "3 Raft hellos already pending" == lim.admit("c")  # ... but the global one
    lim.closed("a", authenticated=False)
    lim.closed("b", authenticated=False)
    assert lim.admit("c") is None
    lim.closed("a", authenticated=True)
    lim.closed("a", authenticated=False)
    lim.closed("c", authenticated=False)
    assert not lim.open and not lim.hellos
    with pytest.raises(AssertionError):
        lim.closed("a", authenticated=False)


# --------------------------------------------------------------------------- open_frame


@pytest.fixture(scope="module")
def fernet():
    from pysyncobj.encryptor import getEncryptor

    return getEncryptor("test-secret-0123456789")


def _frame(fernet, message, at: int, key: bytes | None = None) -> bytes:
    import pysyncobj.pickle as p

    body = zlib.compress(p.dumps((key, message) if key else message), 3)
    return fernet.encrypt_at_time(body, at)


def test_open_frame_checks_timestamp_and_key(fernet):
    from raftlog.metadata.quorum import harden_pysyncobj
    from raftlog.metadata.raft_port import open_frame

    harden_pysyncobj()
    key = os.urandom(32)
    msg = {"type": "append_entries", "term": 3}
    assert open_frame(_frame(fernet, msg, 100, key), fernet, 99, key) == (msg, 100)
    with pytest.raises(FrameError, match="before the last one"):
        open_frame(_frame(fernet, msg, 98, key), fernet, 99, key)
    with pytest.raises(FrameError, match="this connection's key"):
        open_frame(_frame(fernet, msg, 100, os.urandom(32)), fernet, 99, key)
    with pytest.raises(FrameError, match="this connection's key"):
        open_frame(_frame(fernet, msg, 100), fernet, 99, key)
    with pytest.raises(FrameError, match="undecryptable"):
        open_frame(b"garbage" * 20, fernet, 0, None)


def test_open_frame_refuses_a_zip_bomb(fernet):
    from raftlog.metadata.raft_port import open_frame

    bomb = fernet.encrypt_at_time(zlib.compress(b"\0" * (H.MESSAGE_BYTES_MAX + 1), 9), 5)
    assert len(bomb) < 64 * 1024
    with pytest.raises(FrameError, match="inflates beyond"):
        open_frame(bomb, fernet, 0, None)


def test_the_checks_hold_under_python_dash_o():
    """pysyncobj checked a frame's timestamp and connection key with ``assert``,
    which ``python -O`` removes; ours are real checks."""
    script = """
import os, zlib
assert False, "not reached under -O"
"""
    # (the first lines prove -O is in effect: the assert above is skipped)
    script += """
import pysyncobj.pickle as p
from pysyncobj.encryptor import getEncryptor
from raftlog.metadata.quorum import harden_pysyncobj
from raftlog.metadata.raft_port import open_frame
from raftlog.metadata.errors import FrameError
harden_pysyncobj()
f = getEncryptor("test-secret-0123456789")
key = os.urandom(32)
stale = f.encrypt_at_time(zlib.compress(p.dumps((key, {"type": "x"}))), 5)
foreign = f.encrypt_at_time(zlib.compress(p.dumps((os.urandom(32), {"type": "x"}))), 50)
refused = 0
for frame in (stale, foreign):
    try:
        open_frame(frame, f, 10, key)
    except FrameError:
        refused += 1
print("refused", refused)
"""
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["refused", "2"]
