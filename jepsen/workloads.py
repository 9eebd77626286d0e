"""Client workers: each a thread with its own process id and its own clients.

queue: sender processes send unique integers (``acks="all"``) to the partitions of one
topic, one record per operation; consumer processes ``assign`` every partition and poll.
A consumer that hits an error is replaced by a fresh one that continues from its last
position (recorded as an ``assign`` op), as a restarted Kafka consumer would from its
committed offsets.

idempotent: as queue, but the senders share idempotent producers (``acks="all"``,
``enable_idempotence=True``; two sender processes per producer, so batches carry
several records and several partitions are in flight at once) with short request
timeouts, so faults make the producer retry batches; the final log must hold every
acknowledged value exactly once, and any other value at most once.

groups: as queue's senders, and members of consumer groups (``subscribe``) instead of
assigned consumers: group ``jg-0`` auto-commits, ``jg-1`` commits its positions itself
after every poll that returned records. Members are closed and created again on a
seeded schedule (rebalances; one close in three of an auto-committing member commits
nothing, as a crash) and whenever they fail. Every poll is recorded with its
group; an observer process reads every group's committed offsets from outside the group
(``committed`` ops) twice a second. At the end the senders stop, the members keep going
until every group has committed the end of every partition (the drain), the members
close, and the committed offsets are read once more -- and again after the restart of
every node.

metadata: processes create, delete and describe a few topic names at random.

txn: transactional producers, one per sender process, each operation one transaction
of sends to several partitions of two topics, committed or aborted at random;
read_committed consumers poll every partition (see TxnWorkload, jepsen/txn_checker.py).
"""

from __future__ import annotations

import random
import threading
import time

from raftlog.client import (
    Admin,
    ApiError,
    ClientError,
    CommitFailedError,
    Consumer,
    ConsumerRebalanceListener,
    KafkaStorageError,
    Producer,
    ProducerClosedError,
    ProducerFencedError,
    TopicAlreadyExistsError,
    TopicPartition,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from raftlog.errors import ErrorCode
from raftlog.node.transactions import TRANSACTION_STATE_TOPIC
from raftlog.node.transactions import partition_for as txn_partition_for

QUEUE_TOPIC = "jepsen-queue"
SEND_TIMEOUT_S = 10.0


class NotAvailable(RuntimeError):
    """The workload needs a feature this raftlog version does not have yet."""


def key_of(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, p = key.rpartition("-")
    return topic, int(p)


class Pacer:
    """Spreads ``rate`` operations per second over the workers (each paces itself)."""

    def __init__(self, rate: float, workers: int):
        self.interval = workers / rate if rate > 0 else 0.0

    def wait(self, stop: threading.Event, last: float) -> float:
        nxt = last + self.interval
        left = nxt - time.monotonic()
        if left > 0:
            stop.wait(left)
        return max(nxt, time.monotonic() - self.interval)


#: History process ids of a sender's in-flight sends: SENDER_PROCESS_BASE + 1000 x
#: sender + slot (slot 0 of sender i is process i when one send at a time).
SENDER_PROCESS_BASE = 10_000


class SendPipeline:
    """A sender's sends in flight, at most ``size``; each holds a slot, and a slot is
    its own history process (a process has one operation outstanding at a time). A
    send not answered within SEND_TIMEOUT_S + 2 s is recorded ``info`` and its slot
    freed (its producer is then replaced); an answer after that is dropped."""

    def __init__(self, history, sender: int, size: int):
        assert 1 <= size <= 1000, size
        self.history = history
        self.size = size
        self.sender = sender
        self.cond = threading.Condition()
        self.free = list(range(size - 1, -1, -1))
        self.pending: dict[int, tuple[dict, float, object]] = {}  # slot -> (op, deadline, producer)

    def process(self, slot: int) -> int:
        return self.sender if self.size == 1 else SENDER_PROCESS_BASE + 1000 * self.sender + slot

    def acquire(self, stop: threading.Event) -> int | None:
        """A free slot (waits for one), or None once ``stop`` is set."""
        with self.cond:
            while not self.free:
                if stop.is_set():
                    return None
                self.cond.wait(0.1)
            return self.free.pop()

    def release(self, slot: int) -> None:
        with self.cond:
            self.free.append(slot)
            self.cond.notify_all()

    def invoke(self, slot: int, f: str, value, producer) -> dict:
        op = self.history.invoke(self.process(slot), f, value)
        with self.cond:
            self.pending[slot] = (op, time.monotonic() + SEND_TIMEOUT_S + 2, producer)
        return op

    def complete(self, slot: int, op: dict, type_: str, **extra) -> bool:
        """Record ``op``'s outcome unless it was already given up on; True if recorded."""
        with self.cond:
            held = self.pending.get(slot)
            if held is None or held[0] is not op:
                return False
            self.history.complete(op, type_, **extra)
            del self.pending[slot]
            self.free.append(slot)
            self.cond.notify_all()
        return True

    def expire(self, now: float) -> list:
        """Give up on every send past its deadline (``info``); their producers."""
        out = []
        with self.cond:
            for slot, (op, deadline, producer) in list(self.pending.items()):
                if deadline <= now:
                    self.history.info(op, error="timeout")
                    del self.pending[slot]
                    self.free.append(slot)
                    if producer not in out:
                        out.append(producer)
            self.cond.notify_all()
        return out

    def wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.pending and time.monotonic() < deadline:
                self.cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))


