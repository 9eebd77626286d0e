"""SASL/SCRAM-SHA-256 and -512 (RFC 5802, RFC 7677) and SASL/PLAIN (RFC 4616), sans-IO.

No sockets and no clocks: each side is a small state machine that takes the peer's
message as bytes and returns the bytes to send next, raising :class:`ScramError`
when the peer breaks the exchange. The same code serves the node, the SDK and the
unit tests (which check RFC 7677's published exchange byte for byte).

The exchange::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

What the server stores per user and mechanism is a :class:`ScramCredential`: salt,
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"). The password itself is never stored and never
sent. SASL/PLAIN sends the password itself (so only over TLS) and is checked against
the same stored credential (:func:`verify_plain`): one credential serves both.

Passwords are used as their UTF-8 bytes without SASLprep normalisation, as Kafka
does; user names are escaped in the messages as RFC 5802 says (``=2C``, ``=3D``).
Every secret comparison is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.errors import RaftlogError

#: Iterations below this are refused (RFC 7677 says at least 4096 for SHA-256).
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 8192
#: Above this a credential would let a client make the node burn seconds of CPU.
MAX_ITERATIONS = 1_000_000
SALT_BYTES = 16
NONCE_BYTES = 24
#: Longest SASL message either side accepts (a user name, nonces, a proof).
MAX_MESSAGE_BYTES = 4096
MAX_USERNAME_CHARS = 256

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"
#: Mechanism name -> hashlib name.
SCRAM_MECHANISMS = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512, PLAIN)


class ScramError(RaftlogError):
    """The SASL exchange failed: bad credentials or a message that breaks the protocol.

    The message is safe to show to the peer: it never says whether the user exists.
    """


def _hash_name(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(
            f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(SCRAM_MECHANISMS)})"
        ) from None


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def _h(hash_name: str, data: bytes) -> bytes:
    return hashlib.new(hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(what: str, s: str) -> bytes:
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramError(f"{what} is not valid base64") from None


def check_iterations(iterations: int) -> int:
    if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(
            f"iteration count {iterations!r} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS}"
        )
    return iterations


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps for one user and mechanism (never the password)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2-HMAC with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def derive_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """The stored credential of ``password``: a fresh random salt unless one is given.

    Raises:
        ScramError: unknown mechanism, empty password or an iteration count out of range.
    """
    hash_name = _hash_name(mechanism)
    check_iterations(iterations)
    if not password:
        raise ScramError("a password must not be empty")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    if not salt:
        raise ScramError("a salt must not be empty")
    sp = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(hash_name, sp, b"Client Key")
    return ScramCredential(mechanism, salt, iterations, _h(hash_name, client_key),
                           _hmac(hash_name, sp, b"Server Key"))


def credential_from_salted(mechanism: str, salt: bytes, iterations: int,
                           salted: bytes) -> ScramCredential:
    """The stored credential of an already salted password (Kafka's
    AlterUserScramCredentials sends Hi(password, salt, i), never the password)."""
    hash_name = _hash_name(mechanism)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(mechanism, salt, iterations, _h(hash_name, client_key),
                           _hmac(hash_name, salted, b"Server Key"))


def verify_plain(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` matches a stored SCRAM credential (for SASL/PLAIN)."""
    hash_name = _hash_name(credential.mechanism)
    sp = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    stored = _h(hash_name, _hmac(hash_name, sp, b"Client Key"))
    return hmac.compare_digest(stored, credential.stored_key)


# --------------------------------------------------------------------------- message syntax


def escape_username(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "=":
            code = s[i + 1: i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("user name has a bad '=' escape")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _decode(what: str, data: bytes) -> str:
    if len(data) > MAX_MESSAGE_BYTES:
        raise ScramError(f"{what} is longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


def _attributes(what: str, text: str, expected: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; the keys must start with ``expected`` in order
    (extensions after them are allowed and ignored, as RFC 5802 says)."""
    attrs: dict[str, str] = {}
    order = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 or not key.isalpha():
            raise ScramError(f"{what} has a malformed attribute {part[:20]!r}")
        if key in attrs:
            raise ScramError(f"{what} repeats attribute {key!r}")
        attrs[key] = value
        order.append(key)
    if "".join(order[: len(expected)]) != expected:
        raise ScramError(f"{what} must start with attributes {', '.join(expected)}")
    return attrs


def _check_nonce(what: str, nonce: str) -> str:
    if not nonce or any(c == "," or not 0x21 <= ord(c) <= 0x7E for c in nonce):
        raise ScramError(f"{what} nonce must be printable ASCII without ','")
    return nonce


def _new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


# --------------------------------------------------------------------------- client


class ScramClient:
    """The client side. ``first()`` -> send; ``final(server_first)`` -> send;
    ``verify(server_final)``: raises ScramError unless the server proved it knows the
    credential (a server that does not cannot impersonate the real one)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: str | None = None):
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = _check_nonce("client", nonce or _new_nonce())
        self._bare = ""
        self._server_signature = b""
        self._state = "start"

    def first(self) -> bytes:
        if self._state != "start":
            raise ScramError("client-first was already sent")
        self._bare = f"n={escape_username(self.username)},r={self._nonce}"
        self._state = "first"
        return ("n,," + self._bare).encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        if self._state != "first":
            raise ScramError("client-final out of order")
        text = _decode("server-first message", server_first)
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:]}")
        attrs = _attributes("server-first message", text, "rsi")
        nonce = _check_nonce("server", attrs["r"])
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("server nonce does not extend the client nonce")
        salt = _unb64("salt", attrs["s"])
        try:
            iterations = int(attrs["i"])
        except ValueError:
            raise ScramError("iteration count is not an integer") from None
        check_iterations(iterations)
        sp = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self._hash, sp, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._bare},{text},{without_proof}".encode()
        signature = _hmac(self._hash, _h(self._hash, client_key), auth)
        self._server_signature = _hmac(self._hash, _hmac(self._hash, sp, b"Server Key"), auth)
        self._state = "final"
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        if self._state != "final":
            raise ScramError("server-final out of order")
        self._state = "done"
        text = _decode("server-final message", server_final)
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:]}")
        attrs = _attributes("server-final message", text, "v")
        if not hmac.compare_digest(_unb64("server signature", attrs["v"]),
                                   self._server_signature):
            raise ScramError("server signature does not match: the server does not hold "
                             "this user's credential")


