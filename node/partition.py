"""A partition replica hosted by this node: its log, its role and its waiters.

All methods run on the trio thread. Waiters are plain ``trio.Event`` objects
registered per partition -- the purgatory, kept as small as it can be:

- HW waiters (consumer long-polls, acks=all produces) wake when the high watermark
  moves or the role changes;
- LEO waiters (followers' long-polls) wake when the leader appends.

What follows from the log's contents -- the stored high watermark, the epoch cache,
idempotent producers' state and its snapshot -- the log owns (raftlog/log.py); this
class decides when the HW may move (the ISR's progress) and wakes who waits for it.

Leadership, the ISR and the epochs come from the committed metadata
(:meth:`update_metadata`); as leader, follower progress is kept in a pure
:class:`~raftlog.node.replica.LeaderState`.
"""

from __future__ import annotations

import os
import shutil

import trio

from raftlog.errors import (
    STORAGE_ERROR_APPENDED,
    ApiError,
    CorruptRecordError,
    ErrorCode,
    StorageError,
)
from raftlog.group_commit import GroupCommitter
from raftlog.log import PartitionLog
from raftlog.recompress import recompress
from raftlog.trace import at

from .clock import node_ms, wall_ms
from .replica import UNKNOWN, LeaderState

#: Waiters one partition may hold before new long-polls answer at once.
MAX_WAITERS_PER_PARTITION = 10_000


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, f"{topic}-{partition}")