class Workload:
    name = "?"
    #: the topic whose partitions the workload reads and writes (None: several)
    topic: str | None = None
    #: node configs the workload needs (merged into every node's server.properties)
    node_config: dict = {}

    def __init__(self, cluster, history, args, rnd: random.Random, log=print):
        self.cluster = cluster
        self.history = history
        self.args = args
        self.rnd = rnd
        self.log = log
        self.stop_flag = threading.Event()
        #: senders stop first (the groups workload drains after they stopped)
        self.send_stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.keys: list[str] = []
        self.replication_factor = args.replication_factor
        self.warnings: list[str] = []

    def setup(self) -> None: ...

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.send_stop.set()
        self.stop_flag.set()
        for t in self.threads:
            t.join(SEND_TIMEOUT_S + 20)

    def after_restart(self) -> None:
        """Called once every node was restarted after the run, before the final read."""

    def strip_final(self, final: dict) -> dict:
        """The final read as the checker gets it (the txn workload drops its sentinels)."""
        return final

    def create_topic(self, admin: Admin, name: str, partitions: int,
                     config: dict | None = None) -> int:
        """Create with the wanted replication factor, falling back to 1 (loudly) when the
        cluster refuses it. Returns the factor used."""
        rf = self.replication_factor
        try:
            admin.create_topic(name, partitions=partitions, replication_factor=rf,
                               config=config)
            return rf
        except TopicAlreadyExistsError:
            return rf
        except ApiError as e:
            if rf == 1:
                raise
            msg = (f"the cluster refused replication factor {rf} ({e}); FELL BACK TO "
                   f"REPLICATION FACTOR 1: acknowledged writes on a killed or partitioned "
                   f"leader are unavailable, and nothing is replicated")
            self.log("WARNING: " + msg)
            self.warnings.append(msg)
            self.replication_factor = 1
            admin.create_topic(name, partitions=partitions, replication_factor=1,
                               config=config)
            return 1


# ----------------------------------------------------------------------------- queue


