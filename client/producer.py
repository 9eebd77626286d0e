"""The Producer: per-partition accumulators drained by one background I/O thread.

``send()`` only appends to lists under a lock (encoding happens once per batch in
the I/O thread with one ``encode_batch`` call). A batch is sealed when it reaches
``batch_size`` bytes, or drained once it has waited ``linger_ms`` and its partition
can take another request (until then it keeps growing: see accumulator.py); the
I/O thread groups batches by partition leader into one PRODUCE request per node,
keeps at most ``max_in_flight_requests_per_connection`` requests in flight per node
(with idempotence, also per partition: sequence numbers keep their order, and a
retry re-sends a partition's batches in sequence order), and completes every
record future of a batch in one step.

Bounds: ``buffer_memory`` bytes buffered (send blocks up to ``max_block_ms``),
``retries`` per batch, ``delivery_timeout_ms`` per batch, in-flight window per node.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque

from raftlog import records
from raftlog.errors import STORAGE_ERROR_APPENDED, ApiError, ErrorCode
from raftlog.producer_state import BATCHES_RETAINED, MAX_SEQUENCE
from raftlog.protocol import Api
from raftlog.trace import TraceLog

from .accumulator import (
    ProducerBatch,
    RecordAccumulator,
    select_sendable,
    split_chunks,
)
from .conn import BrokerConnection, Cluster
from .errors import (
    BrokerNotAvailableError,
    DeliveryTimeoutError,
    KafkaStorageError,
    LeaderMovedError,
    UnknownTopicOrPartitionError,
    api_error,
)
from .future import RecordFuture
from .options import check_option_types, check_options
from .partitioner import StickyPartitioner, partition_for_key
from .record_fields import as_bytes, as_bytes_list
from .record_fields import headers as record_headers
from .security import ClientSecurity
from .stale import IO_METADATA_TIMEOUT_S, Recheck, ResponseClock, moved

#: In-flight requests per connection at most with idempotence (what the nodes retain).
MAX_IN_FLIGHT_IDEMPOTENT = BATCHES_RETAINED
#: Batches sent in one PRODUCE request at most.
MAX_BATCHES_PER_REQUEST = 1000
#: Longest I/O-thread sleep while batches wait (window full, partition busy, backoff).
PENDING_POLL_S = 0.005
#: Longest I/O-thread sleep while requests are in flight (to check request timeouts).
IN_FLIGHT_POLL_S = 0.1
#: Retries of a batch the leader answered with KAFKA_STORAGE_ERROR (its disk is full or
#: failing) before its future fails with KafkaStorageError. A few, each after
#: retry_backoff_ms and a metadata refresh, in case leadership moves off that node;
#: then the application learns why at once instead of after delivery_timeout_ms.
STORAGE_ERROR_RETRIES = 3
#: Longest I/O-thread sleep at all: a send() may have sent a request while it slept.
IDLE_POLL_S = 0.1


def _acks(acks) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, "0"):
        return 0
    if acks in (1, "1"):
        return 1
    raise ValueError(f"acks must be 'all', -1, 0 or 1, not {acks!r}")


class Producer:
    """Publishes records to topics. Thread-safe; one background I/O thread.

    Args:
        bootstrap_servers: "host:port[,host:port]".
        acks: "all"/-1 (wait for the in-sync replicas), 1 (leader), 0 (no answer).
        linger_ms: how long a batch may wait for more records before it may be
            sent (default 0: at once); a batch whose partition cannot send yet keeps
            growing regardless, so a fast producer sends bigger batches.
        batch_size: bytes at which a batch is sealed (default 1,000,000, librdkafka's:
            a batch stays under a topic's default max.message.bytes, and five of them
            in flight keep a partition busy while a durable node syncs); a record
            that would take the open batch past it starts the next batch.
        compression_type: None, "lz4", "zstd" or "gzip".
        retries, retry_backoff_ms: retries of retriable errors per batch.
        request_timeout_ms: how long a request may go unanswered.
        delivery_timeout_ms: bound on the whole life of a record, retries included.
        max_in_flight_requests_per_connection: pipelined requests per node (at
            most 5 with idempotence, as Kafka: the nodes remember a producer's last
            5 batches per partition to recognise retries).
        enable_idempotence: None (default) means True with acks="all" and False
            otherwise, as Kafka. The producer takes a producer id (InitProducerId)
            and numbers each partition's batches; the node appends a retried batch
            once (a duplicate is answered with its original offsets) and refuses one
            out of order, so retries neither duplicate nor reorder records. Up to
            max_in_flight_requests_per_connection batches per partition in flight.
            True with acks other than "all" raises ValueError.
        buffer_memory: bytes of unsent records at most; max_block_ms: how long
            send() waits for room before raising BufferFullError.

    Errors: retriable errors are retried (``retries``, ``retry_backoff_ms``) until
    ``delivery_timeout_ms``; then the future fails with DeliveryTimeoutError, whose
    message and ``last_error`` name the last error seen. One exception: a leader
    that cannot write to its disk (KAFKA_STORAGE_ERROR) gets STORAGE_ERROR_RETRIES
    (3) quick retries, then the future fails with KafkaStorageError carrying the
    node's message (``STORAGE_ERROR: no space left on device on node N (data dir
    ...)``): a full disk takes an operator, not a retry loop. Later sends try again.
    Its ``written`` is False when no attempt of the batch was written anywhere (every
    one refused by a failed append), None when unknown.
    """

    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        acks="all",
        linger_ms: float = 0,
        batch_size: int = 1_000_000,
        compression_type: str | None = None,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        max_in_flight_requests_per_connection: int = 5,
        enable_idempotence: bool | None = None,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        client_id: str = "raftlog-producer",
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        trace: int = 0,
        **security_options,
    ):
        """``security_options``: kafka-python's security_protocol, ssl_cafile,
        ssl_certfile, ssl_keyfile, ssl_password, ssl_check_hostname, sasl_mechanism,
        sasl_plain_username, sasl_plain_password (see client/security.py)."""
        check_option_types(Producer, locals())
        check_options(Producer, security_options)  # a misspelt option: named, with the nearest
        self.security = ClientSecurity.from_options(**security_options)
        self.acks = _acks(acks)
        if transactional_id is not None and (enable_idempotence is False or self.acks != -1):
            raise ValueError("a transactional producer is idempotent: transactional_id needs "
                             "acks='all' and enable_idempotence left on")
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1
        if enable_idempotence and self.acks != -1:
            raise ValueError(f"enable_idempotence=True requires acks='all', not acks={acks!r}")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        if enable_idempotence and max_in_flight_requests_per_connection > MAX_IN_FLIGHT_IDEMPOTENT:
            raise ValueError(
                f"max_in_flight_requests_per_connection must be at most "
                f"{MAX_IN_FLIGHT_IDEMPOTENT} with enable_idempotence "
                f"(not {max_in_flight_requests_per_connection}): the nodes remember a "
                f"producer's last {MAX_IN_FLIGHT_IDEMPOTENT} batches per partition")
        self.linger_s = max(linger_ms, 0) / 1000
        self.batch_size = batch_size
        self.compression = records.compression_code(compression_type)
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_in_flight = max_in_flight_requests_per_connection
        self.enable_idempotence = enable_idempotence
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.client_id = client_id
        #: ``trace=N``: the last N hop events (``send``, ``ack``: raftlog/trace.py) of
        #: acknowledged batches, for bench/latency_budget.py; None: off
        self.trace = TraceLog(trace) if trace else None

        self._meta = Cluster(
            bootstrap_servers, self.request_timeout_s, security=self.security
        )  # caller threads (under _meta_lock)
        self._meta_lock = threading.Lock()
        self._partition_counts: dict[str, int] = {}
        # I/O thread only; never blocks it for long: its own loop retries with backoff
        self._io_cluster = Cluster(
            bootstrap_servers, self.request_timeout_s, metadata_attempts=1, unknown_topic_wait_s=0,
            security=self.security,
            metadata_timeout_s=min(self.request_timeout_s, IO_METADATA_TIMEOUT_S),
        )
        self._sticky = StickyPartitioner()
        #: transactions (client/txn.py); None: not a transactional producer
        self._txn = None
        if transactional_id is not None:
            from .txn import TransactionManager

            self._txn = TransactionManager(
                transactional_id, transaction_timeout_ms,
                lambda: list(self._meta.brokers.values()) + list(self._meta.bootstrap),
                self.security, self.request_timeout_s, self.retry_backoff_s, self.max_block_s)
        #: the first error of a send of the ongoing transaction (it must abort)
        self._txn_error: BaseException | None = None

        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._acc = RecordAccumulator(
            batch_size=batch_size,
            linger_s=self.linger_s,
            buffer_memory=buffer_memory,
            max_block_s=self.max_block_s,
            delivery_timeout_s=self.delivery_timeout_s,
            on_seal=self._on_seal,
            wake=self._wake,
        )
        self._closed = False
        self._io = _ProducerIO(self)
        # Whoever holds _io_lock drives the I/O state: the I/O thread, or (linger_ms=0)
        # a caller of send() that finds it free and sends its record at once, saving a
        # thread hand-off (~0.1 ms on 2 busy cores) on the latency path.
        self._io_lock = threading.Lock()
        self._direct = self.linger_s == 0
        self._thread = threading.Thread(target=self._run, name="raftlog-producer-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers=None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record; returns a future whose result is a RecordMetadata.

        Durable when the future completes (per ``acks``). Raises ProducerClosedError,
        BufferFullError, or the topic's metadata error (unknown topic) at once, and
        TypeError for a key or value that is not bytes, str (UTF-8) or None, or headers
        that are not ``(str, bytes | str | None)`` pairs or a dict.
        """
        if type(value) is not bytes and value is not None:  # (bytes: one test)
            value = as_bytes(value, "Producer.send: value")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "Producer.send: key")
        if headers:
            headers = record_headers(headers, "Producer.send: headers")
        if partition is None:
            n = self._partition_counts.get(topic) or self._num_partitions(topic)
            partition = (
                self._sticky.partition(topic, n) if key is None else partition_for_key(key, n)
            )
        elif not 0 <= partition < (self._partition_counts.get(topic) or 0):
            self._check_partition(topic, partition)
        if self._txn is not None:
            self._txn_add(topic, partition)
        if not self._direct:
            return self._acc.append(topic, partition, value, key, headers, timestamp_ms)
        fut = self._acc.append(topic, partition, value, key, headers, timestamp_ms, wake=False)
        if fut._index:
            # It joined an open batch: that batch could not be drained when it began
            # (its partition's window was full), and the answer that frees the window
            # wakes the I/O thread, which drains it then. Nothing to do here.
            return fut
        if self._io_lock.acquire(blocking=False):
            try:
                self._io.send_ready()
            finally:
                self._io_lock.release()
        else:
            self._acc.wake_io()
        return fut

    def send_many(
        self,
        topic: str,
        values: list,
        keys: list | None = None,
        partition: int | None = None,
        headers: list | None = None,
        timestamp_ms: int | None = None,
    ):
        """Bulk path: the records go out as consecutive records of one batch (encoded
        with one call); when they fit in the partition's open batch (and
        ``timestamp_ms`` is not given) they join it, as send()'s records do, so many
        small calls make full batches, not one small batch each.

        Returns one BatchFuture (result: BatchMetadata with ``.offsets``). When
        ``keys`` are given without ``partition`` the records are spread by key, and
        when they exceed ``batch_size`` they are split: then a list of BatchFutures.
        """
        values = as_bytes_list(list(values), "Producer.send_many: values")
        if not values:
            return []
        if keys is not None:
            keys = as_bytes_list(list(keys), "Producer.send_many: keys")
            if len(keys) != len(values):
                raise ValueError(f"Producer.send_many: {len(keys)} keys for {len(values)} "
                                 "values (one key per value, None for none)")
        if headers is not None:
            headers = list(headers)
            if len(headers) != len(values):
                raise ValueError(f"Producer.send_many: {len(headers)} header lists for "
                                 f"{len(values)} values (one per value, None for none)")
            headers = [record_headers(h, f"Producer.send_many: headers[{i}]")
                       for i, h in enumerate(headers)]
        if partition is None and keys is not None:
            return self._send_many_by_key(topic, values, keys, headers, timestamp_ms)
        if partition is None:
            n = self._partition_counts.get(topic) or self._num_partitions(topic)
            partition = self._sticky.partition(topic, n)
        elif not 0 <= partition < (self._partition_counts.get(topic) or 0):
            self._check_partition(topic, partition)
        if self._txn is not None:
            self._txn_add(topic, partition)
        try:
            bounds = split_chunks(values, keys, self.batch_size)
        except TypeError:  # (an item with no length: each one looked at, named)
            values = as_bytes_list(values, "Producer.send_many: values", every=True)
            bounds = split_chunks(values, keys, self.batch_size)
        futures = [
            self._acc.append_batch(
                topic,
                partition,
                values[start:end],
                keys[start:end] if keys else None,
                headers[start:end] if headers else None,
                timestamp_ms,
                size,
            )
            for start, end, size in bounds
        ]
        return futures[0] if len(futures) == 1 else futures

    # ------------------------------------------------------------------ transactions

    def _transactions(self):
        if self._txn is None:
            raise ValueError("not a transactional producer: pass transactional_id=...")
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: a producer id and a
        new epoch that fences every earlier instance (whose open transaction is
        aborted first). Call once, before the first transaction."""
        txn = self._transactions()
        txn.check("uninitialized", "ready")
        pid, epoch = txn.init()
        self._set_producer(pid, epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: the sends until commit_transaction() or
        abort_transaction() are its records."""
        txn = self._transactions()
        txn.check("ready")
        txn.state = "in_transaction"
        self._txn_error = None

    def send_offsets_to_transaction(self, offsets, group_metadata) -> None:
        """Commit a consumer group's positions as part of the transaction (a
        read-process-write loop: the outputs and the inputs' offsets commit or abort
        together). ``offsets``: {(topic, partition): next offset to read} or
        [(topic, partition, offset), ...], as ``consumer.position``s;
        ``group_metadata``: ``consumer.group_metadata()``."""
        txn = self._transactions()
        txn.check("in_transaction")
        if group_metadata is None:
            raise ValueError("group_metadata is None: the consumer needs a group_id")
        if isinstance(offsets, dict):
            rows = [(getattr(tp, "topic", None) or tp[0],
                     tp.partition if hasattr(tp, "partition") else tp[1], int(o))
                    for tp, o in offsets.items()]
        else:
            rows = [(t, p, int(o)) for t, p, o in offsets]
        txn.send_offsets(rows, group_metadata)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it: read_committed
        consumers see all of its records or none. Raises TransactionAbortableError when
        a send failed (abort_transaction(), then retry), ProducerFencedError (fatal)."""
        from .errors import TransactionAbortableError

        txn = self._transactions()
        txn.check("in_transaction")
        try:
            self.flush(timeout)
        except TimeoutError:
            raise TransactionAbortableError("the transaction's records were not all "
                                            "acknowledged in time: abort it") from None
        if self._txn_error is not None:
            txn.check("in_transaction")  # (fenced meanwhile: fatal)
            txn.state = "abortable"
            raise TransactionAbortableError(
                f"a send of the transaction failed ({self._txn_error}): abort it and retry")
        self._set_producer(*txn.end(True))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: its records are never seen by read_committed
        consumers."""
        txn = self._transactions()
        txn.check("in_transaction", "abortable")
        try:
            self.flush(timeout)
        except TimeoutError:
            pass  # (the abort marker closes whatever landed)
        self._set_producer(*txn.end(False))
        self._txn_error = None

    def _set_producer(self, pid: int, epoch: int) -> None:
        """The producer id and epoch the next batches carry (a new epoch starts every
        partition's sequence at 0)."""
        with self._io_lock:
            io = self._io
            io.producer_id, io.producer_epoch = pid, epoch
            io.next_seq.clear()
            io.acked.clear()

    def _txn_add(self, topic: str, partition: int) -> None:
        """A send of the transaction: a new partition is noted for the I/O thread to
        add (client/txn.py), which it is woken to do at once."""
        txn = self._txn
        txn.check("in_transaction")
        if txn.want(topic, partition):
            self._acc.wake_io()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until every record is acknowledged or failed.

        Raises TimeoutError if that takes longer than ``timeout`` seconds."""
        if self._txn is not None:
            self._txn.flushing()
        self._acc.seal_all()
        self._acc.wait_empty(timeout, self._thread.is_alive)

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._num_partitions(topic)))

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the I/O thread and close connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._acc.close()
            self._thread.join(timeout if timeout is not None else 30)
            self._meta.close()
            if self._txn is not None:
                self._txn.close()
            self._wake_r.close()
            self._wake_w.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ partitions

    def _num_partitions(self, topic: str) -> int:
        with self._meta_lock:
            parts = self._meta.partitions_for(topic)
            self._partition_counts[topic] = len(parts)
            return len(parts)

    def _check_partition(self, topic: str, partition: int) -> None:
        """Fail at once (as Kafka's send does) for a partition the topic does not have."""
        n = self._num_partitions(topic)
        if not 0 <= partition < n:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has {n} partitions; {partition} does not exist"
            )

    def _on_seal(self, topic: str, partition: int) -> None:
        """A batch of ``topic`` was sealed: keyless records stick to another partition now."""
        n = self._partition_counts.get(topic)
        if n:
            self._sticky.on_new_batch(topic, n, partition)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # the pipe is full (the thread is awake anyway) or closed

    def _send_many_by_key(self, topic, values, keys, headers, timestamp_ms) -> list:
        n = self._partition_counts.get(topic) or self._num_partitions(topic)
        groups: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            p = partition_for_key(k, n) if k is not None else self._sticky.partition(topic, n)
            groups.setdefault(p, []).append(i)
        out = []
        for p, idx in groups.items():
            f = self.send_many(
                topic,
                [values[i] for i in idx],
                [keys[i] for i in idx],
                p,
                [headers[i] for i in idx] if headers else None,
                timestamp_ms,
            )
            out.extend(f if isinstance(f, list) else [f])
        return out

    # ------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        try:
            self._io.loop()
        except BaseException as e:  # never leave futures hanging
            self._io.fail_everything(e)
            raise

    def _complete(
        self, b: ProducerBatch, base_offset: int = -1, error: BaseException | None = None
    ) -> None:
        self._acc.complete(b, base_offset, error)


