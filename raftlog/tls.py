"""TLS contexts for the node and the SDK (stdlib ``ssl``), and principals from certificates.

Both sides speak TLS 1.2 or newer, without compression or renegotiation. The client
verifies the server's certificate against ``cafile`` (or the system's store) and,
unless told otherwise, its host name (``ssl_check_hostname``). The server can ask for
client certificates (mTLS): ``client_auth`` is ``none``, ``requested`` or ``required``
(Kafka's ``ssl.client.auth``); an authenticated client certificate names the principal
(:func:`principal_from_cert`, Kafka's default rule: ``User:`` + the subject's
distinguished name in RFC 2253 order, for example ``User:CN=alice,O=example``).

Certificates and keys are PEM files. Every failure to load one is a
:class:`TlsConfigError` naming the file; handshake failures are described for people
by :func:`describe_handshake_error` (expired, wrong host, unknown issuer).
"""

from __future__ import annotations

import ssl

from raftlog.errors import RaftlogError

CLIENT_AUTH = ("none", "requested", "required")

#: X.509 attribute names as getpeercert() gives them -> RFC 2253 short names.
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}


class TlsConfigError(RaftlogError):
    """A certificate, key or CA file that cannot be used; the message names the file."""


def _harden(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    return ctx


def _load_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str | None,
                password: str | None) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile or None, password or None)
    except FileNotFoundError as e:
        raise TlsConfigError(f"cannot read certificate or key {e.filename or certfile}") from None
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(
            f"certificate {certfile}{' / key ' + keyfile if keyfile else ''} is not usable "
            f"(not PEM, wrong key password, or the key does not match): {e}") from None


def _load_ca(ctx: ssl.SSLContext, cafile: str | None) -> None:
    if not cafile:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH if ctx.check_hostname
                               else ssl.Purpose.CLIENT_AUTH)
        return
    try:
        ctx.load_verify_locations(cafile=cafile)
    except FileNotFoundError:
        raise TlsConfigError(f"cannot read CA file {cafile}") from None
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"CA file {cafile} is not usable (not PEM?): {e}") from None


def server_context(certfile: str, keyfile: str | None = None, *, password: str | None = None,
                   cafile: str | None = None, client_auth: str = "none") -> ssl.SSLContext:
    """A server context presenting ``certfile`` (PEM chain; the key in it or in ``keyfile``).

    ``cafile`` holds the CAs that sign client certificates (needed unless
    ``client_auth`` is ``none``).

    Raises:
        TlsConfigError: a file is missing or unusable, or client_auth is unknown.
    """
    if client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth: {client_auth!r} is not one of "
                             f"{', '.join(CLIENT_AUTH)}")
    if client_auth != "none" and not cafile:
        raise TlsConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location "
                             "(the CA that signs client certificates)")
    ctx = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    _load_chain(ctx, certfile, keyfile, password)
    if cafile:
        _load_ca(ctx, cafile)
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[client_auth]
    return ctx


def client_context(cafile: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, *, password: str | None = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A client context verifying the server against ``cafile`` (or the system's CAs),
    and its host name unless ``check_hostname`` is False; ``certfile`` for mTLS.

    Raises:
        TlsConfigError: a file is missing or unusable.
    """
    ctx = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    ctx.check_hostname = bool(check_hostname)
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_ca(ctx, cafile)
    if certfile:
        _load_chain(ctx, certfile, keyfile, password)
    return ctx


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == "#" and i == 0) or (c == " " and i in (0, len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def distinguished_name(subject) -> str:
    """RFC 2253 string of a getpeercert() subject (a tuple of RDNs, most significant first)."""
    rdns = []
    for rdn in reversed(subject or ()):
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(str(v))}" for k, v in rdn))
    return ",".join(rdns)


def principal_from_cert(peercert: dict | None) -> str | None:
    """``User:<subject DN>`` of a verified peer certificate, or None without one."""
    if not peercert or not peercert.get("subject"):
        return None
    return "User:" + distinguished_name(peercert["subject"])


def describe_handshake_error(e: BaseException, host: str = "") -> str:
    """One line for people: why a TLS handshake failed."""
    if isinstance(e, ssl.SSLCertVerificationError):
        msg = e.verify_message or str(e)
        if "expired" in msg:
            return f"TLS: the certificate of {host or 'the peer'} has expired ({msg})"
        if "Hostname mismatch" in msg or "IP address mismatch" in msg:
            return (f"TLS: the certificate of {host or 'the peer'} is not valid for that name "
                    f"({msg}); connect by a name in it or set ssl_check_hostname=False")
        return f"TLS: cannot verify the certificate of {host or 'the peer'}: {msg}"
    if isinstance(e, ssl.SSLError):
        return f"TLS handshake with {host or 'the peer'} failed: {e.reason or e}"
    return f"TLS handshake with {host or 'the peer'} failed: {e!r}"