class QueueWorkload(Workload):
    name = "queue"
    topic = QUEUE_TOPIC
    #: extra options of the polling consumers (the txn workload: read_committed)
    consumer_options: dict = {}

    def _give_up_consumer(self, op, error: Exception, consumer):
        """A consumer could not be set up: fail ``op``, close what was built, pause
        (bounded retry pace). Returns None, the consumer to use next."""
        self.history.fail(op, error=repr(error))
        if consumer is not None:
            _quiet(consumer.close)
        self.stop_flag.wait(0.5)
        return None

    def setup(self) -> None:
        self._create_queue_topic()
        self._add_senders()
        for j in range(self.args.consumers):
            self.threads.append(threading.Thread(target=self._consumer, args=(100 + j,),
                                                 name=f"jepsen-poll-{j}", daemon=True))

    def _create_queue_topic(self) -> None:
        a = self.args
        deadline = time.monotonic() + 60
        while True:
            try:
                with Admin(self.cluster.bootstrap, **self.cluster.client_options, request_timeout_ms=10_000) as admin:
                    config = dict(getattr(a, "topic_config", None) or {})
                    if a.segment_bytes:
                        config["segment.bytes"] = a.segment_bytes
                    self.create_topic(admin, QUEUE_TOPIC, a.partitions, config or None)
                break
            except (ApiError, ClientError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.keys = [key_of(QUEUE_TOPIC, p) for p in range(a.partitions)]
        self._wait_leaders(QUEUE_TOPIC, a.partitions)
        self.values = iter(range(1, 1 << 62))
        self.values_lock = threading.Lock()

    def _add_senders(self) -> None:
        a = self.args
        pacer = Pacer(a.rate * (1 - a.poll_fraction), a.senders)
        self.sender_threads = []
        for i in range(a.senders):
            t = threading.Thread(target=self._sender, args=(i, pacer),
                                 name=f"jepsen-send-{i}", daemon=True)
            self.sender_threads.append(t)
            self.threads.append(t)

    def _wait_leaders(self, topic: str, n: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with Admin(self.cluster.bootstrap, **self.cluster.client_options, request_timeout_ms=3000) as admin:
                    d = admin.describe_topic(topic)
                if len(d.partitions) == n and all(p.leader >= 0 for p in d.partitions):
                    return
            except Exception:
                pass
            time.sleep(0.2)

    def _next_value(self) -> int:
        with self.values_lock:
            return next(self.values)

    def _producer(self) -> Producer:
        return Producer(self.cluster.bootstrap, **self.cluster.client_options, acks="all", linger_ms=0,
                        request_timeout_ms=3000, delivery_timeout_ms=int(SEND_TIMEOUT_S * 1000),
                        retry_backoff_ms=100, max_block_ms=2000)

    # the sender's producer: one per sender process here; shared by the idempotent one
    def _acquire_producer(self, process: int) -> Producer:
        return self._producer()

    def _release_producer(self, process: int, producer: Producer) -> None:
        """The sender stops using ``producer`` (broken, or the run is over)."""
        self._discard(producer)

    def _broken(self, e: BaseException) -> bool:
        """After a send failed with ``e``: is the producer to be replaced?"""
        return not (isinstance(e, ApiError) and e.retriable)

    def _sender(self, process: int, pacer: Pacer) -> None:
        """Sends one record per paced operation, as an application sends: without
        waiting for the previous ones (at most ``--in-flight`` of them outstanding,
        each its own history process: a Kafka producer keeps sending to the other
        partitions while one fails over). ``--in-flight 1``: one send at a time."""
        h = self.history
        pipe = SendPipeline(h, process, getattr(self.args, "in_flight", 1) or 1)
        state = {"producer": None}
        last = time.monotonic()
        rnd = random.Random(self.rnd.random())

        def drop(producer) -> None:  # (any thread) the producer is broken: a new one next
            with pipe.cond:
                if state["producer"] is not producer:
                    return
                state["producer"] = None
            self._release_producer(process, producer)

        def done(slot: int, op: dict, producer, fut) -> None:  # (the producer's thread)
            try:
                md = fut.result(timeout=0)
            except KafkaStorageError as e:
                # the leader's disk is full: failed for sure when no attempt was appended
                # (the failed-send checker holds us to that), else indeterminate
                pipe.complete(slot, op, "fail" if e.written is False else "info", error=str(e))
            except Exception as e:
                # an earlier attempt of the batch may have been written: indeterminate
                if pipe.complete(slot, op, "info", error=repr(e)) and self._broken(e):
                    drop(producer)
            else:
                pipe.complete(slot, op, "ok", offset=md.offset)

        while not self.send_stop.is_set():
            last = pacer.wait(self.send_stop, last)
            for producer in pipe.expire(time.monotonic()):  # (never answered: wedged)
                drop(producer)
            if self.send_stop.is_set():
                break
            slot = pipe.acquire(self.send_stop)
            if slot is None:
                break
            producer = state["producer"]
            if producer is None:
                try:
                    producer = state["producer"] = self._acquire_producer(process)
                except Exception as e:
                    pipe.release(slot)
                    self.log(f"sender {process}: cannot create producer: {e!r}")
                    self.send_stop.wait(0.5)
                    continue
            key = rnd.choice(self.keys)
            topic, partition = split_key(key)
            v = self._next_value()
            op = pipe.invoke(slot, "send", [key, v], producer)
            try:
                fut = producer.send(topic, str(v).encode(), partition=partition)
            except Exception as e:  # raised before the record was queued: never sent
                pipe.complete(slot, op, "fail", error=repr(e))
                if isinstance(e, ProducerClosedError):
                    drop(producer)
                continue
            fut.add_done_callback(lambda f, s=slot, o=op, p=producer: done(s, o, p, f))
            if pipe.size == 1:  # one at a time: wait for it here, as before
                pipe.wait_idle(SEND_TIMEOUT_S + 2)
        pipe.wait_idle(SEND_TIMEOUT_S + 2)
        for producer in pipe.expire(float("inf")):
            drop(producer)
        if state["producer"] is not None:
            self._release_producer(process, state["producer"])

    @staticmethod
    def _discard(producer: Producer) -> None:
        threading.Thread(target=lambda: _quiet(lambda: producer.close(timeout=1)),
                         daemon=True).start()
        return None

    def _consumer(self, process: int) -> None:
        h = self.history
        positions: dict[str, int] = {}
        consumer = None
        while not self.stop_flag.is_set():
            if consumer is None:
                op = h.invoke(process, "assign", {"keys": self.keys})
                try:
                    consumer = Consumer(self.cluster.bootstrap, **self.cluster.client_options, auto_offset_reset="earliest",
                                        request_timeout_ms=3000, fetch_max_wait_ms=200,
                                        **self.consumer_options)
                    tps = [TopicPartition(*split_key(k)) for k in self.keys]
                    consumer.assign(tps)
                    for k, pos in positions.items():
                        consumer.seek(TopicPartition(*split_key(k)), pos)
                    h.ok(op, {"keys": self.keys, "positions": dict(positions)})
                except Exception as e:
                    consumer = self._give_up_consumer(op, e, consumer)
                    continue
            op = h.invoke(process, "poll", None)
            try:
                recs = consumer.poll(timeout_ms=300, max_records=200)
            except Exception as e:
                h.info(op, None, error=repr(e))
                _quiet(consumer.close)
                consumer = None
                continue
            out: dict = {}
            for r in recs:
                out.setdefault(key_of(r.topic, r.partition), []).append([r.offset, int(r.value)])
            for k, rs in out.items():
                positions[k] = rs[-1][0] + 1
            h.ok(op, out)
            self.stop_flag.wait(self.rnd.random() * 0.05)
        if consumer is not None:
            _quiet(consumer.close)


def _coordinator_of(consumer: Consumer) -> int | None:
    """The node that answers for the consumer's group (diagnostics)."""
    meta = consumer.group_metadata()
    return None if meta is None else meta.coordinator_id


def _quiet(fn):
    try:
        fn()
    except Exception:
        pass


# ----------------------------------------------------------------------------- idempotent

#: Sender processes per shared idempotent producer.
SENDERS_PER_PRODUCER = 2


class _SharedProducer:
    """One producer used by several sender processes; replaced when one of them finds
    it broken (the others then get the new one)."""

    def __init__(self, make):
        self.make = make
        self.lock = threading.Lock()
        self.producer: Producer | None = None

    def get(self) -> Producer:
        with self.lock:
            if self.producer is None:
                self.producer = self.make()
            return self.producer

    def drop(self, producer: Producer) -> bool:
        """Forget ``producer`` if it is still the current one; True if it was."""
        with self.lock:
            if self.producer is not producer:
                return False
            self.producer = None
            return True


class IdempotentWorkload(QueueWorkload):
    """Queue with idempotent producers shared by two senders each: exactly once."""

    name = "idempotent"

    def setup(self) -> None:
        n = max(1, -(-self.args.senders // SENDERS_PER_PRODUCER))
        self.shared = [_SharedProducer(self._producer) for _ in range(n)]
        super().setup()

    def _producer(self) -> Producer:
        # short request timeouts: a paused or killed leader makes the producer retry
        # batches (same producer id, epoch and sequence numbers) well within the
        # delivery timeout; several batches in flight per connection
        return Producer(self.cluster.bootstrap, **self.cluster.client_options, acks="all", enable_idempotence=True,
                        linger_ms=2, request_timeout_ms=1500,
                        delivery_timeout_ms=int(SEND_TIMEOUT_S * 1000), retry_backoff_ms=50,
                        max_in_flight_requests_per_connection=5, max_block_ms=2000)

    def _acquire_producer(self, process: int) -> Producer:
        return self.shared[process // SENDERS_PER_PRODUCER].get()

    def _release_producer(self, process: int, producer: Producer) -> None:
        if self.shared[process // SENDERS_PER_PRODUCER].drop(producer):
            self._discard(producer)

    def _broken(self, e: BaseException) -> bool:
        # a batch that fails for good makes the producer take a new id by itself; only
        # replace it when it looks wedged (closed, or an unexpected error)
        return not isinstance(e, (ApiError, ClientError))

    def stop(self) -> None:
        super().stop()
        for slot in self.shared:
            p = slot.producer
            if p is not None and slot.drop(p):
                _quiet(lambda p=p: p.close(timeout=5))


# ----------------------------------------------------------------------------- groups

GROUP_PREFIX = "jg-"
#: Twice a second the observer reads every group's committed offsets.
OBSERVE_INTERVAL_S = 0.5
#: After the senders stop, how long the groups get to commit the end of every partition.
DRAIN_TIMEOUT_S = 30.0


class _Listener(ConsumerRebalanceListener):
    def __init__(self, changes: list):
        self.changes = changes

    def on_assigned(self, partitions):
        self.changes.append(("assigned", sorted(key_of(tp.topic, tp.partition)
                                                for tp in partitions)))

    def on_revoked(self, partitions):
        self.changes.append(("revoked", sorted(key_of(tp.topic, tp.partition)
                                               for tp in partitions)))

    def on_lost(self, partitions):
        self.changes.append(("lost", sorted(key_of(tp.topic, tp.partition)
                                            for tp in partitions)))


class GroupsWorkload(QueueWorkload):
    """Queue senders; consumer-group members process the records and commit."""

    name = "groups"
    node_config = {
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 500,
        "offsets.topic.num.partitions": 3,
    }

    def setup(self) -> None:
        a = self.args
        self._create_queue_topic()
        self._add_senders()
        self.groups = [f"{GROUP_PREFIX}{g}" for g in range(a.groups)]
        self.draining = threading.Event()
        self.drained: dict = {}
        self.member_threads = []
        for g, group in enumerate(self.groups):
            auto = g % 2 == 0  # even groups auto-commit, odd ones commit by hand
            for j in range(a.consumers):
                seed = self.rnd.random()
                t = threading.Thread(target=self._member,
                                     args=(200 + 100 * g + j, group, auto, seed),
                                     name=f"jepsen-member-{g}-{j}", daemon=True)
                self.member_threads.append(t)
                self.threads.append(t)
        self.observer_stop = threading.Event()
        self.observer_thread = threading.Thread(target=self._observer, name="jepsen-offsets",
                                                daemon=True)
        self.threads.append(self.observer_thread)

    # ------------------------------------------------------------------ members

    def _consumer(self, group: str, auto: bool) -> Consumer:
        return Consumer(self.cluster.bootstrap, **self.cluster.client_options, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=auto, auto_commit_interval_ms=300,
                        session_timeout_ms=3000, heartbeat_interval_ms=300,
                        max_poll_interval_ms=10_000, request_timeout_ms=3000,
                        fetch_max_wait_ms=200)

    def _member(self, process: int, group: str, auto: bool, seed: float) -> None:
        """One member slot: subscribe, poll (and commit by hand unless ``auto``), close
        and subscribe again when its seeded lifetime ends or it fails."""
        h = self.history
        rnd = random.Random(seed)
        lo, hi = self.args.member_lifetime
        consumer: Consumer | None = None
        expires = float("inf")
        changes: list = []  # rebalance callbacks of the current consumer, for the history
        uncommitted: set = set()  # partitions whose last commit by hand did not succeed
        while not self.stop_flag.is_set():
            if consumer is None:
                changes, uncommitted = [], set()
                op = h.invoke(process, "subscribe", {"group": group, "topic": QUEUE_TOPIC})
                try:
                    consumer = self._consumer(group, auto)
                    consumer.subscribe([QUEUE_TOPIC], listener=_Listener(changes))
                    h.ok(op)
                except Exception as e:
                    consumer = self._give_up_consumer(op, e, consumer)
                    continue
                expires = time.monotonic() + rnd.uniform(lo, hi) if hi > 0 else float("inf")
            if time.monotonic() >= expires and not self.draining.is_set():
                # one time in three, as a crash would: no commit of what was processed
                # since the last one (another member processes it again: at-least-once)
                self._close(process, group, consumer, "lifetime",
                            abort=auto and rnd.random() < 1 / 3)
                consumer = None
                continue
            op = h.invoke(process, "poll", None, group=group)
            try:
                recs = consumer.poll(timeout_ms=200, max_records=200)
            except Exception as e:
                h.info(op, None, group=group, error=repr(e))
                self._close(process, group, consumer, "poll failed")
                consumer = None
                continue
            out: dict = {}
            for r in recs:
                out.setdefault(key_of(r.topic, r.partition), []).append([r.offset, int(r.value)])
            extra = {"changes": changes[:]} if changes else {}
            del changes[:len(extra.get("changes", ()))]
            h.ok(op, out, group=group, **extra)
            if (out or uncommitted) and not auto:
                # (a commit refused by a rebalance is tried again while the partition
                # stays here: its records are not polled again, so nothing else would)
                uncommitted = self._commit(process, group, consumer, set(out) | uncommitted)
        if consumer is not None:
            self._close(process, group, consumer, "end")

    def _commit(self, process: int, group: str, consumer: Consumer, keys: set) -> set:
        """Commit the positions of the partitions ``keys`` (those the poll returned
        records of, and those whose last commit failed; every record returned so far is
        processed: recorded in the history before this commit). Positions, not the
        polled offsets + 1: a partition reassigned meanwhile has the committed offset as
        its position, not what this member read before. Returns the keys still owned
        whose commit did not succeed (tried again after the next poll)."""
        tps = [TopicPartition(*split_key(k)) for k in sorted(keys)]
        try:
            owned = consumer.assignment()
            offsets = {tp: consumer.position(tp) for tp in tps if tp in owned}
        except Exception:
            return set(keys)  # the assignment changed meanwhile; the next poll commits
        if not offsets:
            return set()
        committed = {key_of(tp.topic, tp.partition): o for tp, o in sorted(offsets.items())}
        op = self.history.invoke(process, "commit", {"group": group, "offsets": committed})
        try:
            consumer.commit(offsets)
            self.history.ok(op)
            return set()
        except CommitFailedError as e:
            self.history.fail(op, error=repr(e))
        except Exception as e:
            self.history.info(op, error=repr(e))
        return set(committed)

    def _close(self, process: int, group: str, consumer: Consumer, why: str,
               abort: bool = False) -> None:
        op = self.history.invoke(process, "close", {"group": group, "why": why,
                                                    "commit": not abort})
        try:
            if abort:
                consumer.enable_auto_commit = False  # close() then commits nothing
            consumer.close()
            self.history.ok(op)
        except Exception as e:
            self.history.info(op, error=repr(e))

    # ------------------------------------------------------------------ committed offsets

    def observe(self, process: str = "offsets", tries: int = 1) -> dict:
        """Read every group's committed offsets from outside the group (a consumer with
        the group id that never joins); one ``committed`` op per group. Returns
        {group: {key: offset or None}} of the reads that succeeded."""
        out: dict = {}
        for group in self.groups:
            for attempt in range(tries):
                op = self.history.invoke(process, "committed", {"group": group})
                c = None
                try:
                    c = Consumer(self.cluster.bootstrap, **self.cluster.client_options, group_id=group,
                                 enable_auto_commit=False, request_timeout_ms=3000)
                    offs = {k: c.committed(TopicPartition(*split_key(k))) for k in self.keys}
                    self.history.ok(op, {"group": group, "offsets": offs},
                                    coordinator=_coordinator_of(c))
                    out[group] = offs
                    break
                except Exception as e:
                    self.history.info(op, None, error=repr(e))
                    if attempt + 1 < tries:
                        time.sleep(1.0)
                finally:
                    if c is not None:
                        _quiet(c.close)
        return out

    def _observer(self) -> None:
        while not self.observer_stop.wait(OBSERVE_INTERVAL_S):
            self.observe()

    def _end_offsets(self) -> dict | None:
        c = None
        try:
            c = Consumer(self.cluster.bootstrap, **self.cluster.client_options, request_timeout_ms=3000)
            tps = [TopicPartition(*split_key(k)) for k in self.keys]
            return {key_of(tp.topic, tp.partition): o for tp, o in c.end_offsets(tps).items()}
        except Exception:
            return None
        finally:
            if c is not None:
                _quiet(c.close)

    def stop(self) -> None:
        """Senders stop; the members go on until every group committed the end of every
        partition (at most DRAIN_TIMEOUT_S), then close; the offsets are read again."""
        self.send_stop.set()
        for t in self.sender_threads:
            t.join(SEND_TIMEOUT_S + 20)
        self.draining.set()
        t0 = time.monotonic()
        deadline = t0 + DRAIN_TIMEOUT_S
        done = False
        ends = None
        while time.monotonic() < deadline and not done:
            ends = self._end_offsets()
            if ends is not None:
                seen = self.observe("drain")
                done = len(seen) == len(self.groups) and all(
                    (seen[g].get(k) or 0) >= o for g in self.groups for k, o in ends.items())
            if not done:
                time.sleep(0.5)
        self.drained = {"complete": done, "seconds": round(time.monotonic() - t0, 1),
                        "end_offsets": ends}
        if done:
            self.log(f"groups drained in {self.drained['seconds']}s")
        else:
            msg = (f"the groups did not commit the end of every partition within "
                   f"{DRAIN_TIMEOUT_S:g}s after the senders stopped (end offsets {ends})")
            self.log("WARNING: " + msg)
            self.warnings.append(msg)
        self.stop_flag.set()
        for t in self.member_threads:
            t.join(SEND_TIMEOUT_S + 20)
        self.observer_stop.set()
        self.observer_thread.join(SEND_TIMEOUT_S + 20)
        self.observe("final", tries=5)

    def after_restart(self) -> None:
        self.observe("restarted", tries=10)


# ----------------------------------------------------------------------------- metadata


#: The metadata workload grows topics to at most this many partitions.
MAX_GROW_PARTITIONS = 4


class MetadataWorkload(Workload):
    """Several clients create, delete, grow (CreatePartitions) and describe a few topics;
    linear.check_metadata checks the history is linearizable per topic."""

    name = "metadata"

    def setup(self) -> None:
        a = self.args
        self.topics = [f"jm-{i}" for i in range(a.topics)]
        pacer = Pacer(a.rate, a.senders)
        for i in range(a.senders):
            self.threads.append(threading.Thread(target=self._worker, args=(i, pacer),
                                                 name=f"jepsen-meta-{i}", daemon=True))
        # probe the replication factor once
        with Admin(self.cluster.bootstrap, **self.cluster.client_options, request_timeout_ms=10_000) as admin:
            self.create_topic(admin, "jm-probe", 1)

    def _worker(self, process: int, pacer: Pacer) -> None:
        h = self.history
        rnd = random.Random(self.rnd.random())
        admin = None
        last = time.monotonic()
        while not self.stop_flag.is_set():
            last = pacer.wait(self.stop_flag, last)
            if self.stop_flag.is_set():
                break
            if admin is None:
                admin = Admin(self.cluster.bootstrap, **self.cluster.client_options, request_timeout_ms=5000)
            topic = rnd.choice(self.topics)
            f = rnd.choice(["create", "create", "delete", "grow", "describe", "describe"])
            value = {"topic": topic}
            if f == "grow":  # CreatePartitions to a count of at most MAX_GROW_PARTITIONS
                value["count"] = rnd.randint(2, MAX_GROW_PARTITIONS)
            op = h.invoke(process, f, value)
            try:
                if f == "grow":
                    try:
                        admin.create_partitions(topic, value["count"])
                    except ApiError as e:
                        if e.code != ErrorCode.INVALID_PARTITIONS:
                            raise
                        h.fail(op, error="partitions", message=str(e))  # has as many already
                    else:
                        h.ok(op)
                elif f == "create":
                    admin.create_topic(topic, partitions=1,
                                       replication_factor=self.replication_factor)
                    h.ok(op)
                elif f == "delete":
                    admin.delete_topic(topic)
                    h.ok(op)
                else:
                    try:
                        d = admin.describe_topic(topic)
                        h.ok(op, {"topic": topic, "exists": True,
                                  "partitions": len(d.partitions)})
                    except UnknownTopicOrPartitionError:
                        h.ok(op, {"topic": topic, "exists": False})
            except TopicAlreadyExistsError as e:
                h.fail(op, error="exists", message=str(e))
            except UnknownTopicOrPartitionError as e:
                h.fail(op, error="unknown", message=str(e))
            except Exception as e:
                h.info(op, error=repr(e))
                _quiet(admin.close)
                admin = None
        if admin is not None:
            _quiet(admin.close)


# ----------------------------------------------------------------------------- txn

#: The txn workload's topics (each of ``--partitions`` partitions; a key is topic-partition).
TXN_TOPICS = ("jtxn-a", "jtxn-b")
#: transaction_timeout_ms of the workload's producers: a transaction left open by a
#: producer the workload gave up on is aborted by its coordinator within this (well
#: before the final read gives up on the partition's last stable offset).
TXN_TIMEOUT_MS = 10_000
#: Share of the transactions the workload commits (the rest it aborts by choice).
TXN_COMMIT_SHARE = 0.7
#: Share of the transactions that also send to one partition they never added
#: (AddPartitionsToTxn skipped: the client believes it was added) -- KIP-890's case of
#: a client whose produce reaches a partition outside its ongoing transaction (a TV1
#: client's delayed send, or a buggy one). Leaders must refuse it (INVALID_TXN_STATE,
#: nothing written: the transaction then aborts); a leader that appends it leaves a
#: batch no marker will close, which the checker sees as committed writes never read
#: (planted bug ``bug-skip-txn-verification``).
TXN_UNADDED_SHARE = 0.05


def _send_unadded(producer: Producer, topic: str, partition: int) -> None:
    """Make ``producer``'s next send to ``topic``/``partition`` skip AddPartitionsToTxn
    (a fault the harness injects; see TXN_UNADDED_SHARE)."""
    txn = producer._txn
    with txn._lock:
        txn.partitions.add((topic, partition))


#: The partitions of the transaction coordinators' log in the workload's node config
#: (``transaction.state.log.num.partitions``).
TXN_STATE_PARTITIONS = 3


#: Read-process-write processes commit their input offsets for group PREFIX<process>.
TXN_GROUP_PREFIX = "jtxn-rw-"


class _RW:
    """A read-process-write process's consumer side."""

    def __init__(self, group: str):
        self.group = group
        self.consumer: Consumer | None = None
        self.tps: list = []
        #: {key: position} the last committed transaction left (where an abort rewinds to)
        self.committed: dict = {}
        #: the next transaction starts a session (positions recorded)
        self.new_session = True


class TxnWorkload(QueueWorkload):
    """Transactional producers and read_committed consumers (jepsen/txn_checker.py).

    Every sender process has its own transactional producer (transactional id
    ``jtxn-<process>``); each operation (``txn``) is one transaction of sends of unique
    integers to 2-4 partitions of the topics TXN_TOPICS, committed (TXN_COMMIT_SHARE)
    or aborted at random. Outcome: ``ok`` when commit_transaction returned, ``fail``
    when abort_transaction returned (by choice, or after a TransactionAbortableError
    or a send refused), ``info`` otherwise (the commit or the abort did not answer, or
    the producer was fenced): then the producer is closed and a new one with the same
    transactional id calls init_transactions, which fences the old one and finishes its
    transaction. The consumer processes poll every partition read_committed, as queue's
    (``assign`` ops with their positions); the runner's final read is read_committed too.
    """

    name = "txn"
    topic = None
    consumer_options = {"isolation_level": "read_committed"}
    node_config = {
        "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    }

    def setup(self) -> None:
        a = self.args
        deadline = time.monotonic() + 60
        while True:
            try:
                with Admin(self.cluster.bootstrap, **self.cluster.client_options,
                           request_timeout_ms=10_000) as admin:
                    for t in TXN_TOPICS:
                        self.create_topic(admin, t, a.partitions)
                break
            except (ApiError, ClientError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.keys = [key_of(t, p) for t in TXN_TOPICS for p in range(a.partitions)]
        for t in TXN_TOPICS:
            self._wait_leaders(t, a.partitions)
        # the transaction coordinators exist before the first fault (asking for the ids'
        # coordinators creates their log), so a coordinator target always finds one
        with Admin(self.cluster.bootstrap, **self.cluster.client_options,
                   request_timeout_ms=10_000) as admin:
            admin.describe_transactions([f"jtxn-{i}" for i in range(a.senders)])
        self._wait_leaders(TRANSACTION_STATE_TOPIC, TXN_STATE_PARTITIONS)
        self.values = iter(range(1, 1 << 62))
        self.values_lock = threading.Lock()
        pacer = Pacer(a.rate, a.senders)
        self.sender_threads = []
        for i in range(a.senders):
            t = threading.Thread(target=self._txn_worker, args=(i, pacer),
                                 name=f"jepsen-txn-{i}", daemon=True)
            self.sender_threads.append(t)
            self.threads.append(t)
        for j in range(a.consumers):
            self.threads.append(threading.Thread(target=self._consumer, args=(100 + j,),
                                                 name=f"jepsen-poll-{j}", daemon=True))

    def coordinator_partitions(self) -> list[int]:
        """The ``__transaction_state`` partition of each sender's transactional id (one
        entry per id: a partition holding two ids is named twice), for the nemesis's
        ``coordinator`` targets."""
        return [txn_partition_for(f"jtxn-{i}", TXN_STATE_PARTITIONS)
                for i in range(self.args.senders)]

    def _txn_producer(self, process: int) -> Producer:
        p = Producer(self.cluster.bootstrap, **self.cluster.client_options,
                     transactional_id=f"jtxn-{process}", transaction_timeout_ms=TXN_TIMEOUT_MS,
                     linger_ms=0, request_timeout_ms=3000, delivery_timeout_ms=8000,
                     retry_backoff_ms=100, max_block_ms=5000)
        try:
            p.init_transactions()
        except BaseException:
            self._discard(p)
            raise
        return p

    def _txn_worker(self, process: int, pacer: Pacer) -> None:
        h = self.history
        rnd = random.Random(self.rnd.random())
        # odd processes read-process-write (when there are two or more)
        rw = _RW(f"{TXN_GROUP_PREFIX}{process}") if process % 2 == 1 else None
        producer = None
        last = time.monotonic()
        while not self.send_stop.is_set():
            last = pacer.wait(self.send_stop, last)
            if self.send_stop.is_set():
                break
            if producer is None:
                op = h.invoke(process, "init", {"transactional_id": f"jtxn-{process}"})
                try:
                    producer = self._txn_producer(process)
                    h.ok(op)
                except Exception as e:
                    h.info(op, error=repr(e))
                    self.send_stop.wait(0.5)
                    continue
            if rw is not None and rw.consumer is None:
                try:
                    self._rw_consumer(rw)
                except Exception as e:
                    self.log(f"txn {process}: cannot set up its consumer: {e!r}")
                    self.send_stop.wait(0.5)
                    continue
            # a read-process-write transaction writes to the second topic only (its
            # input is the first one's partitions)
            out = [k for k in self.keys if rw is None or not k.startswith(TXN_TOPICS[0] + "-")]
            keys = rnd.sample(out, rnd.randint(min(2, len(out)), min(4, len(out))))
            sends = [[k, self._next_value()] for k in keys for _ in range(rnd.randint(1, 2))]
            commit = rnd.random() < TXN_COMMIT_SHARE
            unadded = []
            if rnd.random() < TXN_UNADDED_SHARE:
                rest = [k for k in out if k not in keys]
                if rest:
                    unadded = [rnd.choice(rest)]
                    sends.append([unadded[0], self._next_value()])
            op = h.invoke(process, "txn", {"sends": sends, "poll": rw is not None,
                                           "commit": commit, "unadded": unadded})
            if not self._transaction(producer, op, sends, commit, rw, unadded):
                self._discard(producer)
                producer = None
                if rw is not None and rw.consumer is not None:
                    _quiet(rw.consumer.close)
                    rw.consumer = None
        if producer is not None:
            _quiet(lambda: producer.close(timeout=5))
        if rw is not None and rw.consumer is not None:
            _quiet(rw.consumer.close)

    def _rw_consumer(self, rw: _RW) -> None:
        """A read_committed consumer of the input partitions for ``rw``'s group
        (assigned, no membership), at the group's committed offsets (earliest when
        none): a new session."""
        c = Consumer(self.cluster.bootstrap, **self.cluster.client_options,
                     group_id=rw.group, enable_auto_commit=False,
                     auto_offset_reset="earliest", isolation_level="read_committed",
                     request_timeout_ms=3000, fetch_max_wait_ms=100)
        try:
            tps = [TopicPartition(*split_key(k)) for k in self.keys
                   if k.startswith(TXN_TOPICS[0] + "-")]
            c.assign(tps)
            for tp in tps:
                o = c.committed(tp)
                if o is not None:
                    c.seek(tp, o)
            rw.committed = {key_of(tp.topic, tp.partition): c.position(tp) for tp in tps}
        except BaseException:
            _quiet(c.close)
            raise
        rw.consumer, rw.tps, rw.new_session = c, tps, True

    def _transaction(self, producer: Producer, op: dict, sends: list, commit: bool,
                     rw: _RW | None = None, unadded: tuple | list = ()) -> bool:
        """One transaction; completes ``op``. Returns whether ``producer`` is still
        usable (False: replace it, its last transaction's outcome is unknown). With
        ``rw``: first a poll of the input partitions, and their positions committed
        with the transaction (send_offsets_to_transaction); the consumer is rewound to
        the last committed positions when the transaction does not commit."""
        h = self.history
        futs: list = []
        state: dict = {"commit_time": None, "polls": {}, "offsets": {}, "positions": None}

        def value(**extra) -> dict:
            out = []
            for i, (k, v) in enumerate(sends):
                o = None
                if i < len(futs) and futs[i].done():
                    try:
                        o = futs[i].result(timeout=0).offset
                    except Exception:
                        o = None
                out.append([k, v, o])
            d = {"sends": out, "polls": state["polls"], "offsets": state["offsets"],
                 "group": rw.group if rw is not None else None, **extra}
            if state["commit_time"] is not None:
                d["commit_time"] = state["commit_time"]
            if state["positions"] is not None:
                d["positions"] = state["positions"]
            return d

        def rewind() -> None:
            if rw is None or rw.consumer is None:
                return
            try:
                for tp in rw.tps:
                    rw.consumer.seek(tp, rw.committed[key_of(tp.topic, tp.partition)])
                rw.new_session = True
            except Exception:
                _quiet(rw.consumer.close)
                rw.consumer = None

        try:
            producer.begin_transaction()
        except Exception as e:  # nothing was sent
            h.fail(op, value(), error=repr(e))
            return False
        try:
            if rw is not None:
                c = rw.consumer
                if rw.new_session:
                    state["positions"] = {key_of(tp.topic, tp.partition): c.position(tp)
                                          for tp in rw.tps}
                    rw.new_session = False
                for r in c.poll(timeout_ms=100, max_records=20):
                    state["polls"].setdefault(key_of(r.topic, r.partition), []).append(
                        [r.offset, int(r.value)])
                state["offsets"] = {key_of(tp.topic, tp.partition): c.position(tp)
                                    for tp in rw.tps}
            for k in unadded:
                _send_unadded(producer, *split_key(k))
            for k, v in sends:
                topic, partition = split_key(k)
                futs.append(producer.send(topic, str(v).encode(), partition=partition))
            if rw is not None:
                producer.send_offsets_to_transaction(
                    {TopicPartition(*split_key(k)): o for k, o in state["offsets"].items()},
                    rw.consumer.group_metadata())
            if commit:
                state["commit_time"] = h.now()
                producer.commit_transaction()
                h.ok(op, value())
                if rw is not None:
                    rw.committed = dict(state["offsets"])
            else:
                producer.abort_transaction()
                h.fail(op, value(), error="aborted by the workload")
                rewind()
            return True
        except ProducerFencedError as e:
            h.info(op, value(), error=repr(e))
            return False
        except Exception as e:
            if state["commit_time"] is not None and not isinstance(e, TransactionAbortableError):
                h.info(op, value(), error=repr(e))  # the commit may have gone through
                return False
            first = e
        try:  # a send refused, or the commit refused as abortable: abort
            producer.abort_transaction()
            h.fail(op, value(), error=repr(first))
            rewind()
            return True
        except Exception as e:  # never asked to commit if not abortable; still unknown here
            h.info(op, value(), error=f"{first!r}; then the abort: {e!r}")
            return False

    def after_restart(self) -> None:
        """A sentinel, written last to every partition outside transactions (value
        -1 - its index, acks=all): the final read_committed read of a key is complete
        once it returned its sentinel (it stops at the last stable offset, so it also
        waits for every transaction before it to be decided). ``self.sentinels``:
        {key: the sentinel's offset}; a key whose sentinel could not be written is
        read to its high watermark."""
        self.sentinels = {}
        deadline = time.monotonic() + 60
        p = None
        try:
            p = Producer(self.cluster.bootstrap, **self.cluster.client_options, acks="all",
                         request_timeout_ms=3000, delivery_timeout_ms=10_000,
                         max_block_ms=5000)
            for i, key in enumerate(self.keys):
                topic, partition = split_key(key)
                while key not in self.sentinels and time.monotonic() < deadline:
                    try:
                        md = p.send(topic, str(-1 - i).encode(), partition=partition).result(
                            timeout=15)
                        self.sentinels[key] = md.offset
                    except Exception as e:
                        self.log(f"sentinel of {key}: {e!r}; again")
                        time.sleep(0.5)
        except Exception as e:
            self.log(f"sentinels: {e!r}")
        finally:
            if p is not None:
                _quiet(lambda: p.close(timeout=5))
        missing = sorted(set(self.keys) - set(self.sentinels))
        if missing:
            msg = f"no sentinel written to {missing}: their final reads go to the high watermark"
            self.log("WARNING: " + msg)
            self.warnings.append(msg)

    def strip_final(self, final: dict) -> dict:
        return {k: [[o, v] for o, v in recs if v >= 0] for k, recs in final.items()}


def make(name: str, *a, **kw) -> Workload:
    if name == "queue":
        return QueueWorkload(*a, **kw)
    if name == "metadata":
        return MetadataWorkload(*a, **kw)
    if name == "idempotent":
        return IdempotentWorkload(*a, **kw)
    if name == "groups":
        return GroupsWorkload(*a, **kw)
    if name == "txn":
        return TxnWorkload(*a, **kw)
    raise ValueError(f"unknown workload {name!r}")
