"""Client security options (kafka-python's names) and what they do to a connection.

    Producer(bootstrap_servers="node1:9093", security_protocol="SASL_SSL",
             ssl_cafile="ca.pem", sasl_mechanism="SCRAM-SHA-256",
             sasl_plain_username="alice", sasl_plain_password="...")

``security_protocol`` is PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL. With
SSL the node's certificate is verified against ``ssl_cafile`` (or the system's CAs)
and, unless ``ssl_check_hostname=False``, its host name; ``ssl_certfile`` and
``ssl_keyfile`` present a client certificate (mTLS). With SASL the connection
authenticates right after connecting, with SCRAM-SHA-256/512 (the password never
crosses the wire) or PLAIN (only over SSL: the password itself is sent).
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

from raftlog import filemodes, scram
from raftlog.errors import ApiError, ErrorCode
from raftlog.tls import TlsConfigError, client_context, describe_handshake_error

from .errors import BrokerNotAvailableError, ClientError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The option names Producer, Consumer and Admin accept (kafka-python's).
OPTION_NAMES = ("security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                "ssl_password", "ssl_check_hostname", "sasl_mechanism", "sasl_plain_username",
                "sasl_plain_password")


class SecurityConfigError(ClientError, ValueError):
    """Security options that cannot work together (named in the message)."""


class AuthenticationError(ClientError):
    """The node refused this client's TLS handshake or SASL credentials. Not retried:
    the same credentials would fail again."""


#: Added to a TLS handshake the node ended: a plaintext listener closes a TLS client's
#: connection at once (node/server.py, node/kafka/server.py).
PLAINTEXT_LISTENER_HINT = (" (the node closed the connection: if its listener is plaintext, "
                           "use security_protocol PLAINTEXT or SASL_PLAINTEXT)")


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str = "SCRAM-SHA-256"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None

    def __post_init__(self):
        proto = str(self.security_protocol).upper()
        object.__setattr__(self, "security_protocol", proto)
        if proto not in PROTOCOLS:
            raise SecurityConfigError(f"security_protocol {self.security_protocol!r} is not one "
                                      f"of {', '.join(PROTOCOLS)}")
        if self.sasl:
            mech = str(self.sasl_mechanism).upper()
            object.__setattr__(self, "sasl_mechanism", mech)
            if mech not in scram.MECHANISMS:
                raise SecurityConfigError(f"sasl_mechanism {self.sasl_mechanism!r} is not one "
                                          f"of {', '.join(scram.MECHANISMS)}")
            if not self.sasl_plain_username or not self.sasl_plain_password:
                raise SecurityConfigError(f"security_protocol={proto} needs "
                                          "sasl_plain_username and sasl_plain_password")
            if mech == scram.PLAIN and not self.tls:
                raise SecurityConfigError("sasl_mechanism=PLAIN sends the password itself: "
                                          "use it with security_protocol=SASL_SSL")
        # build once now: a missing or bad file is an error at construction
        object.__setattr__(self, "_context", self._build_context())

    @classmethod
    def from_options(cls, **options) -> ClientSecurity | None:
        """None for plain PLAINTEXT without options (no cost on the connection path)."""
        unknown = set(options) - set(OPTION_NAMES)
        if unknown:
            raise TypeError(f"unknown security options {sorted(unknown)}")
        given = {k: v for k, v in options.items() if v is not None}
        if str(given.get("security_protocol", "PLAINTEXT")).upper() == "PLAINTEXT":
            return None  # (the other options mean nothing without TLS or SASL)
        return cls(**given)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def _build_context(self):
        if not self.tls:
            return None
        try:
            return client_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile,
                                  password=self.ssl_password,
                                  check_hostname=self.ssl_check_hostname)
        except TlsConfigError as e:
            raise SecurityConfigError(str(e)) from None

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """The TLS-wrapped, handshaken socket (blocking, with sock's timeout).

        Raises:
            AuthenticationError: the handshake failed (expired or wrong-host certificate,
                unknown CA, or the node refused our certificate).
        """
        if not self.tls:
            return sock
        try:
            return self._context.wrap_socket(sock, server_hostname=host)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError) as e:
            sock.close()  # the node went away mid-handshake (stopping?): retriable
            raise BrokerNotAvailableError(describe_handshake_error(e, host)
                                          + PLAINTEXT_LISTENER_HINT) from None
        except (ssl.SSLError, ssl.CertificateError) as e:
            sock.close()  # a certificate or the TLS parameters were refused: not retried
            raise AuthenticationError(describe_handshake_error(e, host)) from None
        except OSError as e:  # reset or closed during the handshake
            sock.close()
            raise BrokerNotAvailableError(f"TLS handshake with {host} failed: {e}"
                                          + PLAINTEXT_LISTENER_HINT) from None

    def authenticate(self, request) -> None:
        """Run SASL over ``request(api, fields) -> header`` (a connection's blocking call).

        Raises:
            AuthenticationError: wrong password, unknown user, or the node refused the
                mechanism; or the node could not prove it holds our credential (SCRAM).
        """
        from raftlog.protocol import Api

        mech = self.sasl_mechanism
        try:
            request(Api.SASL_HANDSHAKE, {"mechanism": mech})
            if mech == scram.PLAIN:
                request(Api.SASL_AUTHENTICATE, {"auth": scram.encode_plain(
                    self.sasl_plain_username, self.sasl_plain_password)})
                return
            client = scram.ScramClient(mech, self.sasl_plain_username, self.sasl_plain_password)
            first = request(Api.SASL_AUTHENTICATE, {"auth": client.first()})
            final = request(Api.SASL_AUTHENTICATE, {"auth": client.final(first["auth"])})
            client.verify(final["auth"])
        except scram.ScramError as e:
            raise AuthenticationError(f"SASL {mech}: {e}") from None
        except ApiError as e:
            if e.code in (ErrorCode.SASL_AUTHENTICATION_FAILED,
                          ErrorCode.UNSUPPORTED_SASL_MECHANISM, ErrorCode.ILLEGAL_SASL_STATE):
                raise AuthenticationError(f"SASL {mech} as {self.sasl_plain_username!r}: "
                                          f"{e.message or e.code.name}") from None
            if e.retriable:  # a node still starting: try another one
                raise BrokerNotAvailableError(f"SASL: {e.message or e.code.name}") from None
            raise


#: The ``--command-config`` used when the flag is not given and this file exists.
DEFAULT_COMMAND_CONFIG = "~/.config/raftlog/client.properties"


def default_command_config() -> str | None:
    """The default ``--command-config`` file (~ expanded), or None when it is absent."""
    path = os.path.expanduser(DEFAULT_COMMAND_CONFIG)
    return path if os.path.isfile(path) else None


def security_kwargs(args) -> dict:
    """The CLI's ``--command-config FILE`` as keyword arguments: the flag's file, else
    ~/.config/raftlog/client.properties when it exists, else none (PLAINTEXT)."""
    path = getattr(args, "command_config", None) or default_command_config()
    return load_command_config(path) if path else {}


#: Kafka's client property names (and a few kafka-python spellings) -> option names.
PROPERTY_ALIASES = {
    "security.protocol": "security_protocol",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.cafile": "ssl_cafile",
    "ssl.keystore.location": "ssl_certfile",
    "ssl.certfile": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "ssl.check.hostname": "ssl_check_hostname",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}


def option_from_property(key: str, value: str) -> tuple[str, object] | None:
    """(option name, value) of one client property, or None when it is not a security
    property."""
    name = PROPERTY_ALIASES.get(key, key if key in OPTION_NAMES else None)
    if name is None:
        return None
    if name == "ssl_check_hostname":
        return name, str(value).strip().lower() in ("https", "true", "1", "yes")
    return name, str(value).strip()


def load_command_config(path: str) -> dict:
    """Kafka tools' ``--command-config FILE``: properties with Kafka's client keys
    (``security.protocol``, ``ssl.truststore.location``, ``sasl.mechanism``, ...) or
    kafka-python's names; returns the options as keyword arguments.

    Raises:
        SecurityConfigError: an unknown key, an unreadable file, or a password in a
            file every user can read (the message says ``chmod 600 FILE``).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise SecurityConfigError(f"cannot read {path}: {e.strerror}") from None
    out: dict = {}
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        item = option_from_property(key.strip(), value) if sep else None
        if item is None:
            known = ", ".join(sorted(set(PROPERTY_ALIASES) | set(OPTION_NAMES)))
            raise SecurityConfigError(
                f"{path}:{no}: unknown client setting {key.strip()!r} (known: {known})")
        out[item[0]] = item[1]
    _check_private(path, [k for k in SECRET_OPTIONS if out.get(k)])
    return out


#: Options holding secrets: a file giving one must not be readable by every user.
SECRET_OPTIONS = {"sasl_plain_password": "sasl.password", "ssl_password": "ssl.key.password"}


def _check_private(path: str, secrets: list[str]) -> None:
    """Refuse a world-readable file with a password in it, as the node refuses its
    own config (node/config.py check_secret_file)."""
    if not secrets:
        return
    try:
        readable = filemodes.world_readable(path)
    except OSError as e:
        raise SecurityConfigError(f"cannot stat {path}: {e.strerror}") from None
    if readable:
        names = ", ".join(SECRET_OPTIONS[k] for k in secrets)
        raise SecurityConfigError(f"{path} holds a password ({names}) but every user can read "
                                  f"it: chmod 600 {path}")
