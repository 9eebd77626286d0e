"""Client workers: each a thread with its own process id and its own clients.

queue: sender processes send unique integers (``acks="all"``) to the partitions of one
topic, one record per operation; consumer processes ``assign`` every partition and poll.
A consumer that hits an error is replaced by a fresh one that continues from its last
position (recorded as an ``assign`` op), as a restarted Kafka consumer would from its
committed offsets.

metadata: processes create, delete and describe a few topic names at random.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout

from raftlog.client import (
    Admin,
    ApiError,
    ClientError,
    Consumer,
    Producer,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)

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


class Workload:
    name = "?"

    def __init__(self, cluster, history, args, rnd: random.Random, log=print):
        self.cluster = cluster
        self.history = history
        self.args = args
        self.rnd = rnd
        self.log = log
        self.stop_flag = threading.Event()
        self.threads: list[threading.Thread] = []
        self.keys: list[str] = []
        self.replication_factor = args.replication_factor
        self.warnings: list[str] = []

    def setup(self) -> None: ...

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(SEND_TIMEOUT_S + 20)

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

    def setup(self) -> None:
        a = self.args
        deadline = time.monotonic() + 60
        while True:
            try:
                with Admin(self.cluster.bootstrap, request_timeout_ms=10_000) as admin:
                    self.create_topic(admin, QUEUE_TOPIC, a.partitions,
                                      {"segment.bytes": a.segment_bytes} if a.segment_bytes
                                      else None)
                break
            except (ApiError, ClientError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.keys = [key_of(QUEUE_TOPIC, p) for p in range(a.partitions)]
        self._wait_leaders(QUEUE_TOPIC, a.partitions)
        self.values = iter(range(1, 1 << 62))
        self.values_lock = threading.Lock()
        pacer = Pacer(a.rate * (1 - a.poll_fraction), a.senders)
        for i in range(a.senders):
            self.threads.append(threading.Thread(target=self._sender, args=(i, pacer),
                                                 name=f"jepsen-send-{i}", daemon=True))
        for j in range(a.consumers):
            self.threads.append(threading.Thread(target=self._consumer, args=(100 + j,),
                                                 name=f"jepsen-poll-{j}", daemon=True))

    def _wait_leaders(self, topic: str, n: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with Admin(self.cluster.bootstrap, request_timeout_ms=3000) as admin:
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
        return Producer(self.cluster.bootstrap, acks="all", linger_ms=0,
                        request_timeout_ms=3000, delivery_timeout_ms=int(SEND_TIMEOUT_S * 1000),
                        retry_backoff_ms=100, max_block_ms=2000)

    def _sender(self, process: int, pacer: Pacer) -> None:
        h = self.history
        producer = None
        last = time.monotonic()
        rnd = random.Random(self.rnd.random())
        while not self.stop_flag.is_set():
            last = pacer.wait(self.stop_flag, last)
            if self.stop_flag.is_set():
                break
            if producer is None:
                try:
                    producer = self._producer()
                except Exception as e:
                    self.log(f"sender {process}: cannot create producer: {e!r}")
                    self.stop_flag.wait(0.5)
                    continue
            key = rnd.choice(self.keys)
            topic, partition = split_key(key)
            v = self._next_value()
            op = h.invoke(process, "send", [key, v])
            try:
                fut = producer.send(topic, str(v).encode(), partition=partition)
            except Exception as e:  # raised before the record was queued: never sent
                h.fail(op, error=repr(e))
                continue
            try:
                md = fut.result(timeout=SEND_TIMEOUT_S + 2)
                h.ok(op, offset=md.offset)
            except (FutureTimeout, TimeoutError) as e:
                h.info(op, error=repr(e) or "timeout")
                producer = self._discard(producer)
            except Exception as e:
                # an earlier attempt of the batch may have been written: indeterminate
                h.info(op, error=repr(e))
                if not (isinstance(e, ApiError) and e.retriable):
                    producer = self._discard(producer)
        if producer is not None:
            self._discard(producer)

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
                    consumer = Consumer(self.cluster.bootstrap, auto_offset_reset="earliest",
                                        request_timeout_ms=3000, fetch_max_wait_ms=200)
                    tps = [TopicPartition(*split_key(k)) for k in self.keys]
                    consumer.assign(tps)
                    for k, pos in positions.items():
                        consumer.seek(TopicPartition(*split_key(k)), pos)
                    h.ok(op, {"keys": self.keys, "positions": dict(positions)})
                except Exception as e:
                    h.fail(op, error=repr(e))
                    if consumer is not None:
                        _quiet(consumer.close)
                    consumer = None
                    self.stop_flag.wait(0.5)
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


def _quiet(fn):
    try:
        fn()
    except Exception:
        pass


# ----------------------------------------------------------------------------- metadata


class MetadataWorkload(Workload):
    name = "metadata"

    def setup(self) -> None:
        a = self.args
        self.topics = [f"jm-{i}" for i in range(a.topics)]
        pacer = Pacer(a.rate, a.senders)
        for i in range(a.senders):
            self.threads.append(threading.Thread(target=self._worker, args=(i, pacer),
                                                 name=f"jepsen-meta-{i}", daemon=True))
        # probe the replication factor once
        with Admin(self.cluster.bootstrap, request_timeout_ms=10_000) as admin:
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
                admin = Admin(self.cluster.bootstrap, request_timeout_ms=5000)
            topic = rnd.choice(self.topics)
            f = rnd.choice(["create", "create", "delete", "describe", "describe"])
            op = h.invoke(process, f, {"topic": topic})
            try:
                if f == "create":
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


def make(name: str, *a, **kw) -> Workload:
    if name == "queue":
        return QueueWorkload(*a, **kw)
    if name == "metadata":
        return MetadataWorkload(*a, **kw)
    if name == "idempotent":
        raise NotAvailable(
            "workload 'idempotent' is not available yet: it needs the idempotent producer "
            "(producer ids and sequence numbers), which this raftlog version does not have; "
            "its checker (checkers.check_exactly_once) is ready")
    if name == "groups":
        raise NotAvailable(
            "workload 'groups' is not available yet: it needs consumer groups "
            "(Consumer.subscribe / commit), which this raftlog version does not have; "
            "its checker (checkers.check_groups) is ready")
    raise ValueError(f"unknown workload {name!r}")
