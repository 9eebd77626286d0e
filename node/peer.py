"""Connections from this node to another (replica fetchers, heartbeats) over the
inter-broker listener's protocol: TLS with this node's certificate when it is SSL or
SASL_SSL, then SASL as ``inter.broker.sasl.username`` when it is SASL_*.

The socket returned is what sockio drives: a plain non-blocking socket or a
non-blocking ``ssl.SSLSocket``, connected and authenticated.
"""

from __future__ import annotations

import trio

from raftlog import scram
from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.protocol import Api, ClientConnection
from raftlog.tls import client_context

from . import sockio
from .config import NodeConfig

RECV_BYTES = 64 * 1024


class PeerSecurity:
    """How this node connects to its peers (built once from the config)."""

    def __init__(self, config: NodeConfig):
        self.config = config
        self.protocol = config.listener_config.inter_broker_protocol
        self._ctx = None
        if self.protocol.tls:
            self._ctx = client_context(
                config.ssl_truststore_location, config.ssl_keystore_location,
                config.ssl_key_location, password=config.ssl_key_password,
                check_hostname=config.ssl_endpoint_identification_algorithm == "https")

    async def connect(self, host: str, port: int):
        """A connected, authenticated socket (no timeout of its own: wrap in fail_after).

        Raises:
            OSError, ssl.SSLError: the connection or the TLS handshake failed.
            ApiError: SASL authentication failed.
        """
        sock = await sockio.connect(host, port)
        try:
            if self._ctx is not None:
                sock = self._ctx.wrap_socket(sock, server_hostname=host,
                                             do_handshake_on_connect=False)
                await sockio.tls_handshake(sock)
            if self.protocol.sasl:
                await self._authenticate(sock)
            return sock
        except BaseException:
            sockio.close(sock)
            raise

    async def _authenticate(self, sock) -> None:
        c = self.config
        mech = c.sasl_mechanism_inter_broker_protocol
        proto = ClientConnection(max_in_flight=1)
        buf = bytearray(RECV_BYTES)

        async def call(api: Api, fields: dict) -> dict:
            _, data = proto.send_request(api, fields)
            await sockio.send_all(sock, data)
            while (frame := proto.next_response()) is None:
                chunk, _ = await sockio.recv_into(sock, buf)
                if not chunk:
                    raise OSError(f"{api.name}: the peer closed the connection")
                proto.receive_data(bytes(chunk))
            if frame.header.get("error"):
                raise ApiError(ErrorCode(frame.header["error"]), frame.header.get("message", ""))
            return frame.header

        await call(Api.SASL_HANDSHAKE, {"mechanism": mech})
        user, password = c.inter_broker_sasl_username, c.inter_broker_sasl_password
        if mech == scram.PLAIN:
            await call(Api.SASL_AUTHENTICATE, {"auth": scram.encode_plain(user, password)})
            return
        client = scram.ScramClient(mech, user, password)
        first = await call(Api.SASL_AUTHENTICATE, {"auth": client.first()})
        try:
            final = await call(Api.SASL_AUTHENTICATE, {"auth": client.final(first["auth"])})
            client.verify(final["auth"])
        except scram.ScramError as e:
            raise RemoteProtocolError(f"SASL with the peer failed: {e}") from None


def peer_security(config: NodeConfig) -> PeerSecurity | None:
    """How this node reaches its peers (fetchers, heartbeats): None for plain
    connections -- a node alone connects to no peer, and a PLAINTEXT inter-broker
    listener needs neither TLS nor SASL."""
    if (config.controller_quorum_voters
            and config.listener_config.inter_broker_protocol.value != "PLAINTEXT"):
        return PeerSecurity(config)
    return None


def peer_address(listeners, name: str) -> tuple[str, int]:
    """Where to reach a peer: its registered listener named like our inter-broker
    listener (so a rolling change of protocols finds the one both sides speak), else
    its first listener. ``listeners``: RegisterBroker's ((host, port[, name]), ...)."""
    for x in listeners:
        if len(x) > 2 and x[2] == name:
            return x[0], x[1]
    return tuple(listeners[0][:2])


async def open_peer(security: PeerSecurity | None, host: str, port: int, timeout_s: float):
    """``security.connect`` under a timeout, or a plain connection without security."""
    with trio.fail_after(timeout_s):
        if security is None:
            return await sockio.connect(host, port)
        return await security.connect(host, port)