def next_request(batches: list, limit: int, one_per_partition: bool) -> tuple[list, list]:
    """Split ``batches`` (for one node) into the next request's and the rest. Pure.

    With ``one_per_partition`` (idempotence: in-order sends) a request carries at most
    one batch of each partition, as Kafka's producer does. There a partition's window
    is counted in batches, so a send_many that splits into as many batches as the
    window (five) went out as one request, and nothing more could go until its answer:
    the node's append, sync and answer and the producer's encoding of the next batches
    took turns. One batch a request lets them overlap (the next batch is on the wire
    while the node appends the last). Without idempotence the window is the
    connection's requests, and a request carries up to ``limit`` batches in order.
    """
    if not one_per_partition:
        return batches[:limit], batches[limit:]
    seen, chunk, rest = set(), [], []
    for b in batches:
        key = (b.topic, b.partition)
        if key in seen or len(chunk) >= limit:
            rest.append(b)
        else:
            seen.add(key)
            chunk.append(b)
    return chunk, rest


class _ProducerIO:
    """The I/O thread's state: ready batches per node, in-flight requests."""

    def __init__(self, producer: Producer):
        self.p = producer
        self.cluster = producer._io_cluster
        self.sel = selectors.DefaultSelector()
        self.sel.register(producer._wake_r, selectors.EVENT_READ, None)
        self.pending: deque[ProducerBatch] = deque()
        self.in_flight: dict[BrokerConnection, deque] = {}
        #: In-order mode (enable_idempotence): batches in flight per partition.
        self.in_order = producer.enable_idempotence
        self.in_flight_parts: dict[tuple[str, int], int] = {}
        #: Idempotence: this producer's id and epoch (InitProducerId), and the next
        #: sequence number per partition. A batch that fails for good leaves a gap,
        #: so the producer takes a new id (sequences restart at 0) before sending more.
        self.producer_id = records.NO_PRODUCER_ID
        self.producer_epoch = records.NO_PRODUCER_EPOCH
        self.next_seq: dict[tuple[str, int], int] = {}
        #: Partitions where a batch of the current producer id was acknowledged. Until
        #: then a partition gets one batch in flight: a node that does not know the
        #: producer yet accepts any first sequence (as Kafka's, so state lost to
        #: retention is no error), so a second batch must not overtake a failed first.
        self.acked: set[tuple[str, int]] = set()
        self._pid_retry_at = 0.0
        self.txn = producer._txn
        self.txn_id = producer._txn.transactional_id if producer._txn is not None else None
        #: A request unanswered far longer than usual: look whether its partitions moved
        #: (client/stale.py), every retry_backoff_ms while it waits.
        self.clock = ResponseClock(cap_s=self.p.request_timeout_s / 2)
        self.recheck = Recheck(max(self.p.retry_backoff_s, 0.01))
        self._seen_version = self.cluster.version
        #: Produce requests sent (each retry counts): what a transaction costs in round
        #: trips (bench/transactions.py --phases)
        self.produce_requests = 0

    def loop(self) -> None:
        lock = self.p._io_lock
        while True:
            with lock:
                if self.txn is not None and self.txn.add_due(time.monotonic()) == 0:
                    self.txn.add_pending()  # (this thread only: send() never waits on it)
                linger_left = self.send_ready()
                if not self.pending and not self._any_in_flight() and self.p._acc.finished():
                    break
                timeout = self._timeout(time.monotonic(), linger_left)
            events = self.sel.select(timeout)
            with lock:
                self._on_events(events)
        self.cluster.close()

    def send_ready(self) -> float | None:
        """Take sealed (and lingered) batches and send what may go now (holding _io_lock).

        Returns seconds until the next open batch's linger ends (None: no open batch)."""
        batches, linger_left = self.p._acc.drain(time.monotonic(), self._can_send)
        self.pending.extend(batches)
        self._send_pending()
        return linger_left

    def _window(self, key: tuple[str, int]) -> int:
        """Batches of ``key`` allowed in flight at once (idempotence)."""
        return self.p.max_in_flight if key in self.acked else 1

    def _can_send(self, key: tuple[str, int]) -> bool:
        """May the open batch of ``key`` be drained now? Not while a batch of its
        partition waits unsent, nor (idempotence) while the partition's in-flight
        window is full: meanwhile the open batch grows (called under the
        accumulator's lock)."""
        if (self.txn is not None and key not in self.txn.partitions
                and key not in self.txn.refused):
            return False  # (not in the transaction yet: the batch grows meanwhile)
        if self.in_order:
            if self.in_flight_parts.get(key, 0) >= self._window(key):
                return False
        else:  # the window is the leader connection's
            meta = (self.cluster.topics.get(key[0]) or {}).get(key[1])
            conn = self.cluster.open_connection(meta.leader) if meta is not None else None
            if conn is not None and len(self.in_flight.get(conn, ())) >= self.p.max_in_flight:
                return False
        for b in self.pending:
            if b.partition == key[1] and b.topic == key[0]:
                return False
        return True

    def _any_in_flight(self) -> bool:
        return any(self.in_flight.values())

    def _timeout(self, now: float, linger_left: float | None) -> float | None:
        """How long the I/O thread may block: until a linger or a retry backoff ends,
        and never long while requests are in flight (their timeouts need checking)."""
        waits = [IDLE_POLL_S] if linger_left is None else [linger_left, IDLE_POLL_S]
        if self.txn is not None and (due := self.txn.add_due(now)) is not None:
            waits.append(due)  # (noted partitions: added when flushed or lingered)
        if self.pending:
            # Batches still pending after send_ready wait for something: a retry
            # backoff (a timer), the producer id's backoff (a timer), or a window that
            # an answer frees (the socket wakes the select) -- never a zero timeout for
            # them, which made this thread spin on the GIL while a flood's window was
            # full (the producer's CPU per record up 1.5x when acks took longer)
            later = [b.retry_at for b in self.pending if b.retry_at > now]
            if later:
                waits.append(min(later) - now)
            if self.in_order and self.producer_id < 0 and self._pid_retry_at > now:
                waits.append(self._pid_retry_at - now)
            waits.append(PENDING_POLL_S)
        if self._any_in_flight():
            waits.append(IN_FLIGHT_POLL_S)
        return min(waits) if waits else None

    def _on_events(self, events) -> None:
        for key, _ in events:
            if key.data is None:
                try:
                    self.p._wake_r.recv(4096)
                except OSError:
                    pass
                continue
            conn = key.data
            if conn.closed:
                continue  # lost while this thread waited for the lock
            try:
                conn.read_some()
                while (frame := conn.poll_response()) is not None:
                    self._on_response(conn, frame)
            except BrokerNotAvailableError as e:
                self._on_connection_lost(conn, e)
        self._check_request_timeouts()

    # -------------------------------------------------------------- sending

    def _send_pending(self) -> None:
        now = time.monotonic()
        held = self._hold_for_transaction() if self.txn is not None else ()
        sendable, keep, expired = select_sendable(
            self.pending, now, self.in_order, self.in_flight_parts, self._window
        )
        keep.extend(held)
        self.pending = keep
        for b in expired:
            self._fail(b, self._delivery_timeout(b))
        if sendable and self.in_order and not self._ensure_producer_id():
            self.pending = deque(sorted([*sendable, *self.pending], key=lambda b: b.seq))
            return
        by_leader: dict[int, list[ProducerBatch]] = {}
        for b in sendable:
            try:
                leader = self.cluster.leader_for(b.topic, b.partition)
            except (ApiError, BrokerNotAvailableError) as e:
                self._retry_or_fail(b, e)
                continue
            b.leader_epoch = self.cluster.topics[b.topic][b.partition].leader_epoch
            by_leader.setdefault(leader, []).append(b)
        for leader, batches in by_leader.items():
            self._send_to(leader, batches)

    def _hold_for_transaction(self) -> list[ProducerBatch]:
        """Take out of ``pending`` the batches of partitions not added to the
        transaction yet (returned: they wait), and fail those of refused ones."""
        txn, held, ok = self.txn, [], deque()
        for b in self.pending:
            key = (b.topic, b.partition)
            if key in txn.partitions:
                ok.append(b)
            elif key in txn.refused:
                self._fail(b, txn.refused[key])
            else:
                held.append(b)
        self.pending = ok
        return held

    def _send_to(self, leader: int, batches: list[ProducerBatch]) -> None:
        try:
            conn = self.cluster.connection(leader)
        except BrokerNotAvailableError as e:
            for b in batches:
                self._retry_or_fail(b, e)
            return
        q = self.in_flight.setdefault(conn, deque())
        while batches:
            if len(q) >= self.p.max_in_flight:
                self._requeue(batches)
                return
            chunk, batches = next_request(batches, MAX_BATCHES_PER_REQUEST, self.in_order)
            datas = [self._encode_or_fail(b) for b in chunk]
            if None in datas:  # (records that do not encode: their batches failed)
                chunk = [b for b, d in zip(chunk, datas) if d is not None]
                datas = [d for d in datas if d is not None]
                if not chunk:
                    continue
            parts = [[b.topic, b.partition, len(d)] for b, d in zip(chunk, datas)]
            fields = {
                "transactional_id": self.txn_id,
                "acks": self.p.acks,
                "timeout_ms": int(self.p.request_timeout_s * 1000),
                "parts": parts,
            }
            sent_at = time.monotonic()  # (before the write: a trace's ``send`` hop)
            try:
                conn.send(Api.PRODUCE, fields, b"".join(datas), expect_response=self.p.acks != 0)
                self.produce_requests += 1
                if not q:  # (after the send: an epoll_ctl off the latency path; level-
                    self._register(conn)  # triggered, so an answer already there shows)
            except BrokerNotAvailableError as e:
                self._on_connection_lost(conn, e, extra=chunk + batches)
                return
            for b in chunk:
                b.attempts += 1
                b.flying = True
                key = (b.topic, b.partition)
                self.in_flight_parts[key] = self.in_flight_parts.get(key, 0) + 1
            if self.p.acks == 0:
                for b in chunk:
                    self._landed(b)
                    self.p._complete(b, -1)
            else:
                q.append((sent_at, chunk))

    def _delivery_timeout(self, b: ProducerBatch) -> DeliveryTimeoutError:
        return DeliveryTimeoutError(
            f"{b.topic}-{b.partition}: not acknowledged within delivery_timeout_ms "
            f"({self.p.delivery_timeout_s * 1000:.0f} ms) after {b.attempts} attempt(s)"
            + (f"; last error: {b.last_error}" if b.last_error is not None else ""),
            b.last_error,
        )

    def _encode_or_fail(self, b: ProducerBatch) -> bytes | None:
        """:meth:`_encode`, or None after failing ``b`` (its futures get the TypeError,
        its bytes are given back, so flush() and close() do not wait for it) when one
        of its records does not encode -- a value that is neither bytes nor None deep in
        a send_many list. No sequence was used: the next batch takes it."""
        try:
            return self._encode(b)
        except (TypeError, ValueError) as e:
            self._fail(b, TypeError(
                f"{b.topic}-{b.partition}: a record of this batch does not encode ({e}): "
                f"keys and values must be bytes, str or None, header values bytes, str "
                f"or None"))
            return None

    def _encode(self, b: ProducerBatch) -> bytes:
        """The batch's bytes. With idempotence, the first encoding stamps the producer
        id and the partition's next sequence (batches are first sent in creation
        order, so sequences follow it); a retry re-sends the same bytes, unless the
        producer took a new id meanwhile (a batch failed for good): then the batch
        is re-stamped with the new id and the next sequence under it."""
        if not self.in_order:
            return b.encode(self.p.compression)
        if b.data is not None and b.producer_id == self.producer_id:
            return b.data
        key = (b.topic, b.partition)
        seq = self.next_seq.get(key, 0)
        if b.data is None:
            n = len(b)
            data = b.encode(self.p.compression, self.producer_id, self.producer_epoch, seq,
                            self.txn_id is not None)
        else:
            n = records.read_header(b.data, 0).record_count
            b.data = data = records.restamp_producer(b.data, self.producer_id,
                                                     self.producer_epoch, seq)
            b.producer_id = self.producer_id
        self.next_seq[key] = (seq + n) % (MAX_SEQUENCE + 1)
        return data

    def _ensure_producer_id(self) -> bool:
        """InitProducerId once (and after a batch failed for good), on a connection of
        its own: pipelined produce connections must not interleave a second request."""
        if self.producer_id >= 0:
            return True
        if self.txn_id is not None:  # (init_transactions() gives it)
            self.fail_everything(ApiError(ErrorCode.INVALID_TXN_STATE,
                                          "call init_transactions() before sending"))
            return False
        now = time.monotonic()
        if now < self._pid_retry_at:
            return False
        addrs = list(self.cluster.brokers.values()) + list(self.cluster.bootstrap)
        last: Exception | None = None
        for host, port in addrs:
            try:
                conn = BrokerConnection(host, port, self.p.request_timeout_s,
                                        security=self.p.security)
            except BrokerNotAvailableError as e:
                last = e
                continue
            try:
                h = conn.request(Api.INIT_PRODUCER_ID,
                                 {"timeout_ms": int(self.p.request_timeout_s * 1000)},
                                 timeout_s=self.p.request_timeout_s).header
                self.producer_id, self.producer_epoch = h["producer_id"], h["producer_epoch"]
                self.next_seq.clear()
                self.acked.clear()
                return True
            except (ApiError, BrokerNotAvailableError) as e:
                last = e
                if isinstance(e, ApiError) and not e.retriable:
                    break
            finally:
                conn.close()
        self._pid_retry_at = now + self.p.retry_backoff_s
        if isinstance(last, ApiError) and not last.retriable:
            self.fail_everything(last)
        return False

    def _requeue(self, batches: list[ProducerBatch]) -> None:
        """Put unsent batches back at the front of the queue, in their order."""
        self.pending.extendleft(reversed(batches))

    def _register(self, conn: BrokerConnection) -> None:
        try:
            self.sel.register(conn.sock, selectors.EVENT_READ, conn)
        except KeyError:
            pass

    # -------------------------------------------------------------- responses

    def _landed(self, b: ProducerBatch) -> None:
        """``b`` is no longer in flight (answered, lost or timed out)."""
        if b.flying:
            b.flying = False
            key = (b.topic, b.partition)
            n = self.in_flight_parts.get(key, 0) - 1
            if n > 0:
                self.in_flight_parts[key] = n
            else:
                self.in_flight_parts.pop(key, None)

    def _on_response(self, conn: BrokerConnection, frame) -> None:
        q = self.in_flight.get(conn)
        sent_at, chunk = q.popleft()
        self.clock.observe(time.monotonic() - sent_at)
        self.cluster.clear_suspect((conn.host, conn.port))
        if not q:
            self._unregister(conn)
        for b in chunk:
            self._landed(b)
        trace = self.p.trace
        h = frame.header
        if h.get("error"):
            err = api_error(h["error"], h.get("message", ""))
            for b in chunk:
                self._retry_or_fail(b, err)
            return
        for b, part in zip(chunk, h.get("parts", [])):
            code = part.error
            if code == 0:
                if b.producer_id == self.producer_id and b.producer_id >= 0:
                    self.acked.add((b.topic, b.partition))
                if trace is not None and part.base_offset >= 0:
                    n = records.read_header(b.data, 0).record_count if b.data else len(b)
                    last = part.base_offset + n - 1
                    trace.stamp("send", b.topic, b.partition, part.base_offset, last,
                                int(sent_at * 1e9))
                    trace.stamp("ack", b.topic, b.partition, part.base_offset, last)
                self.p._complete(b, part.base_offset)
            elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE and self._earlier_unsettled(b):
                # an earlier batch of its partition failed and is being retried: this
                # one goes again after it, in sequence order (not a failure of its own)
                b.retry_at = 0.0
                self.pending.append(b)
            else:
                self._retry_or_fail(b, api_error(code, part.message))

    def _earlier_unsettled(self, b: ProducerBatch) -> bool:
        """Is a batch created before ``b``, of its partition and producer id, queued for
        a retry or still in flight?"""
        def earlier(o):
            return (o.seq < b.seq and o.partition == b.partition and o.topic == b.topic
                    and o.producer_id == b.producer_id)
        if any(earlier(o) for o in self.pending):
            return True
        return any(earlier(o) for q in self.in_flight.values() for _, chunk in q for o in chunk)

    def _unregister(self, conn: BrokerConnection) -> None:
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _on_connection_lost(self, conn: BrokerConnection, err: Exception, extra=()) -> None:
        self._unregister(conn)
        conn.close()
        lost = [b for _, chunk in self.in_flight.pop(conn, ()) for b in chunk]
        for b in lost:
            self._landed(b)
        # (in creation order: with idempotence they are re-sent in sequence order)
        for b in lost + list(extra):
            self._retry_or_fail(b, err)
        if not isinstance(err, LeaderMovedError):
            self.cluster.topics.clear()  # leaders may have moved

    def _check_request_timeouts(self) -> None:
        now = time.monotonic()
        for conn, q in list(self.in_flight.items()):
            if q and now - q[0][0] > self.p.request_timeout_s:
                self.cluster.suspect((conn.host, conn.port))
                self._on_connection_lost(
                    conn,
                    BrokerNotAvailableError(
                        f"{conn.host}:{conn.port} did not answer within request_timeout_ms"
                    ),
                )
        self._check_stale(now)

    def _check_stale(self, now: float) -> None:
        """A request outstanding far longer than usual: refresh its partitions' metadata
        (from another node) every retry_backoff_ms while it waits. Whenever the metadata
        is newer than last looked at (that refresh, or one after NOT_LEADER on another
        request), drop each connection whose requests' partitions have a new leader,
        and send their batches there (client/stale.py)."""
        overdue = [conn for conn, q in self.in_flight.items()
                   if q and self.clock.overdue(q[0][0], now)]
        if overdue and self.recheck.due(now):
            for conn in overdue:
                self.cluster.suspect((conn.host, conn.port))
            topics = sorted({b.topic for conn in overdue
                             for _, chunk in self.in_flight[conn] for b in chunk})
            try:
                self.cluster.refresh(topics)
            except (ApiError, BrokerNotAvailableError):
                pass  # no other node answered: look again after the next interval
        if self.cluster.version == self._seen_version:
            return
        self._seen_version = self.cluster.version
        for conn, q in list(self.in_flight.items()):
            if not q:
                continue
            m = moved(self.cluster.topics, conn.node_id,
                      ((b.topic, b.partition, b.leader_epoch) for _, chunk in q for b in chunk))
            if m is not None:
                topic, partition, leader, epoch = m
                self._on_connection_lost(conn, LeaderMovedError(
                    f"node {conn.node_id} ({conn.host}:{conn.port}) left a request "
                    f"unanswered and no longer leads {topic}-{partition} (node {leader} "
                    f"does, epoch {epoch}): sent there instead"))

    def _retry_or_fail(self, b: ProducerBatch, err: Exception) -> None:
        retriable = isinstance(err, BrokerNotAvailableError) or (
            isinstance(err, ApiError) and err.retriable
        )
        b.last_error = err
        if isinstance(err, ApiError) and err.code == ErrorCode.KAFKA_STORAGE_ERROR:
            b.storage_errors += 1
            if STORAGE_ERROR_APPENDED not in err.message:
                b.storage_refusals += 1
            retriable = b.storage_errors <= STORAGE_ERROR_RETRIES
            self.cluster.topics.pop(b.topic, None)  # leadership may move off that disk
        if retriable and b.attempts <= self.p.retries and time.monotonic() < b.deadline:
            if isinstance(err, BrokerNotAvailableError) or isinstance(err, ApiError) and err.code in (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.LEADER_NOT_AVAILABLE,
                ErrorCode.FENCED_LEADER_EPOCH,
            ) and not isinstance(err, LeaderMovedError):
                # the leader moved or died: look it up again before the retry
                self.cluster.topics.pop(b.topic, None)
            # (a batch taken off a stale leader goes to the new one at once: KIP-951)
            b.retry_at = time.monotonic() + (
                0.0 if isinstance(err, LeaderMovedError) else self.p.retry_backoff_s)
            self.pending.append(b)
            return
        if retriable and b.attempts <= self.p.retries and b.storage_errors == 0:
            # a retriable error that came after the delivery timeout: the batch timed
            # out, as one still queued for its retry would have (the error is last_error;
            # a storage error keeps its KafkaStorageError and what it says was written)
            err = self._delivery_timeout(b)
        self._fail(b, err)

    def _fail(self, b: ProducerBatch, err: BaseException) -> None:
        self._landed(b)
        if isinstance(err, KafkaStorageError):
            # every attempt refused by a leader whose append failed: nothing was written
            # (a copy: one error object may answer several batches of a request)
            err = KafkaStorageError(err.message)
            err.written = False if b.storage_refusals == b.attempts else None
        if self.txn_id is not None:
            # the transaction must abort (the epoch bump of the abort restarts the
            # sequences); a refused epoch means a newer instance fenced this one
            if isinstance(err, ApiError) and err.code is ErrorCode.INVALID_PRODUCER_EPOCH:
                from .errors import ProducerFencedError

                err = ProducerFencedError(err.message)
            if self.p._txn_error is None:
                self.p._txn_error = err
        elif self.in_order and b.producer_id >= 0 and b.producer_id == self.producer_id:
            # its sequence numbers may or may not be in the log: start a new id
            self.producer_id = records.NO_PRODUCER_ID
        self.p._complete(b, -1, err)

    def fail_everything(self, err: BaseException) -> None:
        for q in self.in_flight.values():
            for _, chunk in q:
                for b in chunk:
                    self._fail(b, err)
        for b in list(self.pending):
            self._fail(b, err)
        for b in self.p._acc.abort():
            self._fail(b, err)
