"""Broker heartbeats and the active controller's fencing duty (a single node is its own
controller: it records its heartbeats without a connection).

Every node sends BrokerHeartbeat to the controller (the Raft leader) every
``broker.heartbeat.interval.ms``. The controller keeps the times in memory
(:class:`raftlog.metadata.controller.BrokerLiveness`, re-created with a grace period
whenever this node becomes controller), fences brokers silent for
``broker.session.timeout.ms`` and unfences fenced brokers that heartbeat again.
Decisions are proposed with ``require_leader``; the state machine checks them again.
"""

from __future__ import annotations

import time

import trio

from raftlog.errors import ApiError, ErrorCode, RemoteProtocolError
from raftlog.metadata import records as R
from raftlog.metadata.controller import (
    BrokerLiveness,
    preferred_leader_changes,
    reassignment_completions,
)
from raftlog.metadata.errors import QuorumError
from raftlog.protocol import Api, ClientConnection

from . import sockio
from .clock import node_ms
from .peer import open_peer, peer_address

#: Bound on one heartbeat round trip.
HEARTBEAT_TIMEOUT_S = 2.0
CONTROLLER_TICK_S = 0.2
#: A crash probe's connect gives up after this long (then the session decides).
PROBE_TIMEOUT_S = 0.5
#: Brokers probed in one tick of the controller's duty (the rest on the next).
PROBES_PER_TICK_MAX = 8
#: Reassignments are checked for completion after every metadata change, and this
#: often anyway (a completion whose proposal failed is retried).
REASSIGN_RECHECK_MS = 2000
#: A node that knows no metadata leader this long logs its quorum view (and again this
#: often while it lasts): a voter cut off from the quorum is diagnosable from its log.
LEADER_UNKNOWN_WARN_S = 5.0


