"""confluent-kafka (librdkafka) workloads through a node's Kafka listener, the same ones
bench/throughput.py runs with the raftlog SDK: produce N 100-byte records to partition 0
and wait for every ack, consume them all from offset 0, and end-to-end latency at a
fixed rate (open loop, each record stamped with its scheduled CLOCK_MONOTONIC time).

Client settings are librdkafka's defaults except: acks as given (idempotence on with
acks=all, as the SDK), linger.ms=5 and batch.size=1 MB for the throughput run
(librdkafka's recommended throughput settings), linger.ms=0 for the latency run; the
consumer of the throughput run has fetch.max.bytes 50 MB, max.partition.fetch.bytes 10 MB
queued.min.messages 1,000,000 and fetch.queue.backoff.ms 10: when its prefetch queue
passes queued.min.messages or queued.max.messages.kbytes (64 MB) librdkafka stops
fetching for fetch.queue.backoff.ms, 1 s by default -- a client pause, not the node's
rate (measured: 575K-594K rec/s with the default backoff, 782K-845K with 10 ms, same
cluster and data). The producers connect and take their producer id before the
clock starts, as the SDK's Producer does in its constructor.
"""

from __future__ import annotations

import time

VALUE_BYTES = 100


def _acks(acks) -> str:
    return "all" if str(acks) in ("all", "-1") else str(acks)


def _ready(p, topic: str) -> None:
    """Connect before the clock starts, as the SDK's Producer does in its constructor:
    librdkafka connects, fetches metadata and takes its producer id lazily, and the
    first records of a run would otherwise wait for all three."""
    p.list_topics(topic, timeout=10)
    p.poll(0.5)


def produce(bootstrap: str, topic: str, n: int, acks) -> dict:
    from confluent_kafka import Producer

    acks = _acks(acks)
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                  "enable.idempotence": acks == "all", "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    errors: list = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    value = b"x" * VALUE_BYTES
    _ready(p, topic)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    secs = time.perf_counter() - start
    if left or errors:
        raise SystemExit(f"confluent-kafka: {left} unsent, {len(errors)} failed, first: "
                         f"{errors[:1]}")
    return {"produce_rec_s": n / secs, "produce_mb_s": n * VALUE_BYTES / secs / 1e6}


def consume(bootstrap: str, topic: str, n: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 * 1024 * 1024,
                  "max.partition.fetch.bytes": 10 * 1024 * 1024,
                  "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10})
    c.list_topics(topic, timeout=10)  # connected with metadata, as the SDK's constructor
    c.assign([TopicPartition(topic, 0, 0)])
    start = time.perf_counter()  # (after assign, as the SDK's figure)
    got = 0
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(min(100_000, n - got), 5.0)
        got += sum(1 for m in msgs if m.error() is None)
    secs = time.perf_counter() - start
    c.close()
    return {"consume_rec_s": got / secs, "consume_mb_s": got * VALUE_BYTES / secs / 1e6}


def latency_producer(bootstrap: str, topic: str, rate: int, secs: float, acks) -> None:
    from confluent_kafka import Producer
    from pacing import paced, precise_timers

    precise_timers()
    acks = _acks(acks)
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                  "enable.idempotence": acks == "all", "linger.ms": 0})
    pad = b"x" * (VALUE_BYTES - 8)
    total = int(rate * secs)
    _ready(p, topic)
    for _i, due_ns in paced(rate, total):
        p.produce(topic, due_ns.to_bytes(8, "little") + pad, partition=0)
        p.poll(0)
    p.flush(60)


def latency_consumer(bootstrap: str, topic: str, total: int, secs: float,
                     ready_file: str) -> list[tuple[int, float]]:
    """(scheduled send ns, latency ms) per record."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 500,
                  "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    c.poll(0.5)
    open(ready_file, "w").close()
    samples: list[tuple[int, float]] = []
    deadline = time.monotonic() + secs + 60
    while len(samples) < total and time.monotonic() < deadline:
        m = c.poll(1.0)  # (consume(n, t) would wait for n records or t: not a latency)
        now = time.monotonic_ns()
        if m is not None and m.error() is None:
            sent = int.from_bytes(m.value()[:8], "little")
            samples.append((sent, (now - sent) / 1e6))
    c.close()
    return samples
