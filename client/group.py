"""Consumer group membership: Kafka's classic group protocol from the member's side.

One background thread per consumer (``raftlog-consumer-group``) finds the group's
coordinator, joins, runs the assignor when it is the group's leader, syncs,
heartbeats, sends auto-commits handed over by ``poll()``, and notices
subscription changes (a regex pattern matching a new topic, a topic gaining
partitions). The consumer's fetch thread keeps reading owned partitions meanwhile.

Rebalance protocols:

* eager (``range``, ``roundrobin``): every owned partition is revoked before the
  member rejoins;
* cooperative (``cooperative-sticky``, KIP-429): the member keeps consuming what it
  owns while it rejoins; after SyncGroup it revokes only the partitions that are
  no longer its own, and rejoins at once when it revoked any, so their new owner
  gets them in the next generation.

Listener callbacks (``on_assigned``, ``on_revoked``, ``on_lost``) run on the group
thread; they may call ``consumer.commit()``. Before a partition is revoked, the
offsets of the records ``poll()`` returned *before the latest poll()* are committed
when auto-commit is on (records are processed between two polls, as in Kafka), so
a member killed at any moment loses nothing: at-least-once.

Offsets are committed with the member id and generation; a member of an older
generation is refused (ILLEGAL_GENERATION), which is raised as CommitFailedError.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterable

from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api, PartitionResult

from .assignors import Subscription, assignment_from_wire, assignment_to_wire, get_assignor
from .conn import BrokerConnection, Cluster
from .errors import BrokerNotAvailableError, CommitFailedError, api_error
from .types import TopicPartition

#: Pause after a failed coordinator lookup or a retriable error.
RETRY_BACKOFF_S = 0.1
#: How often a member checks its subscription against the cluster's topics.
METADATA_CHECK_S = 3.0
#: Longest the group thread sleeps (it notices close() and commit requests).
IDLE_S = 0.05
#: Bound on consecutive failed joins before the error reaches poll().
JOIN_ATTEMPTS_MAX = 1000

_COORDINATOR_MOVED = frozenset({
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.REQUEST_TIMED_OUT,
})
_MEMBERSHIP_LOST = frozenset({
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.FENCED_INSTANCE_ID,
})


class ConsumerRebalanceListener:
    """Override what you need. ``on_lost`` defaults to ``on_revoked`` (as Kafka)."""

    def on_assigned(self, partitions: set) -> None:
        pass

    def on_revoked(self, partitions: set) -> None:
        pass

    def on_lost(self, partitions: set) -> None:
        self.on_revoked(partitions)


class _CoordinatorGone(Exception):
    """The coordinator moved or its connection broke: look it up again."""


class GroupMember:
    """Membership of one consumer; see the module docstring."""

    def __init__(self, consumer, *, group_id: str, strategy: str, session_timeout_ms: int,
                 max_poll_interval_ms: int, heartbeat_interval_ms: int,
                 group_instance_id: str | None, client_id: str, request_timeout_s: float):
        #: the consumer's side (consumer._GroupSide): bootstrap, auto_commit,
        #: seconds_since_poll(), consumed(), set_assignment() -- nothing else of it
        self.consumer = consumer
        self.group_id = group_id
        self.assignor = get_assignor(strategy)
        self.cooperative = strategy == "cooperative-sticky"
        self.session_timeout_ms = session_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.instance_id = group_instance_id
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.member_id = ""
        self.generation = -1
        self.owned: set = set()
        self.topics: tuple[str, ...] = ()
        self.pattern: re.Pattern | None = None
        self.listener: ConsumerRebalanceListener | None = None
        self.needs_join = True
        #: poll() stalled beyond max_poll_interval_ms: left the group until the next poll
        self.left_for_poll_timeout = False
        self._lock = threading.RLock()  # the coordinator connection
        self._conn: BrokerConnection | None = None
        self._wake = threading.Condition()
        self._commit_request: dict | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        # Its own connections: a Cluster is not shared between threads.
        self._cluster = Cluster(consumer.bootstrap, request_timeout_s,
                                security=consumer.security)
        self._security = consumer.security
        self._partition_counts: dict[str, int] = {}
        self._next_metadata_check = 0.0
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ public side

    @property
    def coordinator_id(self) -> int | None:
        """The node id of the coordinator this member talks to (None: not found yet)."""
        conn = self._conn
        return None if conn is None else conn.node_id

    def subscribe(self, topics: Iterable[str], pattern: re.Pattern | None, listener) -> None:
        with self._wake:
            self.topics = tuple(sorted(set(topics)))
            self.pattern = pattern
            self.listener = listener
            self.needs_join = True
            self._next_metadata_check = 0.0
            self._wake.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="raftlog-consumer-group",
                                            daemon=True)
            self._thread.start()

    def request_commit(self, offsets: dict) -> None:
        """Auto-commit from poll(): sent by the group thread when it is free."""
        with self._wake:
            self._commit_request = offsets
            self._wake.notify_all()

    def on_poll(self) -> None:
        if self.left_for_poll_timeout:
            with self._wake:
                self.left_for_poll_timeout = False
                self.needs_join = True
                self._wake.notify_all()

    def commit_sync(self, offsets: dict, generation_fenced: bool = True) -> None:
        """Commit ``{TopicPartition: offset}`` now. Raises CommitFailedError when the
        group has moved on (rebalanced without this member, or a newer generation)."""
        if not offsets:
            return
        fields = {
            "group": self.group_id,
            "generation": self.generation if generation_fenced else -1,
            "member_id": self.member_id if generation_fenced else "",
            "group_instance_id": self.instance_id if generation_fenced else None,
            "offsets": [[tp.topic, tp.partition, off, None] for tp, off in offsets.items()],
        }
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            try:
                try:
                    h = self._request(Api.OFFSET_COMMIT, fields)
                except ApiError as e:
                    h = {"parts": [PartitionResult("", -1, int(e.code), e.message)]}
                failed = [p for p in h["parts"] if p.error]
                if not failed:
                    return
                code, message = ErrorCode(failed[0].error), failed[0].message
                if code in _COORDINATOR_MOVED:
                    raise _CoordinatorGone(message)
                if code in _MEMBERSHIP_LOST or code is ErrorCode.REBALANCE_IN_PROGRESS:
                    raise CommitFailedError(
                        f"commit of group {self.group_id!r} refused: {code.name}: {message} "
                        "(the group rebalanced; the partitions may belong to another member now)")
                raise api_error(code, message)
            except _CoordinatorGone:
                if time.monotonic() >= deadline:
                    raise BrokerNotAvailableError(
                        f"no coordinator of group {self.group_id!r} answered in "
                        f"{self.request_timeout_s:g}s") from None
                time.sleep(RETRY_BACKOFF_S)

    def committed(self, tps: list) -> dict:
        """Committed offsets (None when none) of ``tps``."""
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            try:
                h = self._request(Api.OFFSET_FETCH, {
                    "group": self.group_id, "parts": [[tp.topic, tp.partition] for tp in tps]})
                return {tp: (p.offset if p.offset >= 0 else None) for tp, p in zip(tps, h["parts"])}
            except _CoordinatorGone:
                if time.monotonic() >= deadline:
                    raise BrokerNotAvailableError(
                        f"no coordinator of group {self.group_id!r} answered") from None
                time.sleep(RETRY_BACKOFF_S)

    def close(self, final_offsets: dict | None) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(0.5)
            conn = self._conn
            if self._thread.is_alive() and conn is not None:
                # blocked in a JoinGroup/SyncGroup that may wait for minutes: break it
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._thread.join(self.request_timeout_s + 5)
        try:
            if final_offsets and self.generation >= 0:
                try:
                    self.commit_sync(final_offsets)
                except (CommitFailedError, ApiError, BrokerNotAvailableError):
                    pass
            if self.owned:
                self._call("on_revoked", set(self.owned))
            if self.generation >= 0 and self.instance_id is None:
                try:  # leave now instead of waiting for the session timeout
                    self._request(Api.LEAVE_GROUP, {"group": self.group_id,
                                                    "member_id": self.member_id}, retry=False)
                except (ApiError, BrokerNotAvailableError, _CoordinatorGone):
                    pass
        finally:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                self._cluster.close()

    # ------------------------------------------------------------------ coordinator

    def _connection(self) -> BrokerConnection:
        if self._conn is not None and not self._conn.closed_by_node():
            return self._conn
        cluster = self._cluster
        try:
            h = cluster.any_connection().request(
                Api.FIND_COORDINATOR, {"key": self.group_id}, timeout_s=self.request_timeout_s
            ).header
        except BrokerNotAvailableError as e:
            raise _CoordinatorGone(str(e)) from None
        except ApiError as e:
            if e.retriable or e.code in _COORDINATOR_MOVED:
                raise _CoordinatorGone(e.message) from None
            raise
        try:
            self._conn = BrokerConnection(h["host"], h["port"], self.request_timeout_s,
                                          node_id=h["node_id"], security=self._security)
        except BrokerNotAvailableError as e:
            raise _CoordinatorGone(str(e)) from None
        return self._conn

    def _request(self, api: Api, fields: dict, timeout_s: float | None = None,
                 retry: bool = True) -> dict:
        """One request to the coordinator. Raises _CoordinatorGone when it moved."""
        with self._lock:
            conn = self._connection()
            try:
                return conn.request(api, fields, timeout_s=timeout_s or self.request_timeout_s).header
            except BrokerNotAvailableError as e:
                self._drop_connection()
                raise _CoordinatorGone(str(e)) from None
            except ApiError as e:
                if e.code in _COORDINATOR_MOVED:
                    self._drop_connection()
                    raise _CoordinatorGone(e.message) from None
                raise

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        next_heartbeat = 0.0
        failures = 0
        while True:
            with self._wake:
                if self._closed:
                    return
                commit, self._commit_request = self._commit_request, None
            try:
                if commit:
                    self._auto_commit(commit)
                self._check_poll_interval()
                self._check_metadata()
                if self.needs_join and not self.left_for_poll_timeout:
                    self._join_and_sync()
                    next_heartbeat = time.monotonic() + self.heartbeat_s
                    failures = 0
                elif self.generation >= 0 and time.monotonic() >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = time.monotonic() + self.heartbeat_s
                    failures = 0
            except _CoordinatorGone:
                failures += 1
                time.sleep(RETRY_BACKOFF_S)
                continue
            except ApiError as e:
                if e.code in _MEMBERSHIP_LOST:
                    self._lose_membership(reset_member=e.code is not ErrorCode.FENCED_INSTANCE_ID)
                    if e.code is ErrorCode.FENCED_INSTANCE_ID:
                        self.error = e  # another process took this group.instance.id
                        return
                elif e.code is ErrorCode.REBALANCE_IN_PROGRESS:
                    self.needs_join = True
                elif e.retriable:
                    time.sleep(RETRY_BACKOFF_S)
                else:
                    failures += 1
                    if failures >= JOIN_ATTEMPTS_MAX or not e.retriable:
                        self.error = e
                        time.sleep(1.0)
                continue
            except BrokerNotAvailableError:
                time.sleep(RETRY_BACKOFF_S)
                continue
            except Exception as e:  # a bug: report it through poll(), keep trying
                self.error = e
                time.sleep(1.0)
                continue
            with self._wake:
                if not self._closed and self._commit_request is None:
                    wait = IDLE_S if self.needs_join else min(
                        max(next_heartbeat - time.monotonic(), 0.0), IDLE_S * 4)
                    self._wake.wait(wait)

    def _heartbeat(self) -> None:
        self._request(Api.HEARTBEAT, {"group": self.group_id, "generation": self.generation,
                                      "member_id": self.member_id,
                                      "group_instance_id": self.instance_id})

    def _auto_commit(self, offsets: dict) -> None:
        mine = {tp: off for tp, off in offsets.items() if tp in self.owned}
        if not mine or self.generation < 0:
            return
        try:
            self.commit_sync(mine)
        except CommitFailedError:
            self.needs_join = True

    def _check_poll_interval(self) -> None:
        if self.generation < 0 or self.left_for_poll_timeout:
            return
        stalled_ms = self.consumer.seconds_since_poll() * 1000
        if stalled_ms > self.max_poll_interval_ms:
            # Kafka's rule: a member that stops polling leaves, so the group moves on.
            try:
                self._request(Api.LEAVE_GROUP, {"group": self.group_id,
                                                "member_id": self.member_id}, retry=False)
            except (ApiError, _CoordinatorGone):
                pass
            self.left_for_poll_timeout = True
            self._lose_membership(reset_member=True)

    def _check_metadata(self) -> None:
        now = time.monotonic()
        if now < self._next_metadata_check:
            return
        self._next_metadata_check = now + METADATA_CHECK_S
        cluster = self._cluster
        try:
            if self.pattern is not None:
                h = cluster.refresh(None)
                topics = tuple(sorted(t.name for t in h["topics"] if not t.error
                                      and self.pattern.fullmatch(t.name)
                                      and not t.name.startswith("__")))
            else:
                topics = self.topics
                if topics:
                    cluster.refresh(list(topics))
        except (ApiError, BrokerNotAvailableError):
            return
        counts = {t: len(cluster.topics[t]) for t in topics if t in cluster.topics}
        if self.pattern is not None and topics != self.topics:
            self.topics = topics
            self.needs_join = True
        if counts != self._partition_counts:
            if self._partition_counts:  # a topic appeared or grew: reassign
                self.needs_join = True
            self._partition_counts = counts

    def _call(self, name: str, partitions: set) -> None:
        if self.listener is None or not partitions:
            return
        try:
            getattr(self.listener, name)(set(partitions))
        except Exception as e:  # the user's callback: report through poll()
            self.error = e

    def _revoke(self, partitions: set) -> None:
        """Commit what was processed of ``partitions``, stop fetching them, call back."""
        if not partitions:
            return
        consumed = self.consumer.consumed(partitions)
        if consumed and self.consumer.auto_commit:
            try:
                self.commit_sync(consumed)
            except (CommitFailedError, ApiError, BrokerNotAvailableError):
                pass  # another member may re-read them: at-least-once
        self._call("on_revoked", partitions)
        self.owned -= partitions
        self.consumer.set_assignment(sorted(self.owned), {})

    def _lose_membership(self, reset_member: bool) -> None:
        lost = set(self.owned)
        self.owned = set()
        self.consumer.set_assignment([], {})
        self._call("on_lost", lost)
        self.generation = -1
        if reset_member and self.instance_id is None:
            self.member_id = ""
        self.needs_join = True

    def _join_and_sync(self) -> None:
        if not self.cooperative and self.owned:
            self._revoke(set(self.owned))  # eager: give everything back before rejoining
        if not self.topics:
            self.needs_join = False
            return
        owned = tuple(sorted((tp.topic, tp.partition) for tp in self.owned))
        sub = Subscription(self.topics, owned, self.generation)
        join_fields = {
            "group": self.group_id,
            "member_id": self.member_id,
            "client_id": self.client_id,
            "group_instance_id": self.instance_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.max_poll_interval_ms,
            "protocols": [[self.assignor.name, sub.to_wire()]],
        }
        join_timeout = self.max_poll_interval_ms / 1000 + 30
        try:
            h = self._request(Api.JOIN_GROUP, join_fields, timeout_s=join_timeout)
        except ApiError as e:
            if e.code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            raise
        self.member_id = h["member_id"]
        generation = h["generation"]
        assignments = []
        if h["leader"] == self.member_id:
            assignments = self._assign(h["members"])
        try:
            s = self._request(Api.SYNC_GROUP, {
                "group": self.group_id, "generation": generation, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "assignments": assignments,
            }, timeout_s=join_timeout)
        except ApiError as e:
            if e.code is ErrorCode.REBALANCE_IN_PROGRESS:
                self.needs_join = True
            raise
        try:
            new = set(_tps(assignment_from_wire(s["assignment"] or {"partitions": []})))
        except ValueError as e:
            raise ApiError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad assignment: {e}") from None
        self.generation = generation
        self.needs_join = False
        revoked = self.owned - new
        if revoked:
            self._revoke(revoked)
        added = new - self.owned
        committed = self.committed(sorted(added)) if added else {}
        self.owned = new
        self.consumer.set_assignment(sorted(new), {tp: off for tp, off in committed.items()
                                                    if off is not None})
        self._call("on_assigned", added)
        if revoked and self.cooperative:
            self.needs_join = True  # KIP-429: the revoked partitions go out next generation

    def _assign(self, members: list) -> list:
        subs = {}
        for m in members:
            try:
                subs[m.member_id] = Subscription.from_wire(m.metadata)
            except ValueError:
                subs[m.member_id] = Subscription(())
        topics = sorted({t for s in subs.values() for t in s.topics})
        cluster = self._cluster
        counts = {}
        try:
            if topics:
                cluster.refresh(topics)
            counts = {t: len(cluster.topics[t]) for t in topics if t in cluster.topics}
        except (ApiError, BrokerNotAvailableError):
            pass
        result = self.assignor.assign(counts, subs)
        return [[m, assignment_to_wire(tps)] for m, tps in result.items()]


def _tps(pairs) -> list:
    return [TopicPartition(t, p) for t, p in sorted(pairs)]