class Heartbeats:
    def __init__(self, config, store, events, peer_security=None):
        self.config = config
        self.store = store
        self.events = events
        #: how heartbeats reach the controller (node/peer.py; None: plain)
        self.peer_security = peer_security
        self.liveness: BrokerLiveness | None = None
        self._stream = None  # a plain or TLS socket to the controller (node/peer.py)
        self._stream_target = None
        self._buf = bytearray(65536)
        self._last_balance_ms = node_ms()
        self._reassign_checked = (None, 0)  # (state, node ms) last looked at for completions
        #: set when a heartbeat connection closes: the duty looks at once, not at its tick
        self._wake = trio.Event()
        #: (metadata leader last seen, since when, last warned) for _watch_leader
        self._leader_seen: tuple = (object(), 0.0, 0.0)

    # ------------------------------------------------------------------ controller side

    def record(self, broker_id: int, incarnation_id: str) -> bool:
        """A heartbeat arrived (trio thread). False if this node is not the controller."""
        if not self.store.quorum.is_leader:
            return False
        if self.liveness is None:
            return True  # becoming controller: the duty loop starts the clocks
        broker = self.store.quorum.state.brokers.get(broker_id)
        if broker is not None and broker.incarnation_id == incarnation_id:
            self.liveness.heartbeat(broker_id, node_ms())
        return True

    def disconnected(self, broker_id: int) -> None:
        """A connection that carried ``broker_id``'s heartbeats closed (trio thread)."""
        if self.liveness is not None and broker_id != self.config.node_id:
            self.liveness.disconnected(broker_id, node_ms())
            self._wake.set()

    async def _tick(self) -> None:
        """Sleep CONTROLLER_TICK_S, or less: until a disconnection's grace is over."""
        grace_s = self.config.broker_disconnect_grace_ms / 1000
        with trio.move_on_after(CONTROLLER_TICK_S):
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(min(grace_s, CONTROLLER_TICK_S))

    async def controller_duty(self) -> None:
        while True:
            await self._tick()
            if not self.store.quorum.is_leader:
                self.liveness = None
                continue
            state = self.store.quorum.state
            now = node_ms()
            if self.liveness is None:
                self.liveness = BrokerLiveness.on_become_controller(
                    state, now, self.config.broker_session_timeout_ms,
                    self.config.broker_disconnect_grace_ms, self._old_controller_seen(now))
                # the old controller may have died with its node: every broker that
                # does not heartbeat us within the grace is probed once (a live one
                # accepts, so only a crashed one is fenced before its session ends)
                for b in state.brokers:
                    if b != self.config.node_id:
                        self.liveness.disconnected(b, now)
                self.events.info("became_controller", term=self.store.quorum.term)
            self.liveness.heartbeat(self.config.node_id, now)
            await self._probe_disconnected(state, now)
            for record in self._decisions(state, now):
                await self._propose(record)
            state = self.store.quorum.state
            seen, at = self._reassign_checked
            if state is not seen or now - at >= REASSIGN_RECHECK_MS:  # after a change
                self._reassign_checked = (state, now)
                for record in reassignment_completions(state, self.store.quorum.term):
                    await self._propose(record)
            if (self.config.auto_leader_rebalance_enable
                    and now - self._last_balance_ms >= self.config.leader_imbalance_check_interval_ms):
                self._last_balance_ms = now
                for record in preferred_leader_changes(self.store.quorum.state, self.store.quorum.term):
                    await self._propose(record)

    def _old_controller_seen(self, now: int) -> dict:
        """{old controller: node ms of its last AppendEntries here}: its session runs
        from there (a paused controller is fenced one session after it stopped, not
        one session after this election)."""
        old, at = self.store.quorum.leader_contact()
        if old is None or at is None or old == self.config.node_id:
            return {}
        return {old: now - max(0, int((time.monotonic() - at) * 1000))}

    async def _probe_disconnected(self, state, now: int) -> None:
        """Try the listener of each broker disconnected past its grace: refused means
        nothing listens there (crashed); accepted or timed out, its session decides."""
        for b in self.liveness.to_probe(now)[:PROBES_PER_TICK_MAX]:
            broker = state.brokers.get(b)
            if broker is None or broker.fenced or not broker.listeners:
                self.liveness.probe_answered(b)
                continue
            host, port = peer_address(broker.listeners, self.config.listener_config.inter_broker)
            try:
                with trio.fail_after(PROBE_TIMEOUT_S):
                    sockio.close(await sockio.connect(host, port))
                self.liveness.probe_answered(b)
                self.events.info("broker_disconnect_not_crash", broker=b, address=f"{host}:{port}",
                                 reason="no heartbeat within the grace (its connection "
                                        "closed, or this controller just started) but its "
                                        "listener accepts connections: left to its session")
            except ConnectionRefusedError:
                self.liveness.probe_refused(b)
                self.events.warning("broker_crash_seen", broker=b, address=f"{host}:{port}",
                                    reason="heartbeat connection closed and its listener "
                                           "refuses connections")
            except (OSError, trio.TooSlowError):
                self.liveness.probe_answered(b)  # (unreachable is not dead: the session)

    def _decisions(self, state, now: int) -> list:
        # A broker that registered but never heartbeat (it died at once) must still
        # expire: its session clock starts when the controller first sees it.
        for broker_id in state.brokers:
            self.liveness.last_heartbeat_ms.setdefault(broker_id, now)
        out = self.liveness.fence_decisions(state, now)
        for b in state.brokers.values():
            last = self.liveness.last_heartbeat_ms.get(b.broker_id)
            if b.broker_id in self.liveness.refused:
                continue  # crashed: its last heartbeat is from before; only a new one counts
            if b.fenced and last is not None and now - last <= self.config.broker_heartbeat_interval_ms * 3:
                out.append(R.UnfenceBroker(b.broker_id, b.incarnation_id))
        return out

    async def _propose(self, record) -> None:
        try:
            result = await trio.to_thread.run_sync(
                lambda: self.store.quorum.propose(record, 2.0, require_leader=True),
                abandon_on_cancel=True)
        except QuorumError as e:
            self.events.warning("controller_decision_failed", record=type(record).__name__, error=e)
            return
        if result.ok:
            self.events.info("controller_decision", record=type(record).__name__,
                             broker=getattr(record, "broker_id", ""),
                             partition=f"{getattr(record, 'topic', '')}-{getattr(record, 'partition', '')}",
                             leader=getattr(record, "leader", ""))

    # ------------------------------------------------------------------ broker side

    async def send_loop(self) -> None:
        interval = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            controller = self.store.quorum.leader_id
            self._watch_leader(controller)
            if controller is None:
                continue
            if controller == self.config.node_id:
                self.record(self.config.node_id, self.store.incarnation_id)
                continue
            broker = self.store.quorum.state.brokers.get(controller)
            if broker is None or not broker.listeners:
                continue
            try:
                with trio.fail_after(HEARTBEAT_TIMEOUT_S):
                    await self._heartbeat(peer_address(
                        broker.listeners, self.config.listener_config.inter_broker))
            except (OSError, trio.TooSlowError, RemoteProtocolError, ApiError, trio.BrokenResourceError):
                await self._drop_stream()

    def _watch_leader(self, leader) -> None:
        """Log the metadata leader this node follows when it changes, and a warning with
        this voter's view of the quorum while it knows none (see LEADER_UNKNOWN_WARN_S)."""
        now = trio.current_time()
        seen = self._leader_seen
        if leader != seen[0]:
            self.events.info("metadata_leader", leader=-1 if leader is None else leader,
                             term=self.store.quorum.term)
            seen = (leader, now, now)
        elif leader is None and now - seen[2] >= LEADER_UNKNOWN_WARN_S:
            self.events.warning("metadata_leader_unknown", seconds=round(now - seen[1], 1),
                                quorum=self.store.quorum.describe())
            seen = (leader, seen[1], now)
        self._leader_seen = seen

    async def _heartbeat(self, target: tuple) -> None:
        if self._stream is None or self._stream_target != target:
            await self._drop_stream()
            self._stream = await open_peer(self.peer_security, *target,
                                           HEARTBEAT_TIMEOUT_S)
            self._stream_target = target
            self._proto = ClientConnection(max_in_flight=1)
        _, data = self._proto.send_request(
            Api.BROKER_HEARTBEAT,
            {"broker_id": self.config.node_id, "incarnation_id": self.store.incarnation_id})
        await sockio.send_all(self._stream, data)
        while (frame := self._proto.next_response()) is None:
            chunk, _ = await sockio.recv_into(self._stream, self._buf)
            if not chunk:
                raise OSError("controller closed the connection")
            self._proto.receive_data(bytes(chunk))
        if frame.header.get("error"):
            raise ApiError(ErrorCode(frame.header["error"]), frame.header.get("message", ""))

    async def _drop_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            sockio.close(stream)  # (a plain or TLS socket: see node/peer.py)
            await trio.lowlevel.checkpoint()