class Partition:
    """One replica. Leadership, ISR and epochs come from metadata."""

    def __init__(self, topic: str, partition: int, log: PartitionLog, leader_epoch: int = 0,
                 node_id: int = 0, unflushed: set | None = None, syncs=None):
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = -1
        self.leader_id = node_id
        self.replicas: tuple = (node_id,)
        self.isr: tuple = (node_id,)
        self.is_leader = True
        #: as leader: follower progress; None as follower
        self.leader_state: LeaderState | None = None
        #: ISR proposed to the controller and not yet committed (None: nothing pending)
        self.pending_isr: tuple | None = None
        #: the last ISR change the controller refused: (ISR, partition epoch, node ms
        #: before which the ISR duty does not propose it again; node/isr.py)
        self.isr_refused: tuple | None = None
        self._waiters: set[trio.Event] = set()
        self._leo_waiters: set[trio.Event] = set()
        #: followers' fetch sessions that hold this partition (node/fetch_session.py):
        #: marked, not emptied, at every wake
        self._sessions: set = set()
        #: first offset of data found corrupt on disk: truncated and re-fetched as follower
        self.corrupt_from: int | None = None
        #: as leader of a partition being reassigned with a throttle: (the replicas
        #: being added, bytes/s); their fetches share the node's reassignment budget
        self.throttled: tuple | None = None
        #: the node's data dir health (node/disk.py); None in tools and unit tests
        self.disk = None
        #: planted bug (test.flags ``bug-ack-before-fsync``, jepsen/): durable topics
        #: run as write.caching=true
        self.bug_ack_before_fsync = False
        #: the node's set of partitions written since its last periodic flush (the
        #: flush then looks at those only); None in tools and unit tests
        self._unflushed = unflushed
        #: opt-in hop stamps (raftlog/trace.py, ``trace.events``); None: off
        self.trace = None
        #: (as leader, tracing) what each follower was last known to hold: {replica:
        #: offset}, and the flushed offset the last sync reached
        self._trace_known: dict = {}
        self._trace_synced = -1
        self._written()  # (a new log's first flush writes its checkpoint)
        #: group commit of this log (raftlog/group_commit.py) when the node runs syncs
        #: (``syncs``: node/log_manager.py's SyncRunner); None in tools and unit tests,
        #: where a durable topic's append syncs inline
        self.committer: GroupCommitter | None = None
        self._syncs = syncs
        if syncs is not None:
            self.committer = syncs.committer(self)

    @property
    def durable(self) -> bool:
        """``write.caching=false``: acknowledged (and visible to consumers) only once
        every ISR member has it on disk."""
        return not self.log.config.write_caching and not self.bug_ack_before_fsync

    @property
    def flushed_offset(self) -> int:
        return self.log.flushed_offset

    def _appended(self) -> None:
        """After an append of a durable topic: its group commit (the sync runs in a
        worker thread, or inline when nothing could overlap it: node/log_manager.py)."""
        c = self.committer
        if c is not None and c.nursery is not None:
            # a follower's round and a lone leader's acks wait for this sync and for
            # nothing else: it runs on the loop while fast (node/log_manager.py)
            if self._syncs is not None and self._syncs.sync_now(self):
                return
            c.appended(self.log.log_end_offset)
        else:  # (tools, unit tests, a node not running yet: no worker; sync now)
            try:
                self.log.sync()
            except StorageError as e:  # not on disk: the HW waits for a later sync
                self._write_failed(e)
                return
            self.on_flushed()

    def on_flushed(self, _flushed: int | None = None) -> None:
        """A sync of this log finished (trio thread): as leader the HW may move, and
        acks=1 produces of a durable topic wait for this."""
        if self.trace is not None:
            synced = self.log.flushed_offset
            first = max(self._trace_synced, self.log.log_start_offset)
            self.trace.stamp("follower_sync" if not self.is_leader else "leader_sync",
                             self.topic, self.partition, first, synced - 1)
            if not self.is_leader:
                self.trace.stamp(at("follower_sync", self.node_id), self.topic,
                                 self.partition, first, synced - 1)
            self._trace_synced = synced
        if self.is_leader:
            self.maybe_advance_hw()
            if self._waiters:
                self.wake_waiters()

    async def wait_flushed(self, offset: int) -> bool:
        """Wait until this log is on disk below ``offset`` (False: a sync failed, or
        none runs: the caller retries later)."""
        if self.log.flushed_offset >= offset:
            return True
        c = self.committer
        if c is None:
            return False
        c.kick()
        return await c.wait_flushed(offset)

    def _written(self) -> None:
        if self._unflushed is not None:
            self._unflushed.add(self)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # ------------------------------------------------------------------ metadata

    def update_metadata(self, leader: int, leader_epoch: int, replicas: tuple, isr: tuple,
                        partition_epoch: int) -> str | None:
        """Follow committed metadata. Returns "leader" / "follower" when this replica
        starts a new role (or a new leader epoch), else None."""
        new_epoch = leader_epoch != self.leader_epoch or self.partition_epoch < 0
        was_leader = self.is_leader
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        if partition_epoch != self.partition_epoch:
            self.pending_isr = None  # the committed state answers any pending change
        self.partition_epoch = partition_epoch
        self.leader_id, self.leader_epoch = leader, leader_epoch
        self.is_leader = leader == self.node_id
        if self.is_leader:
            if new_epoch or not was_leader or self.leader_state is None:
                # Epoch E starts at the current LEO: OffsetsForLeaderEpoch answers from it.
                self.log.assign_epoch(leader_epoch, self.log.log_end_offset)
                self.leader_state = LeaderState(self.node_id, self.replicas, node_ms())
                self.wake_waiters()
                self.wake_leo_waiters()
                self.maybe_advance_hw()
                return "leader"
            self.leader_state.set_replicas(self.replicas, node_ms())
            self.maybe_advance_hw()
            return None
        self.leader_state = None
        self.pending_isr = None
        if was_leader or new_epoch:
            self.wake_waiters()
            self.wake_leo_waiters()
            return "follower"
        return None

    @property
    def hw_isr(self) -> tuple:
        """The ISR the HW is computed over: the committed ISR plus any members being
        added (Kafka's *maximal* ISR), so a pending change never lowers safety."""
        if self.pending_isr is None:
            return self.isr
        return tuple(set(self.isr) | set(self.pending_isr))

    def maybe_advance_hw(self) -> bool:
        """As leader: HW = min LEO over the ISR (never moves back); of a durable topic
        (``write.caching=false``), min *flushed* offset over the ISR, so a consumer never
        sees a record that a power loss of every replica could take."""
        if not self.is_leader:
            return False
        isr = self.hw_isr
        durable = self.durable
        own = self.log.flushed_offset if durable else self.log.log_end_offset
        if len(isr) == 1 and isr[0] == self.node_id:
            hw = own
        elif self.leader_state is None:
            return False
        else:
            hw = self.leader_state.high_watermark(own, isr, durable)
            if hw == UNKNOWN:
                return False
        if durable and hw > self.log.high_watermark:
            assert hw <= self.log.flushed_offset <= self.log.log_end_offset, (
                hw, self.log.flushed_offset, self.log.log_end_offset)
            assert self.leader_state is None or all(
                hw <= self.leader_state.flushed_of(r) for r in isr if r != self.node_id), hw
        return self.maybe_increment_high_watermark(hw)

    def on_follower_fetch(self, replica: int, fetch_offset: int, session=None,
                          flushed: int | None = None) -> None:
        """A follower fetched at ``fetch_offset`` (through ``session``, if any): it
        holds everything below it, and has ``flushed`` of it on disk (None: not told
        in this fetch).

        Raises:
            ApiError: NOT_LEADER_OR_FOLLOWER (not the leader, or ``replica`` is not a
                replica of this partition).
        """
        if not self.is_leader or self.leader_state is None:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not the leader of {self}")
        if not self.leader_state.on_fetch(replica, fetch_offset, self.log.log_end_offset,
                                          node_ms(), session, flushed):
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {replica} is not a replica of {self}")
        if self.trace is not None:
            self._trace_report(replica, flushed if self.durable else fetch_offset)
        self.maybe_advance_hw()

    def _trace_report(self, replica: int, holds: int | None) -> None:
        """(tracing) ``replica`` holds -- on disk, when durable -- offsets below
        ``holds``: stamp what is new since its last word."""
        if holds is None:
            return
        known = self._trace_known.get(replica, holds)
        self._trace_known[replica] = max(known, holds)
        self.trace.stamp("follower_report", self.topic, self.partition, known, holds - 1)
        self.trace.stamp(at("follower_report", replica), self.topic, self.partition, known,
                         holds - 1)

    def on_follower_flushed(self, replica: int, flushed: int) -> None:
        """A follower told (in a fetch that did not name this partition) that it has
        ``flushed`` of it on disk."""
        if self.trace is not None and self.durable:
            self._trace_report(replica, flushed)
        if self.is_leader and self.leader_state is not None:
            if self.leader_state.on_flushed(replica, flushed):
                self.maybe_advance_hw()

    def set_follower_high_watermark(self, leader_hw: int) -> None:
        """As follower: HW = min(leader's HW, own LEO). Moves back only by truncation."""
        hw = min(leader_hw, self.log.log_end_offset)
        self.maybe_increment_high_watermark(hw)

    def append_as_leader(self, data: bytes, max_message_bytes: int,
                         transactional_ok: bool = False,
                         check_records: bool = True) -> tuple[int, int]:
        """Append client batches; the caller answers the producer.

        Durable when it returns: written to the OS (page cache); of a durable topic
        (``write.caching=false``) a group-commit sync is started (the HW, and so
        acks=all, waits for it); fsynced per ``flush.messages``/``flush.ms`` or by the
        node's periodic flush otherwise.

        Raises:
            ApiError: NOT_LEADER_OR_FOLLOWER, MESSAGE_TOO_LARGE, CORRUPT_MESSAGE,
                KAFKA_STORAGE_ERROR, or the log's idempotence errors (INVALID_REQUEST,
                OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH, ...).
        """
        if not self.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not the leader of {self}")
        if not data:
            raise ApiError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
        codec = self.log.config.compression_type
        if codec != "producer":  # the topic's compression.type (raftlog/recompress.py)
            try:
                data = recompress(data, codec)
            except CorruptRecordError as e:
                raise ApiError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
        if len(data) > max_message_bytes:
            raise ApiError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record set of {len(data)} bytes exceeds max.message.bytes {max_message_bytes} "
                f"of topic {self.topic!r}: send smaller batches (the producer's batch_size) or "
                "smaller records, or raise the topic's max.message.bytes",
            )
        self._written()
        if self.leader_state is not None:
            self.leader_state.before_append(self.log.log_end_offset)
        try:
            base, last, duplicate = self.log.append_as_leader(
                data, leader_epoch=self.leader_epoch, transactional_ok=transactional_ok,
                check_records=check_records)
        except CorruptRecordError as e:
            raise ApiError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
        except StorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, self._write_failed(e)) from None
        if duplicate:  # a retry of a batch this log holds: its original offsets
            return base, last
        if self.trace is not None:
            self.trace.stamp("leader_append", self.topic, self.partition, base, last)
        self._after_append()
        return base, last

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool) -> int:
        """Append a transaction marker (WriteTxnMarkers) as leader; its offset.

        Raises:
            ApiError: NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, or the log's marker
                checks (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED).
        """
        if not self.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not the leader of {self}")
        self._written()
        if self.leader_state is not None:
            self.leader_state.before_append(self.log.log_end_offset)
        try:
            offset = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch,
                                            commit, leader_epoch=self.leader_epoch)
        except StorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, self._write_failed(e)) from None
        self._after_append()
        return offset

    def _after_append(self) -> None:
        if self.disk is not None:
            self.disk.write_ok(self)
        try:
            self.log.maybe_flush(wall_ms())
        except StorageError as e:  # (flush.messages/flush.ms) appended, not yet durable
            self.wake_leo_waiters()
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                           f"{self._write_failed(e)} {STORAGE_ERROR_APPENDED}") from None
        if self.durable:
            self._appended()
        self.wake_leo_waiters()
        self.maybe_advance_hw()

    def _write_failed(self, err: StorageError) -> str:
        """A write of this replica failed: the message for clients (and one log line
        per incident, see node/disk.py)."""
        if self.disk is None:
            return str(err)
        return self.disk.write_failed(err, self)

    def append_as_follower(self, data) -> tuple[int, int]:
        """Append the leader's batches (offsets kept); producer state follows.

        Raises:
            CorruptRecordError: bad CRC or overlapping offsets (nothing written).
            StorageError: the disk write failed (nothing written; logged once per
                incident by the data dir's health, see node/disk.py).
        """
        self._written()
        try:
            base, last = self.log.append_as_follower(data)
        except StorageError as e:
            self._write_failed(e)
            raise
        if self.disk is not None:
            self.disk.write_ok(self)
        if self.trace is not None:
            self.trace.stamp("follower_append", self.topic, self.partition, base, last)
            self.trace.stamp(at("follower_append", self.node_id), self.topic, self.partition,
                             base, last)
        if self.durable:
            self._appended()
        return base, last

    def truncate_to(self, offset: int) -> None:
        self._written()
        self.log.truncate_to(offset)
        self._truncated()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._written()
        self.log.truncate_fully_and_start_at(offset)
        self._truncated()

    def _truncated(self) -> None:
        if self.committer is not None:
            self.committer.truncated(self.log.log_end_offset, self.log.flushed_offset)

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Move the HW forward to ``hw`` (never back); wake waiters if it moved."""
        old = self.log.high_watermark
        if not self.log.maybe_increment_high_watermark(hw):
            return False
        if self.trace is not None and self.is_leader:
            self.trace.stamp("hw_advance", self.topic, self.partition, old, hw - 1)
        self.wake_waiters()
        return True

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for ev in waiters:
            ev.set()
        for s in self._sessions:  # (a HW move: news for followers, not worth a wake)
            s.mark(self.key, False)

    def wake_leo_waiters(self) -> None:
        if self._leo_waiters:
            waiters, self._leo_waiters = self._leo_waiters, set()
            for ev in waiters:
                ev.set()
        for s in self._sessions:
            s.mark(self.key, True)

    def add_session(self, session) -> None:
        self._sessions.add(session)

    def remove_session(self, session) -> None:
        self._sessions.discard(session)

    def add_waiter(self, ev: trio.Event, leo: bool = False) -> bool:
        waiters = self._leo_waiters if leo else self._waiters
        if len(waiters) >= MAX_WAITERS_PER_PARTITION:
            return False
        waiters.add(ev)
        return True

    def remove_waiter(self, ev: trio.Event) -> None:
        self._waiters.discard(ev)
        self._leo_waiters.discard(ev)

    def close(self) -> None:
        self.wake_waiters()
        self.wake_leo_waiters()
        self.log.close()  # (writes the producer-state snapshot)

    def delete(self) -> None:
        self.wake_waiters()
        self.wake_leo_waiters()
        path = getattr(self.log, "path", None) or getattr(self.log, "dir", None)
        self.log.delete()
        if path and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}"
