"""Follower replication: one fetcher task per leader broker (idle on a single node).

Every partition this node follows is assigned to the fetcher of its current leader.
Before fetching a partition in a new leader epoch, the fetcher truncates any
divergent tail (KIP-101/279): it asks the leader for the end offset of the largest
epoch <= its own latest epoch (OffsetsForLeaderEpoch) and cuts its log there. Then it
long-polls Fetch with ``replica_id`` = this node and its log end offset, appends what
arrives with :meth:`PartitionLog.append_as_follower` (offsets and epochs kept, CRC
checked), and takes the high watermark from the response.

Fetches go through a fetch session on the leader (node/fetch_session.py): the first
fetch of a connection names every partition, later ones only those whose offset,
epoch or byte limit changed (and ``forgotten`` those no longer fetched here), and the
leader answers only partitions with news -- so a round costs what moved, not the
number of partitions followed.

Bounded: one request in flight per leader, ``FETCH_MAX_BYTES`` per response,
``PARTITION_MAX_BYTES`` per partition; failures back off (``BACKOFF_S``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import trio

from raftlog.errors import (
    ApiError,
    CorruptRecordError,
    ErrorCode,
    RemoteProtocolError,
    StorageError,
)
from raftlog.protocol import (
    FETCH_SESSION_FULL,
    FETCH_SESSION_INCREMENTAL,
    Api,
    ClientConnection,
)

from . import sockio
from .peer import open_peer, peer_address

#: How long a follower's fetch may park on its leader when nothing is new: half of
#: replica.lag.time.max.ms (the leader counts a parked, caught-up follower as caught
#: up when its fetch arrived), within these bounds. Long waits keep an idle cluster
#: idle (one round trip per leader per wait, whatever the partition count); a change
#: of the partitions followed interrupts the wait (see LeaderFetcher.assign).
FETCH_MAX_WAIT_MS_MIN = 500
FETCH_MAX_WAIT_MS_MAX = 5000
#: Fetch through a session on the leader (only what changed per fetch); False: every
#: fetch names every partition, as a plain fetch.
FETCH_SESSIONS = True
#: How soon a parked fetch is resent after partitions to follow were added.
INTERRUPT_DELAY_S = 0.2
FETCH_MAX_BYTES = 16 * 1024 * 1024
PARTITION_MAX_BYTES = 4 * 1024 * 1024
REQUEST_TIMEOUT_S = 10.0
BACKOFF_S = 0.2
#: A follower whose disk refused an append tries again this much later.
STORAGE_RETRY_S = 1.0
#: How long a follower waits for the syncs (group commit) of what a round appended to
#: durable topics before its next fetch, which reports them (#34). A sync slower than
#: this is reported by a later round (whose long poll is then short: UNSYNCED_WAIT_MS).
SYNC_WAIT_S = REQUEST_TIMEOUT_S
UNSYNCED_WAIT_MS = 100
#: A follower whose reassignment budget is spent waits this long before asking again.
THROTTLE_WAIT_S = 0.1
#: ... and at least this long (ms) when it asks the leader to hold its fetch meanwhile.
THROTTLE_MIN_WAIT_MS = 2
#: One socket read (a larger request would allocate that much per read)
RECV_BYTES = 256 * 1024
#: Errors that mean "this node's metadata is behind or ahead of the leader's": wait.
_WAIT_FOR_METADATA = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
}


@dataclass(eq=False)
class FollowState:
    """One followed partition as one fetcher sees it."""

    leader_id: int
    leader_epoch: int
    truncated: bool = False
    retry_at: float = 0.0


class FetcherManager:
    """Keeps one :class:`LeaderFetcher` per leader that this node follows a partition of."""

    def __init__(self, replicas, events, nursery, peer_security=None):
        #: the node's ReplicaManager (node/replica_manager.py): the partitions followed
        self.replicas = replicas
        self.events = events
        self.nursery = nursery
        #: how fetchers reach leaders (node/peer.py; None: plain connections)
        self.peer_security = peer_security
        self.fetchers: dict[int, LeaderFetcher] = {}
        self.follows: dict[tuple, FollowState] = {}
        #: follows grouped by leader (kept in step with follows)
        self._by_leader: dict[int, dict[tuple, FollowState]] = {}

    def update(self, wanted: dict, only=None) -> None:
        """``wanted``: {(topic, partition): (leader_id, leader_epoch)} of every partition
        to follow; with ``only`` (keys), just of those keys -- partitions outside them
        keep what they follow. Only the fetchers of leaders concerned are re-assigned.
        Trio thread."""
        drop = [k for k in (self.follows if only is None else only)
                if k not in wanted and k in self.follows]
        added: dict[int, dict] = {}  # leader -> {key: FollowState} it starts to serve here
        removed: dict[int, list] = {}  # leader -> keys it no longer serves here
        for key in drop:
            st = self.follows.pop(key)
            self._by_leader[st.leader_id].pop(key, None)
            removed.setdefault(st.leader_id, []).append(key)
        for key, (leader, epoch) in wanted.items():
            st = self.follows.get(key)
            if st is not None and (st.leader_id, st.leader_epoch) == (leader, epoch):
                continue
            if st is not None:
                self._by_leader[st.leader_id].pop(key, None)
                if st.leader_id != leader:
                    removed.setdefault(st.leader_id, []).append(key)
            st = self.follows[key] = FollowState(leader, epoch)  # truncate again first
            self._by_leader.setdefault(leader, {})[key] = st
            added.setdefault(leader, {})[key] = st
        for leader in set(added) | set(removed):
            if not self._by_leader.get(leader):
                self._by_leader.pop(leader, None)
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                if leader not in added:
                    continue
                fetcher = LeaderFetcher(self.replicas, leader, self.events, self.peer_security)
                self.fetchers[leader] = fetcher
                fetcher.assign(added[leader], ())
                self.nursery.start_soon(fetcher.run)
                continue
            fetcher.assign(added.get(leader, {}), removed.get(leader, ()))
            if not fetcher.partitions:
                fetcher.cancel()
                del self.fetchers[leader]

    def refetch(self, key) -> bool:
        """Truncate ``key`` again before its next fetch (to ``Partition.corrupt_from``
        when set: the scrubber found bad data there) and fetch from there. False if
        this node does not follow ``key`` now."""
        st = self.follows.get(key)
        if st is None:
            return False
        st.truncated, st.retry_at = False, 0.0
        fetcher = self.fetchers.get(st.leader_id)
        if fetcher is not None:
            fetcher.wake([key])
        return True

    def lag(self) -> dict:
        return {k: (st.leader_id, st.truncated) for k, st in self.follows.items()}


class LeaderFetcher:
    def __init__(self, replicas, leader_id: int, events, peer_security=None):
        self.replicas = replicas
        self.peer_security = peer_security
        self.leader_id = leader_id
        self.events = events
        self.partitions: dict[tuple, FollowState] = {}
        self.scope = trio.CancelScope()
        self._sock = None  # a plain non-blocking socket (see sockio)
        self._buf = bytearray(RECV_BYTES)
        self._proto: ClientConnection | None = None
        self._changed = trio.Event()
        self.max_wait_ms = max(FETCH_MAX_WAIT_MS_MIN, min(
            FETCH_MAX_WAIT_MS_MAX, replicas.config.replica_lag_time_max_ms // 2))
        #: the cancel scope of the FETCH in flight (None between fetches)
        self._fetch_scope: trio.CancelScope | None = None
        self._interrupted = False
        #: ids of nudges sent whose answers have not come yet (see _call)
        self._nudges: set[int] = set()
        #: what the leader's fetch session on this connection holds:
        #: {key: (fetch offset, max bytes, leader epoch)}; None before the full fetch
        self._told: dict[tuple, tuple] | None = None
        #: partitions to look at in the next round (what may have changed)
        self._pending: set[tuple] = set()
        #: the flushed offset last told to the leader per partition (its session's)
        self._told_flushed: dict[tuple, int] = {}
        #: durable partitions appended whose sync had not returned by the next fetch:
        #: {key: log end to report once flushed}
        self._unsynced: dict[tuple, int] = {}

    def assign(self, added: dict, removed=()) -> None:
        """Start following ``added`` ({key: FollowState}, new or in a new epoch) from this
        leader and stop following ``removed`` (keys): work proportional to the change."""
        gone = [k for k in removed if self.partitions.pop(k, None) is not None]
        self._pending.update(gone)
        self.partitions.update(added)
        if added:
            # a parked fetch lacks partitions to start (or truncate): ask the leader to
            # answer it soon. Changes within INTERRUPT_DELAY_S share one nudge (a burst
            # of topic creations costs a few rounds, not one per topic); a partition
            # only dropped waits for the fetch to end.
            self.wake(list(added))
        elif gone:
            self._changed.set()

    def wake(self, keys=()) -> None:
        """Partitions ``keys`` need attention (start, truncate): end a parked fetch
        within INTERRUPT_DELAY_S and run a round that looks at them."""
        self._pending.update(keys)
        self._changed.set()
        if self._fetch_scope is not None:
            self._interrupted = True
            self._fetch_scope.deadline = min(self._fetch_scope.deadline,
                                             trio.current_time() + INTERRUPT_DELAY_S)

    def cancel(self) -> None:
        self.scope.cancel()

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        self.events.info("replica_fetcher_started", leader=self.leader_id,
                         partitions=len(self.partitions))
        with self.scope:
            try:
                while self.partitions:
                    try:
                        await self._round()
                    except (OSError, trio.TooSlowError, RemoteProtocolError, ApiError) as e:
                        self.events.warning("replica_fetch_failed", leader=self.leader_id,
                                            error=repr(e))
                        await self._close()
                        await trio.sleep(BACKOFF_S)
                    except Exception as e:  # a bug of ours: log it, never take the node down
                        self.events.error("replica_fetcher_error", leader=self.leader_id,
                                          error=repr(e))
                        await self._close()
                        await trio.sleep(1.0)
            finally:
                await self._close()

    async def _round(self) -> None:
        now = trio.current_time()
        told = self._told
        # Only what may have changed is looked at: everything on a new connection (a
        # full fetch), else the partitions marked since the last round.
        if not FETCH_SESSIONS:
            told = None  # every round names every partition, as a plain fetch
        if self._unsynced:  # syncs that returned since: their flushed offset is news
            for k, end in list(self._unsynced.items()):
                part = self.replicas.partitions.get(k)
                if part is None or part.log.flushed_offset >= end:
                    del self._unsynced[k]
                    self._pending.add(k)
        keys = list(self.partitions) if told is None else list(self._pending)
        self._pending = set()
        ready, later, retry_at = {}, [], math.inf
        for k in keys:
            st = self.partitions.get(k)
            if st is None:
                continue  # no longer followed here: forgotten below
            if st.retry_at > now or k not in self.replicas.partitions:
                later.append(k)
                retry_at = min(retry_at, st.retry_at)
            else:
                ready[k] = st
        if not ready and not told:
            self._pending.update(later)
            self._changed = trio.Event()
            with trio.move_on_after(BACKOFF_S):
                await self._changed.wait()
            return
        await self._connect()
        todo = [k for k, st in ready.items() if not st.truncated]
        if todo:
            await self._truncate(todo, ready)
        want, throttled, spent = {}, set(), 0
        me, budget, reserved = self.replicas.config.node_id, None, 0
        for key, st in ready.items():
            part = self.replicas.partitions.get(key)
            if st.truncated and part is not None and not part.is_leader:
                limit = PARTITION_MAX_BYTES
                th = part.throttled
                if th is not None and me in th[0]:  # a replica a reassignment adds here
                    throttled.add(key)
                    if budget is None:  # (one budget per node: Kafka's follower throttle)
                        budget = self.replicas.reassign_in_rate.allowance(th[1], time.monotonic())
                    if budget <= 0:
                        spent = th[1]
                        continue
                    limit = min(limit, budget)
                    budget -= limit  # (the round's partitions share it: one burst in all)
                    reserved += limit
                want[key] = (part.log.log_end_offset, limit, st.leader_epoch)
            else:
                later.append(key)  # a failed truncation (retry_at) or a role in flux
                retry_at = min(retry_at, max(st.retry_at, now + BACKOFF_S))
        self._pending.update(later)
        self._pending.update(throttled)  # their byte limit changes round to round
        if reserved:
            # spent up front, so the fetchers to other leaders see what is left (each
            # used to see the whole burst: three leaders sent three bursts at once, and
            # the copy went in bursts of tens of MB that stalled the nodes' other
            # traffic); settled below with what came. A round lost on the way keeps its
            # reservation: the bucket refills at the rate (BURST_S worth at most).
            self.replicas.reassign_in_rate.spend(reserved)
        if not want and not told:
            if spent:  # until the budget allows a useful step again
                await trio.sleep(min(THROTTLE_WAIT_S,
                                     self.replicas.reassign_in_rate.wait_s(spent)))
            return
        if told is None:
            mode, forgotten = (FETCH_SESSION_FULL if FETCH_SESSIONS else 0), []
            upserts = list(want.items())
            told = {}
            self._told_flushed = {}
        else:
            mode = FETCH_SESSION_INCREMENTAL
            forgotten = [k for k in keys if k in told and k not in want]
            upserts = [(k, v) for k, v in want.items() if told.get(k) != v]
            for k in forgotten:
                del told[k]
        for k, v in upserts:
            told[k] = v
        self._told = told  # (the leader applies the request even if its answer is lost)
        # what is on disk here: of every partition named, and of any other whose
        # flushed offset moved since told (the leader's HW of a durable topic waits
        # for it)
        named = {k for k, _ in upserts}
        flushed = []
        for k in want:
            part = self.replicas.partitions.get(k)
            if part is None:
                continue
            f = part.log.flushed_offset
            if k in named or self._told_flushed.get(k) != f:
                flushed.append([k[0], k[1], f])
                self._told_flushed[k] = f
        for k in forgotten:
            self._told_flushed.pop(k, None)
        # a partition left out (its retry time, its throttle budget) is looked at again
        # in time: the long poll waits no longer than that
        wait_ms = self.max_wait_ms
        if spent:  # back as soon as the budget allows a step again (not a whole long poll)
            wait_ms = min(wait_ms, max(THROTTLE_MIN_WAIT_MS, int(
                min(THROTTLE_WAIT_S, self.replicas.reassign_in_rate.wait_s(spent)) * 1000)))
        if retry_at < math.inf:
            wait_ms = min(wait_ms, max(int((retry_at - now) * 1000), 10))
        if self._unsynced:  # back soon to report them
            wait_ms = min(wait_ms, UNSYNCED_WAIT_MS)
        header, body = await self._call(Api.FETCH, {
            "replica_id": self.replicas.config.node_id, "max_wait_ms": wait_ms,
            "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES, "session": mode,
            "parts": [[k[0], k[1], *v] for k, v in upserts],
            "forgotten": [list(k) for k in forgotten], "flushed": flushed},
            timeout_s=REQUEST_TIMEOUT_S + wait_ms / 1000, interruptible=True)
        pos = used = 0
        syncing = []  # (key, partition, log end) of durable partitions appended
        for topic, partition, err, hw, log_start, n, msg, *_ in header["parts"]:
            data = body[pos:pos + n]
            pos += n
            key = (topic, partition)
            sent = told.get(key)
            if err:
                told.pop(key, None)  # the leader dropped it from the session
                self._pending.add(key)  # named again once it may be retried
            st = self.partitions.get(key)
            if st is None or sent is None:
                continue  # no longer followed here
            part = self.replicas.partitions.get(key)
            if err:
                if part is not None and not part.is_leader:
                    self._on_error(key, st, part, ErrorCode(err), msg, sent[0], log_start)
                continue
            if part is None or part.is_leader or sent[2] != st.leader_epoch or not st.truncated:
                # re-assigned (a new epoch, a new role) while in flight: what the leader
                # sent is not applied, so it must be named again (the leader thinks
                # this answer moved it on)
                told.pop(key, None)
                self._pending.add(key)
                continue
            if key in throttled:
                used += n
            if not n and hw > sent[0]:
                # committed data past our offset and none sent (held back by a throttle,
                # or a session out of step): name the partition again, so the leader
                # looks at it again
                told.pop(key, None)
                self._pending.add(key)
            if n:
                self._pending.add(key)  # its fetch offset moves
                try:
                    part.append_as_follower(data)
                except CorruptRecordError as e:
                    # overlap (a stale view of our end) or bad bytes: re-check the epochs
                    self.events.warning("replica_append_rejected", partition=part, error=str(e))
                    st.truncated = False
                    st.retry_at = trio.current_time() + BACKOFF_S
                    continue
                except StorageError:
                    # logged once per incident by the data dir's health (node/disk.py);
                    # this replica stops advancing, so its leader drops it from the ISR
                    # after replica.lag.time.max.ms, and it catches up once space returns
                    st.retry_at = trio.current_time() + STORAGE_RETRY_S
                    continue
                try:
                    part.log.maybe_flush()
                except StorageError as e:  # appended, not yet durable: flushed later
                    self.replicas.logs.disk.write_failed(e, part, op="flush")
                if part.durable:
                    syncing.append((key, part, part.log.log_end_offset))
            if hw >= 0:
                part.set_follower_high_watermark(hw)
            if log_start > part.log.log_start_offset:
                # the leader's DeleteRecords (or retention): the follower's log start
                # follows, up to its own high watermark (durable: the checkpoint)
                try:
                    part.log.delete_records_before(log_start)
                except StorageError as e:
                    self.replicas.logs.disk.write_failed(e, part, op="delete_records")
        if reserved:
            self.replicas.reassign_in_rate.settle(reserved, used)
        if syncing:
            await self._await_syncs(syncing)

    async def _await_syncs(self, syncing: list) -> None:
        """Wait (SYNC_WAIT_S at most) for the group commits of what this round appended
        to durable topics, so the next fetch reports them on disk: their syncs run in
        parallel (each started at its append), and with the leader's own."""
        with trio.move_on_after(SYNC_WAIT_S):
            for _key, part, end in syncing:
                if not await part.wait_flushed(end):
                    break  # a failed sync: reported by the data dir's health
        for key, part, end in syncing:
            if part.log.flushed_offset < end:
                self._unsynced[key] = end

    def _on_error(self, key, st: FollowState, part, err: ErrorCode, msg: str,
                  fetch_offset: int, leader_log_start: int) -> None:
        if err == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= leader_log_start and fetch_offset < leader_log_start:
                self.events.warning("replica_reset", partition=part, start=leader_log_start)
                part.truncate_fully_and_start_at(leader_log_start)
            else:
                st.truncated = False  # ahead of the leader: truncate by epoch again
        elif err not in _WAIT_FOR_METADATA:
            self.events.warning("replica_fetch_error", partition=part, error=err.name, message=msg)
        st.retry_at = trio.current_time() + BACKOFF_S

    async def _truncate(self, keys: list, ready: dict) -> None:
        """OffsetsForLeaderEpoch for ``keys``, then cut each log at the divergence."""
        asks = []
        for key in keys:
            part = self.replicas.partitions.get(key)
            if part is not None:
                asks.append([key[0], key[1], part.log.latest_epoch])
        if not asks:
            return
        header, _ = await self._call(Api.OFFSETS_FOR_LEADER_EPOCH, {
            "replica_id": self.replicas.config.node_id, "parts": asks}, timeout_s=REQUEST_TIMEOUT_S)
        for topic, partition, err, epoch, end in header["parts"]:
            key = (topic, partition)
            st, part = ready.get(key), self.replicas.partitions.get(key)
            if st is None or self.partitions.get(key) is not st or part is None or part.is_leader:
                continue
            if err:
                if ErrorCode(err) not in _WAIT_FOR_METADATA:
                    self.events.warning("epoch_query_failed", partition=part,
                                        error=ErrorCode(err).name)
                st.retry_at = trio.current_time() + BACKOFF_S
                continue
            log = part.log
            if epoch < 0:
                cut = part.high_watermark  # no common epoch known: keep what was committed
            elif epoch == log.latest_epoch:
                cut = min(end, log.log_end_offset)
            else:
                cut = min(end, log.end_offset_for_epoch(epoch)[1])
            if part.corrupt_from is not None:  # re-fetch what failed its check here
                cut = min(cut, part.corrupt_from)
                part.corrupt_from = None
            if log.lost:  # a hole recovery found here (PartitionLog.lost): fetched again
                cut = min(cut, log.lost_from(0))
            if self.replicas.bug_skip_truncation:  # planted bug (test.flags), replica_manager.py
                cut = log.log_end_offset
            if cut < log.log_end_offset:
                self.events.warning("replica_truncated", partition=part, from_offset=cut,
                                    leo=log.log_end_offset, leader_epoch=epoch)
                part.truncate_to(max(cut, 0))
            st.truncated = True

    # ------------------------------------------------------------------ I/O

    async def _connect(self) -> None:
        if self._sock is not None:
            return
        broker = self.replicas.store.quorum.state.brokers.get(self.leader_id)
        if broker is None or not broker.listeners:
            raise OSError(f"leader {self.leader_id} has no known address")
        host, port = peer_address(broker.listeners, self.replicas.config.listener_config.inter_broker)
        self._sock = await open_peer(self.peer_security, host, port, REQUEST_TIMEOUT_S)
        self._proto = ClientConnection(max_in_flight=2)  # (a request and a nudge)
        self._nudges = set()

    async def _call(self, api: Api, fields: dict, timeout_s: float, interruptible=False):
        """Send one request and return its answer (header, body). An interruptible one
        (a parked FETCH) that :meth:`wake` interrupts is not dropped: a nudge (an
        ApiVersions request) follows it on the connection, the leader answers the
        parked fetch at once when the nudge arrives, and the nudge's own answer is
        skipped when it comes -- the session and the connection live on."""
        rid, data = self._proto.send_request(api, fields)
        deadline = trio.current_time() + timeout_s
        await sockio.send_all(self._sock, data)
        while True:
            # A bare cancel scope (trio.fail_after's context-manager wrapper costs as
            # much again, twice per replicated batch).
            with trio.CancelScope(deadline=deadline) as scope:
                if interruptible:
                    self._fetch_scope, self._interrupted = scope, False
                try:
                    frame = await self._next_frame(rid)
                finally:
                    self._fetch_scope = None
            if not scope.cancelled_caught:
                break
            if not self._interrupted or trio.current_time() >= deadline:
                raise trio.TooSlowError
            self._interrupted = False
            if not self._nudges:
                nid, nudge = self._proto.send_request(Api.API_VERSIONS, {})
                self._nudges.add(nid)
                await sockio.send_all(self._sock, nudge)
        if frame.header.get("error"):
            raise ApiError(ErrorCode(frame.header["error"]), frame.header.get("message", ""))
        return frame.header, frame.body

    async def _next_frame(self, rid: int):
        """The answer to request ``rid``, skipping the answers to nudges before it."""
        while True:
            while (frame := self._proto.next_response()) is None:
                chunk, _ = await sockio.recv_into(self._sock, self._buf)
                if not chunk:
                    raise OSError(f"leader {self.leader_id} closed the connection")
                self._proto.receive_data(chunk)
            fid = frame.header.get("id")
            if fid == rid:
                return frame
            self._nudges.discard(fid)

    async def _close(self) -> None:
        self._told = None  # the leader's session dies with the connection
        self._told_flushed = {}
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sockio.close(sock)
