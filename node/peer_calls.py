"""Request/response calls from this node to another one (the transaction coordinator's
WriteTxnMarkers to partition leaders, a leader's KIP-890 verification at the
coordinator): one connection per peer node, one request at a time on it, opened by
:class:`~raftlog.node.peer.PeerSecurity` (the inter-broker listener's protocol).

A failed call closes its connection (the next call opens a new one) and raises
``ApiError``: the caller decides whether and when to retry (its retries are bounded).
"""

from __future__ import annotations

import trio

from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.protocol import Api, ClientConnection

from . import sockio

RECV_BYTES = 64 * 1024


class _Peer:
    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.sock = None
        self.proto: ClientConnection | None = None

    def close(self) -> None:
        if self.sock is not None:
            sockio.close(self.sock)
        self.sock = self.proto = None


class PeerCalls:
    """Calls to peer nodes by id (trio thread)."""

    def __init__(self, security, store, node_id: int):
        self.security = security
        self.store = store
        self.node_id = node_id
        self._peers: dict[int, _Peer] = {}
        self._buf = bytearray(RECV_BYTES)

    def _address(self, node_id: int) -> tuple[str, int]:
        for b in self.store.brokers():
            if b.node_id == node_id and not b.fenced:
                return b.host, b.port
        raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {node_id} is not a live broker")

    async def call(self, node_id: int, api: Api, fields: dict, timeout_s: float) -> dict:
        """The response header of ``api`` from ``node_id``.

        Raises:
            ApiError: the whole request's error, or network failure or
                REQUEST_TIMED_OUT when the peer could not be reached in time.
        """
        peer = self._peers.setdefault(node_id, _Peer())
        async with peer.lock:
            try:
                with trio.fail_after(timeout_s):
                    if peer.sock is None:
                        host, port = self._address(node_id)
                        peer.sock = await self.security.connect(host, port)
                        peer.proto = ClientConnection(max_in_flight=1)
                    _, data = peer.proto.send_request(api, fields)
                    await sockio.send_all(peer.sock, data)
                    while (frame := peer.proto.next_response()) is None:
                        chunk, _ = await sockio.recv_into(peer.sock, self._buf)
                        if not chunk:
                            raise OSError(f"node {node_id} closed the connection")
                        peer.proto.receive_data(bytes(chunk))
            except trio.TooSlowError:
                peer.close()
                raise ApiError(ErrorCode.REQUEST_TIMED_OUT,
                               f"node {node_id} did not answer {api.name} in "
                               f"{timeout_s:g}s") from None
            except (OSError, RemoteProtocolError) as e:
                peer.close()
                raise ApiError(ErrorCode.REQUEST_TIMED_OUT,
                               f"{api.name} to node {node_id}: {e}") from None
            except BaseException:
                peer.close()
                raise
        h = frame.header
        if h.get("error"):
            raise ApiError(ErrorCode(h["error"]), h.get("message", ""))
        return h

    def close(self) -> None:
        for p in self._peers.values():
            p.close()
        self._peers.clear()