# --------------------------------------------------------------------------- server

#: (user name) -> its credential for the mechanism under way, or None.
CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """The server side of one exchange. ``first(client_first)`` -> server-first;
    ``final(client_final)`` -> server-final, after which :attr:`username` is
    authenticated. Any failure raises ScramError and the exchange is over.

    An unknown user gets a server-first built from a fake credential (a salt derived
    from the user name and ``fake_secret``) and fails at the proof like a wrong
    password, so the exchange does not tell which users exist. Give every server of a
    cluster the same ``fake_secret`` (the node derives it from the cluster secret in
    its metadata): a random one per server would let anyone comparing two servers'
    salts for a name tell a fake from a real one.
    """

    def __init__(self, mechanism: str, lookup: CredentialLookup, *,
                 nonce: str | None = None, fake_secret: bytes = b""):
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = _check_nonce("server", nonce or _new_nonce())
        self._fake_secret = fake_secret or secrets.token_bytes(16)
        self._cred: ScramCredential | None = None
        self._client_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""
        self._pending_user = ""
        self.username: str | None = None  # set once authenticated
        self._state = "start"

    def first(self, client_first: bytes) -> bytes:
        if self._state != "start":
            raise ScramError("client-first out of order")
        self._state = "failed"
        text = _decode("client-first message", client_first)
        gs2_flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise ScramError("client-first message has no GS2 header")
        if gs2_flag.startswith("p="):
            raise ScramError("channel binding is not supported")
        if gs2_flag not in ("n", "y"):
            raise ScramError("client-first message has a bad GS2 flag")
        attrs = _attributes("client-first message", bare, "nr")
        if attrs.get("m") is not None:
            raise ScramError("mandatory extensions are not supported")
        username = unescape_username(attrs["n"])
        if not username or len(username) > MAX_USERNAME_CHARS:
            raise ScramError(f"user name must have 1..{MAX_USERNAME_CHARS} characters")
        if authzid and authzid != "a=" + escape_username(username):
            raise ScramError("authorization id differs from the user name")
        client_nonce = _check_nonce("client", attrs["r"])
        cred = self._lookup(username)
        if cred is not None and cred.mechanism != self.mechanism:
            cred = None
        self._cred = cred
        salt, iterations = ((cred.salt, cred.iterations) if cred is not None
                            else (self._fake_salt(username), DEFAULT_ITERATIONS))
        self._gs2 = f"{gs2_flag},{authzid},"
        self._client_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._pending_user = username
        self._state = "first"
        return self._server_first.encode()

    def _fake_salt(self, username: str) -> bytes:
        return _hmac("sha256", self._fake_secret, username.encode())[:SALT_BYTES]

    def final(self, client_final: bytes) -> bytes:
        if self._state != "first":
            raise ScramError("client-final out of order")
        self._state = "failed"
        text = _decode("client-final message", client_final)
        attrs = _attributes("client-final message", text, "cr")
        if "p" not in attrs or not text.endswith(",p=" + attrs["p"]):
            raise ScramError("client-final message must end with the proof")
        if _unb64("channel binding", attrs["c"]) != self._gs2.encode():
            raise ScramError("channel binding does not match the GS2 header")
        if not hmac.compare_digest(attrs["r"].encode(), self._nonce.encode()):
            raise ScramError("nonce does not match this exchange (a replayed message?)")
        proof = _unb64("client proof", attrs["p"])
        without_proof = text[: -len(",p=" + attrs["p"])]
        auth = f"{self._client_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        stored_key = cred.stored_key if cred is not None else bytes(len(proof) or 1)
        signature = _hmac(self._hash, stored_key, auth)
        ok = len(proof) == len(signature)
        client_key = _xor(proof, signature) if ok else signature
        ok = hmac.compare_digest(_h(self._hash, client_key), stored_key) and ok
        if not ok or cred is None:
            raise ScramError(f"authentication failed: invalid credentials "
                             f"({self.mechanism})")
        self.username = self._pending_user
        self._state = "done"
        return f"v={_b64(_hmac(self._hash, cred.server_key, auth))}".encode()


# --------------------------------------------------------------------------- PLAIN


def encode_plain(username: str, password: str, authzid: str = "") -> bytes:
    """The one SASL/PLAIN message: authzid NUL authcid NUL password."""
    return f"{authzid}\0{username}\0{password}".encode()


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """(authzid, username, password) of a SASL/PLAIN message.

    Raises:
        ScramError: not three NUL-separated UTF-8 fields, an empty user name or
            password, or an authorization id other than the user.
    """
    text = _decode("PLAIN message", message)
    fields = text.split("\0")
    if len(fields) != 3:
        raise ScramError("PLAIN message must be authzid NUL user NUL password")
    authzid, username, password = fields
    if not username or not password:
        raise ScramError("PLAIN message has an empty user name or password")
    if len(username) > MAX_USERNAME_CHARS:
        raise ScramError(f"user name must have 1..{MAX_USERNAME_CHARS} characters")
    if authzid and authzid != username:
        raise ScramError("authorization id differs from the user name")
    return authzid, username, password
