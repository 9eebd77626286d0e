"""PySpark data source for raftlog: Spark's Kafka idioms on raftlog topics.

``format("raftlog")`` reads topics as DataFrames (batch and streaming) and writes
DataFrames to topics, with the options and the schema of Spark's Kafka source::

    from raftlog.client.spark import register
    register(spark)
    df = (spark.read.format("raftlog")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())
    df.selectExpr("CAST(key AS STRING)", "value").write.format("raftlog") \\
        .option("bootstrap.servers", "127.0.0.1:9092").option("topic", "copy").save()

Needs ``raftlog[spark]`` (pyspark >= 4.2 for streaming with ``maxOffsetsPerTrigger`` and
``availableNow``; batch read/write work from 4.0). Built only on the public client API
(Consumer, Producer, Admin): a Spark task reads one offset range of one partition with
its own Consumer, and writes with its own idempotent Producer.

The first half of this module is pure (option parsing, offset resolution, range
planning and splitting, rate limiting): no Spark, no sockets, unit-tested on its own.
The second half holds the pyspark classes and the I/O they do.

What is durable when: a batch write (or a streaming micro-batch) succeeds only once every
record is acknowledged with acks=all; a failed task may leave some of its records written
(as Spark's Kafka sink: at-least-once, Spark's retry of the task can duplicate them).
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

try:  # pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - older pyspark: no streaming sink
    DataSourceStreamArrowWriter = None
try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


__all__ = [
    "DataLossError",
    "OffsetRange",
    "RaftlogDataSource",
    "RaftlogOptionError",
    "ReadOptions",
    "WriteOptions",
    "local_session",
    "parse_read_options",
    "parse_write_options",
    "rate_limit",
    "register",
    "split_ranges",
]

#: Offsets in startingOffsets/endingOffsets JSON, as Kafka's.
EARLIEST = -2
LATEST = -1
#: Spark's default for kafkaConsumer.pollTimeoutMs (spark.network.timeout).
POLL_TIMEOUT_MS_DEFAULT = 120_000
#: One poll() waits at most this long before the reader re-checks the high watermark.
POLL_WAIT_MS = 500
#: Rows per Arrow batch handed to Spark (bounded, so a task's memory is too).
ARROW_BATCH_ROWS_MAX = 65_536
#: Records asked of one poll().
POLL_RECORDS_MAX = 100_000
#: Bytes per partition per fetch of a Spark reader (the client's default is 1 MiB).
FETCH_PARTITION_BYTES_DEFAULT = 4 * 1024 * 1024
#: How long a writing task waits for its last acknowledgements.
WRITE_FLUSH_TIMEOUT_S = 300.0

TP = tuple[str, int]  # (topic, partition): plain tuples pickle and sort cheaply


class RaftlogOptionError(ValueError):
    """A bad data source option; the message names the option."""


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention, truncation, a deleted topic) and
    failOnDataLoss is true."""


# ====================================================================== schema


def _headers_type() -> ArrayType:
    return ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )


def kafka_schema(include_headers: bool = True) -> StructType:
    """The schema of Spark's Kafka source (with ``includeHeaders``)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _headers_type()))
    return StructType(fields)


# ====================================================================== options (pure)


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Kafka's subscribe / subscribePattern / assign."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TP, ...] = ()

    def resolve(
        self, all_topics: Callable[[], list[str]], partitions_of: Callable[[str], list[int]]
    ) -> list[TP]:
        """The topic-partitions this subscription means now (sorted)."""
        if self.kind == "assign":
            for topic, p in self.partitions:
                if p not in partitions_of(topic):
                    raise RaftlogOptionError(f"assign: topic {topic!r} has no partition {p}")
            return sorted(self.partitions)
        if self.kind == "subscribe":
            topics = list(self.topics)
        else:
            rx = re.compile(self.pattern)
            # as Kafka's exclude.internal.topics=true: never match __consumer_offsets & co.
            topics = [t for t in all_topics() if rx.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in topics for p in partitions_of(t))


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends, before it is resolved against the log."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    option: str  # the option it came from, for error messages
    offsets: tuple[tuple[TP, int], ...] = ()  # "offsets" (-2/-1 allowed) or "timestamps"
    timestamp_ms: int = 0  # "timestamp"


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # None in streaming
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool = True
    starting_timestamp_strategy: str = "error"  # "error" | "latest"
    poll_timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT
    consumer_config: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    producer_config: tuple[tuple[str, object], ...] = ()


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands a case-insensitive dict; plain dicts (tests, users) get the same treatment.
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bootstrap(opts: dict[str, str]) -> str:
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise RaftlogOptionError(
            "option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required, "
            "e.g. .option('bootstrap.servers', '127.0.0.1:9092')"
        )
    for hp in servers.split(","):
        host, sep, port = hp.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise RaftlogOptionError(f"option 'bootstrap.servers': {hp.strip()!r} is not host:port")
    return servers.strip()


def _bool(opts: dict, name: str, default: bool) -> bool:
    v = opts.get(name.lower())
    if v is None:
        return default
    if v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise RaftlogOptionError(f"option {name!r} must be true or false, not {v!r}")


def _int(opts: dict, name: str, minimum: int = 1) -> int | None:
    v = opts.get(name.lower())
    if v is None:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        raise RaftlogOptionError(f"option {name!r} must be an integer, not {v!r}") from None
    if n < minimum:
        raise RaftlogOptionError(f"option {name!r} must be >= {minimum}, not {n}")
    return n


def _json(option: str, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RaftlogOptionError(f"option {option!r}: invalid JSON ({e.msg}): {text!r}") from None


def parse_partition_map(option: str, text: str, allowed: Callable[[int], bool]) -> dict[TP, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {(topic, 0): 23, (topic, 1): -2}."""
    obj = _json(option, text)
    if not isinstance(obj, dict) or not obj:
        raise RaftlogOptionError(
            f'option {option!r} must be a JSON object like {{"topic": {{"0": 23, "1": -2}}}}, '
            f"not {text!r}"
        )
    out: dict[TP, int] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict) or not parts:
            raise RaftlogOptionError(
                f"option {option!r}: topic {topic!r} must map to an object of "
                f'partition -> value, like {{"0": 23}}'
            )
        for p, v in parts.items():
            if not str(p).isdigit():
                raise RaftlogOptionError(f"option {option!r}: partition {p!r} is not a number")
            if isinstance(v, bool) or not isinstance(v, int) or not allowed(v):
                raise RaftlogOptionError(
                    f"option {option!r}: value {v!r} for {topic}-{p} is not allowed here"
                )
            out[(topic, int(p))] = v
    return out


def _subscription(opts: dict) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    if len(given) != 1:
        which = ", ".join(names[g] for g in given) or "none"
        raise RaftlogOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is "
            f"required (given: {which})"
        )
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise RaftlogOptionError(f"option 'subscribe' names no topic: {value!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as e:
            raise RaftlogOptionError(
                f"option 'subscribePattern': bad regex {value!r}: {e}"
            ) from None
        return Subscription("subscribePattern", pattern=value)
    obj = _json("assign", value)
    if not isinstance(obj, dict) or not obj:
        raise RaftlogOptionError(
            f"option 'assign' must be a JSON object like {{\"topicA\": [0, 1]}}, not {value!r}"
        )
    tps: list[TP] = []
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise RaftlogOptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers"
            )
        tps += [(topic, p) for p in parts]
    return Subscription("assign", partitions=tuple(dict.fromkeys(tps)))


def _offset_spec(opts: dict, which: str, streaming: bool) -> OffsetSpec | None:
    """startingX / endingX options -> OffsetSpec, with Spark's precedence:
    xTimestamp, then xOffsetsByTimestamp, then xOffsets."""
    ts_name, by_ts_name, off_name = (
        f"{which}Timestamp",
        f"{which}OffsetsByTimestamp",
        f"{which}Offsets",
    )
    if opts.get(ts_name.lower()) is not None:
        ts = _int(opts, ts_name, minimum=0)
        return OffsetSpec("timestamp", ts_name, timestamp_ms=ts)
    if opts.get(by_ts_name.lower()) is not None:
        m = parse_partition_map(by_ts_name, opts[by_ts_name.lower()], lambda v: v >= 0)
        return OffsetSpec("timestamps", by_ts_name, offsets=tuple(sorted(m.items())))
    text = opts.get(off_name.lower())
    if text is None:
        if which == "ending":
            return None if streaming else OffsetSpec("latest", off_name)
        return OffsetSpec("latest" if streaming else "earliest", off_name)
    t = text.strip().lower()
    if t in ("earliest", "latest"):
        if not streaming and which == "starting" and t == "latest":
            raise RaftlogOptionError("option 'startingOffsets' cannot be 'latest' for batch reads")
        if which == "ending" and t == "earliest":
            raise RaftlogOptionError("option 'endingOffsets' cannot be 'earliest'")
        return OffsetSpec(t, off_name)
    if which == "starting":
        allowed = (lambda v: v >= EARLIEST) if streaming else (lambda v: v >= 0 or v == EARLIEST)
    else:
        allowed = lambda v: v >= 0 or v == LATEST  # noqa: E731
    m = parse_partition_map(off_name, text, allowed)
    return OffsetSpec("offsets", off_name, offsets=tuple(sorted(m.items())))


#: ``kafka.``-prefixed consumer settings a reader passes on to raftlog's Consumer.
_CONSUMER_KEYS = {
    "kafka.max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "kafka.fetch.max.bytes": "fetch_max_bytes",
    "kafka.fetch.max.wait.ms": "fetch_max_wait_ms",
    "kafka.request.timeout.ms": "request_timeout_ms",
}
_PRODUCER_INT_KEYS = {
    "kafka.linger.ms": "linger_ms",
    "kafka.batch.size": "batch_size",
    "kafka.request.timeout.ms": "request_timeout_ms",
    "kafka.delivery.timeout.ms": "delivery_timeout_ms",
    "kafka.buffer.memory": "buffer_memory",
    "kafka.max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
}


def parse_read_options(options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
    """Validate reader options; RaftlogOptionError names the bad option."""
    opts = _lower(options)
    if streaming and any(
        k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    ):
        raise RaftlogOptionError("option 'endingOffsets' is for batch reads, not streaming")
    if not streaming and "maxoffsetspertrigger" in opts:
        raise RaftlogOptionError("option 'maxOffsetsPerTrigger' is for streaming reads")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise RaftlogOptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}"
        )
    poll = opts.get("kafkaconsumer.polltimeoutms") or opts.get("polltimeoutms")
    consumer = tuple(
        sorted((kw, _int(opts, key, 0)) for key, kw in _CONSUMER_KEYS.items() if key in opts)
    )
    return ReadOptions(
        bootstrap_servers=_bootstrap(opts),
        subscription=_subscription(opts),
        starting=_offset_spec(opts, "starting", streaming),
        ending=_offset_spec(opts, "ending", streaming),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_int(opts, "minPartitions"),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger"),
        include_headers=_bool(opts, "includeHeaders", True),
        starting_timestamp_strategy=strategy,
        poll_timeout_ms=(
            _int({"kafkaConsumer.pollTimeoutMs": poll}, "kafkaConsumer.pollTimeoutMs")
            if poll
            else POLL_TIMEOUT_MS_DEFAULT
        ),
        consumer_config=consumer,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate writer options. Every task's producer is idempotent with acks=all."""
    opts = _lower(options)
    acks = opts.get("kafka.acks", "all").strip().lower()
    if acks not in ("all", "-1"):
        raise RaftlogOptionError(
            f"option 'kafka.acks' must be all: the raftlog sink always writes with an "
            f"idempotent producer (acks=all), not {acks!r}"
        )
    config: list[tuple[str, object]] = [
        (kw, _int(opts, key, 0)) for key, kw in _PRODUCER_INT_KEYS.items() if key in opts
    ]
    comp = opts.get("kafka.compression.type")
    if comp is not None:
        comp = comp.strip().lower()
        if comp not in ("none", "lz4", "zstd", "gzip"):
            raise RaftlogOptionError(
                f"option 'kafka.compression.type' must be none, lz4, zstd or gzip, not {comp!r}"
            )
        config.append(("compression_type", None if comp == "none" else comp))
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise RaftlogOptionError("option 'topic' is empty")
    return WriteOptions(
        bootstrap_servers=_bootstrap(opts),
        topic=topic.strip() if topic else None,
        producer_config=tuple(sorted(config)),
    )


# ====================================================================== planning (pure)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records [start, end) of one partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def resolve_offsets(
    spec: OffsetSpec,
    tps: list[TP],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    for_times: Callable[[dict[TP, int]], dict[TP, int | None]],
    *,
    ending: bool = False,
    timestamp_strategy: str = "error",
) -> dict[TP, int]:
    """An OffsetSpec -> a concrete offset per partition of ``tps``.

    ``for_times`` maps {tp: timestamp_ms} to {tp: first offset with timestamp >= it, or None}.
    No record at or after the timestamp: ending -> latest; starting -> an error, or
    latest with ``startingOffsetsByTimestampStrategy=latest`` (as Spark).
    """
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind in ("offsets", "timestamps"):
        given = dict(spec.offsets)
        _require_exact_partitions(spec.option, given, tps)
    if spec.kind == "offsets":
        return {
            tp: {EARLIEST: earliest[tp], LATEST: latest[tp]}.get(given[tp], given[tp]) for tp in tps
        }
    wanted = {tp: spec.timestamp_ms for tp in tps} if spec.kind == "timestamp" else given
    found = for_times(wanted) if wanted else {}
    out = {}
    for tp in tps:
        off = found.get(tp)
        if off is None:
            if not ending and timestamp_strategy == "error":
                raise RaftlogOptionError(
                    f"option {spec.option!r}: {tp[0]}-{tp[1]} has no record at or after "
                    f"timestamp {wanted[tp]} (set startingOffsetsByTimestampStrategy=latest "
                    f"to start at the latest offset instead)"
                )
            off = latest[tp]
        out[tp] = off
    return out


def _require_exact_partitions(option: str, given: dict[TP, int], tps: list[TP]) -> None:
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise RaftlogOptionError(
            f"option {option!r} must give every subscribed partition "
            f"(-2 earliest, -1 latest): {'; '.join(parts)}"
        )


def plan_batch_ranges(
    start: Mapping[TP, int],
    end: Mapping[TP, int],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    *,
    fail_on_data_loss: bool = True,
    ending_option: str = "endingOffsets",
) -> list[OffsetRange]:
    """Resolved start/end offsets -> one range per partition, checked against the log.

    Reads stop at the high watermark: an end beyond it is an error naming the option.
    A start below the log start offset (deleted by retention) is data loss: an error
    with failOnDataLoss=true, else the range starts at the log start offset.
    """
    out = []
    for tp in sorted(end):
        s, e = start[tp], end[tp]
        if e > latest[tp]:
            raise RaftlogOptionError(
                f"option {ending_option!r}: offset {e} of {tp[0]}-{tp[1]} is beyond its high "
                f"watermark {latest[tp]} (reads stop at the high watermark)"
            )
        s = _check_start(tp, s, earliest[tp], fail_on_data_loss)
        if s > e:
            raise RaftlogOptionError(
                f"{tp[0]}-{tp[1]}: starting offset {s} is after ending offset {e}"
            )
        out.append(OffsetRange(tp[0], tp[1], s, e))
    return out


def _check_start(tp: TP, start: int, log_start: int, fail_on_data_loss: bool) -> int:
    if start >= log_start:
        return start
    if fail_on_data_loss:
        raise DataLossError(
            f"{tp[0]}-{tp[1]}: offsets {start}..{log_start - 1} were deleted (log start offset "
            f"is {log_start}); set failOnDataLoss=false to skip them"
        )
    return log_start


def plan_stream_ranges(
    start: Mapping[TP, int],
    end: Mapping[TP, int],
    earliest: Mapping[TP, int],
    *,
    fail_on_data_loss: bool = True,
) -> list[OffsetRange]:
    """A micro-batch [start, end) -> ranges. Partitions new in ``end`` start at their
    earliest offset (as Kafka's source); partitions gone from ``end`` are data loss."""
    gone = sorted(set(start) - set(end))
    if gone and fail_on_data_loss:
        raise DataLossError(
            "partitions were deleted: "
            + ", ".join(f"{t}-{p}" for t, p in gone)
            + "; set failOnDataLoss=false to go on without them"
        )
    out = []
    for tp in sorted(end):
        e = end[tp]
        s = start.get(tp, earliest.get(tp, 0))
        if s > e:  # the partition went backwards: recreated or truncated
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp[0]}-{tp[1]}: offset went back from {s} to {e} (topic recreated or "
                    "log truncated); set failOnDataLoss=false to go on"
                )
            continue
        if tp in earliest:
            s = _check_start(tp, s, earliest[tp], fail_on_data_loss)
        if s < e:
            out.append(OffsetRange(tp[0], tp[1], s, e))
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per partition, split so there are about ``min_partitions`` of them
    (Spark's KafkaOffsetRangeCalculator): each range gets a share of the parts
    proportional to its size, at least one; empty ranges are dropped."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(round(r.size / total * min_partitions), 1)
        remaining, s = r.size, r.start
        for i in range(parts):
            n = remaining // (parts - i)  # the last part takes the round-off
            remaining -= n
            e = min(s + n, r.end)
            if e > s:
                out.append(OffsetRange(r.topic, r.partition, s, e))
            s = e
    return out


def rate_limit(
    start: Mapping[TP, int], latest: Mapping[TP, int], max_records: int
) -> dict[TP, int]:
    """maxOffsetsPerTrigger as Spark's Kafka source: each partition advances by its share
    of ``max_records`` in proportion to its backlog (at least one record, never past
    ``latest``)."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    sizes = {tp: n for tp, n in sizes.items() if n > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = max_records * (sizes[tp] / total)
        step = int(share) if share >= 1 else 1  # never starve a small partition
        out[tp] = min(end, start[tp] + step)
    return out


def offsets_to_json(offsets: Mapping[TP, int]) -> dict:
    """{(t, p): o} -> {"t": {"p": o}}: Spark's stream offset, as Kafka's source writes it."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def offsets_from_json(obj: Mapping) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


# ====================================================================== I/O helpers


class _Log:
    """Driver-side questions about the log, through the public client API only."""

    def __init__(self, bootstrap_servers: str):
        from raftlog.client import Admin, Consumer

        self.admin = Admin(bootstrap_servers)
        self.consumer = Consumer(bootstrap_servers)

    def topics(self) -> list[str]:
        return self.admin.list_topics()

    def partitions(self, topic: str, option: str = "subscribe") -> list[int]:
        from raftlog.client import UnknownTopicOrPartitionError

        try:
            return [p.partition for p in self.admin.describe_topic(topic).partitions]
        except UnknownTopicOrPartitionError:
            raise RaftlogOptionError(f"option {option!r}: topic {topic!r} does not exist") from None

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return _untp(self.consumer.beginning_offsets(_tps(tps))) if tps else {}

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """High watermarks: nothing past them is ever read."""
        return _untp(self.consumer.end_offsets(_tps(tps))) if tps else {}

    def for_times(self, wanted: dict[TP, int]) -> dict[TP, int | None]:
        from raftlog.client import TopicPartition

        res = self.consumer.offsets_for_times(
            {TopicPartition(*tp): ts for tp, ts in wanted.items()}
        )
        return {(tp.topic, tp.partition): (o.offset if o else None) for tp, o in res.items()}

    def resolve(self, sub: Subscription) -> list[TP]:
        return sub.resolve(self.topics, lambda t: self.partitions(t, sub.kind))

    def close(self) -> None:
        self.consumer.close()
        self.admin.close()


def _tps(tps: Iterable[TP]) -> list:
    from raftlog.client import TopicPartition

    return [TopicPartition(t, p) for t, p in tps]


def _untp(d: Mapping) -> dict[TP, int]:
    return {(tp.topic, tp.partition): o for tp, o in d.items()}


class RangePartition(InputPartition):
    """One Spark input partition: an OffsetRange (picklable: plain values only)."""

    def __init__(self, rng: OffsetRange):
        super().__init__(rng)


def _arrow_schema(schema: StructType):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _records_to_arrow(recs: list, arrow_schema):
    """Record tuples -> one Arrow RecordBatch of the requested columns (C-level per
    column: one zip(*) transposes the batch, pyarrow builds each array)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(recs)
    topic, partition, offset, ts, key, value, headers = zip(*recs)
    arrays = []
    for f in arrow_schema:
        name = f.name
        if name == "key":
            arrays.append(pa.array(key, f.type))
        elif name == "value":
            arrays.append(pa.array(value, f.type))
        elif name == "topic":
            arrays.append(pa.array(topic, f.type))
        elif name == "partition":
            arrays.append(pa.array(partition, f.type))
        elif name == "offset":
            arrays.append(pa.array(offset, f.type))
        elif name == "timestamp":  # ms -> us, then a zero-copy view as timestamp
            arrays.append(pc.multiply(pa.array(ts, pa.int64()), 1000).view(f.type))
        elif name == "timestampType":  # CreateTime (raftlog does not apply LogAppendTime)
            arrays.append(pa.repeat(pa.scalar(0, f.type), n))
        elif name == "headers":
            arrays.append(_headers_array(headers, f.type, n))
        else:  # pragma: no cover - schemas are checked when the reader is made
            raise AssertionError(name)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _headers_array(headers: tuple, arrow_type, n: int):
    import pyarrow as pa

    if any(headers):
        return pa.array(headers, arrow_type)
    # the common case: no record has headers -> n empty lists without a Python loop
    empty = pa.array([], arrow_type.value_type)
    return pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1), empty, arrow_type)


def read_range(opts: ReadOptions, rng: OffsetRange, schema: StructType) -> Iterator:
    """Yield Arrow batches of the records [rng.start, rng.end) of one partition.

    Runs in a Spark task. Stops at ``rng.end`` (never beyond the high watermark, which
    planning checked). A start deleted meanwhile by retention, or an end no longer
    reachable (the log was truncated), is data loss: DataLossError with
    failOnDataLoss=true, else the readable part is returned.
    """
    from raftlog.client import Consumer, OffsetOutOfRangeError, TopicPartition

    if rng.size == 0:
        return
    arrow_schema = _arrow_schema(schema)
    tp = TopicPartition(rng.topic, rng.partition)
    config = {"max_partition_fetch_bytes": FETCH_PARTITION_BYTES_DEFAULT, "fetch_max_wait_ms": 100}
    config.update(dict(opts.consumer_config))
    consumer = Consumer(
        opts.bootstrap_servers, auto_offset_reset="none", client_id="raftlog-spark", **config
    )
    # Hundreds of thousands of live Record tuples make every cyclic-GC pass walk them all:
    # measured 4x slower reads with it on. Records hold no cycles (refcounting frees
    # them), so the collector pauses while this task reads.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([tp])
        consumer.seek(tp, rng.start)
        pos, buf, buffered = rng.start, [], 0
        idle_since = time.monotonic()
        while pos < rng.end:
            try:
                recs = consumer.poll(timeout_ms=POLL_WAIT_MS, max_records=POLL_RECORDS_MAX)
            except OffsetOutOfRangeError:
                log_start = consumer.beginning_offsets([tp])[tp]
                pos = _check_start(
                    (rng.topic, rng.partition), pos, log_start, opts.fail_on_data_loss
                )
                consumer.seek(tp, pos)
                continue
            if recs:
                pos = recs[-1].offset + 1
                if pos > rng.end:  # cut at the range end (bisect: offsets ascend)
                    recs = recs[: bisect_left(recs, rng.end, key=_offset)]
                buf.append(recs)
                buffered += len(recs)
                if buffered >= ARROW_BATCH_ROWS_MAX:
                    yield _records_to_arrow(_concat(buf), arrow_schema)
                    buf, buffered = [], 0
                idle_since = time.monotonic()
                continue
            if _range_unreachable(consumer, tp, pos, rng, opts):
                break
            if (time.monotonic() - idle_since) * 1000 > opts.poll_timeout_ms:
                raise TimeoutError(
                    f"{rng.topic}-{rng.partition}: no record at offset {pos} after "
                    f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} (range {rng.start}.."
                    f"{rng.end})"
                )
        if buffered:
            yield _records_to_arrow(_concat(buf), arrow_schema)
    finally:
        if gc_was_enabled:
            gc.enable()
        consumer.close()


def _offset(r) -> int:
    return r[2]


def _concat(lists: list[list]) -> list:
    if len(lists) == 1:
        return lists[0]
    out = []
    for chunk in lists:
        out += chunk
    return out


def _range_unreachable(consumer, tp, pos: int, rng: OffsetRange, opts: ReadOptions) -> bool:
    """Nothing arrived: if the high watermark is now at or below ``pos`` the rest of
    the range is gone (truncation, a recreated topic)."""
    hw = consumer.end_offsets([tp])[tp]
    if hw > pos:
        return False
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{rng.topic}-{rng.partition}: records {pos}..{rng.end - 1} are no longer in the "
            f"log (high watermark {hw}); set failOnDataLoss=false to skip them"
        )
    return True


# ====================================================================== writing


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one writing task sent: records per topic-partition (keyed "topic-p")."""

    records: int = 0
    per_partition: dict = field(default_factory=dict)


def _check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    by_name = {f.name: f.dataType for f in schema.fields}
    if "value" not in by_name:
        raise RaftlogOptionError(
            "the DataFrame to write needs a 'value' column (binary or string); it has "
            + ", ".join(by_name)
        )
    for col in ("key", "value"):
        if col in by_name and not isinstance(by_name[col], (BinaryType, StringType)):
            raise RaftlogOptionError(
                f"column {col!r} must be binary or string, not {by_name[col].simpleString()}"
            )
    if opts.topic is None:
        if "topic" not in by_name:
            raise RaftlogOptionError(
                "set the option 'topic' or give the DataFrame a 'topic' column"
            )
        if not isinstance(by_name["topic"], StringType):
            raise RaftlogOptionError("column 'topic' must be a string")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise RaftlogOptionError(
            f"column 'partition' must be int, not {by_name['partition'].simpleString()}"
        )
    if "headers" in by_name and not _is_headers_type(by_name["headers"]):
        raise RaftlogOptionError(
            "column 'headers' must be array<struct<key: string, value: binary>>, not "
            + by_name["headers"].simpleString()
        )


def _is_headers_type(t) -> bool:
    """array<struct<key: string, value: binary>>, whatever its nullability."""
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in t.elementType.fields}
    return fields == {"key": StringType(), "value": BinaryType()}


def _column(batch, name: str) -> list | None:
    import pyarrow as pa

    i = batch.schema.get_field_index(name)
    if i < 0:
        return None
    col = batch.column(i)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        if name in ("key", "value"):  # Kafka's sink takes strings as their UTF-8 bytes
            col = col.cast(pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col.to_pylist()


def _batch_groups(batch, topic_option: str | None):
    """One Arrow batch -> [(topic, partition or None, values, keys, headers)], in row order
    per topic-partition."""
    n = batch.num_rows
    values = _column(batch, "value")
    keys = _column(batch, "key")
    topics = None if topic_option else _column(batch, "topic")
    parts = _column(batch, "partition")
    headers = _column(batch, "headers")
    if headers is not None:
        headers = [[(h["key"], h["value"]) for h in hs] if hs else None for hs in headers]
        if not any(headers):
            headers = None
    if topics is not None and None in topics:
        raise ValueError("column 'topic' is null in some rows and the option 'topic' is not set")
    if parts is not None and all(p is None for p in parts):
        parts = None
    if topics is None or len(set(topics)) == 1:
        if parts is None:
            topic = topic_option or topics[0]
            return [(topic, None, values, keys, headers)] if n else []
    groups: dict[tuple, list[int]] = {}
    for i in range(n):
        t = topic_option or topics[i]
        groups.setdefault((t, parts[i] if parts else None), []).append(i)
    return [
        (
            t,
            p,
            [values[i] for i in idx],
            [keys[i] for i in idx] if keys else None,
            [headers[i] for i in idx] if headers else None,
        )
        for (t, p), idx in groups.items()
    ]


def write_batches(opts: WriteOptions, batches: Iterable) -> WriteCommit:
    """Send every row with one idempotent producer (acks=all); return only when all are
    acknowledged, else raise naming how many failed and the first error."""
    from raftlog.client import Producer

    config = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
    config.update(dict(opts.producer_config))
    producer = Producer(opts.bootstrap_servers, client_id="raftlog-spark", **config)
    futures: list = []
    commit = WriteCommit()
    try:
        for batch in batches:
            for topic, p, values, keys, headers in _batch_groups(batch, opts.topic):
                f = producer.send_many(topic, values, keys=keys, partition=p, headers=headers)
                futures += f if isinstance(f, list) else [f]
                commit.records += len(values)
        producer.flush(WRITE_FLUSH_TIMEOUT_S)
    finally:
        producer.close(WRITE_FLUSH_TIMEOUT_S)
    failed = [e for e in (f.exception(0) for f in futures) if e is not None]
    if failed:
        raise RuntimeError(
            f"raftlog sink: {len(failed)} of {len(futures)} batches were not acknowledged; "
            f"first error: {failed[0]!r}"
        ) from failed[0]
    for f in futures:
        m = f.result(0)
        k = f"{m.topic}-{m.partition}"
        commit.per_partition[k] = commit.per_partition.get(k, 0) + len(m.offsets)
    return commit


# ====================================================================== pyspark classes


class RaftlogDataSource(DataSource):
    """``format("raftlog")``: batch and streaming reads and writes of raftlog topics."""

    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def schema(self) -> StructType:
        return kafka_schema(_bool(_lower(self.options), "includeHeaders", True))

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftlogBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftlogStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> RaftlogWriter:
        opts = parse_write_options(self.options)
        if overwrite:
            raise RaftlogOptionError("the raftlog sink appends: use mode('append'), not overwrite")
        _check_write_schema(schema, opts)
        return RaftlogWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool):
        if DataSourceStreamArrowWriter is None:  # pragma: no cover
            raise NotImplementedError("streaming writes to raftlog need pyspark >= 4.1")
        opts = parse_write_options(self.options)
        _check_write_schema(schema, opts)
        return RaftlogStreamWriter(opts)


def _check_read_schema(schema: StructType) -> None:
    """A user-given schema may pick any of the Kafka columns (with their types)."""
    full = {f.name: f.dataType for f in kafka_schema(True).fields}
    for f in schema.fields:
        if full.get(f.name) != f.dataType:
            raise RaftlogOptionError(
                f"schema: column {f.name} {f.dataType.simpleString()} is not one of the "
                f"raftlog source's columns ({kafka_schema(True).simpleString()})"
            )


class RaftlogBatchReader(DataSourceReader):
    """Plans one range per partition (split by minPartitions) once, on the driver."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        _check_read_schema(schema)
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        ranges = plan_batch(self.opts)
        # Spark needs at least one task; an empty range reads nothing.
        return [RangePartition(r) for r in ranges] or [RangePartition(OffsetRange("", 0, 0, 0))]

    def read(self, partition: InputPartition):
        return read_range(self.opts, partition.value, self.schema)


def plan_batch(opts: ReadOptions) -> list[OffsetRange]:
    log = _Log(opts.bootstrap_servers)
    try:
        tps = log.resolve(opts.subscription)
        earliest, latest = log.earliest(tps), log.latest(tps)
        start = resolve_offsets(
            opts.starting,
            tps,
            earliest,
            latest,
            log.for_times,
            timestamp_strategy=opts.starting_timestamp_strategy,
        )
        end = resolve_offsets(opts.ending, tps, earliest, latest, log.for_times, ending=True)
    finally:
        log.close()
    ranges = plan_batch_ranges(
        start,
        end,
        earliest,
        latest,
        fail_on_data_loss=opts.fail_on_data_loss,
        ending_option=opts.ending.option,
    )
    return split_ranges(ranges, opts.min_partitions)


class RaftlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; the stream offset is {"topic": {"p": offset}}.

    Lives in one driver-side process for the whole query (so ``_target`` survives
    between calls); ``read`` runs in tasks on a pickled copy.
    """

    def __init__(self, opts: ReadOptions, schema: StructType):
        _check_read_schema(schema)
        self.opts = opts
        self.schema = schema
        self._target: dict[TP, int] | None = None  # availableNow: never read past it

    def initialOffset(self) -> dict:
        log = _Log(self.opts.bootstrap_servers)
        try:
            tps = log.resolve(self.opts.subscription)
            earliest, latest = log.earliest(tps), log.latest(tps)
            start = resolve_offsets(
                self.opts.starting,
                tps,
                earliest,
                latest,
                log.for_times,
                timestamp_strategy=self.opts.starting_timestamp_strategy,
            )
        finally:
            log.close()
        return offsets_to_json(start)

    def _latest(self) -> dict[TP, int]:
        log = _Log(self.opts.bootstrap_servers)
        try:
            return log.latest(log.resolve(self.opts.subscription))
        finally:
            log.close()

    def getDefaultReadLimit(self):
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        latest = dict(self._target) if self._target is not None else self._latest()
        if start is None:  # pyspark < 4.2 calls latestOffset() without arguments
            return offsets_to_json(latest)
        begin = offsets_from_json(start)
        gone = sorted(set(begin) - set(latest))
        if gone and self.opts.fail_on_data_loss:
            raise DataLossError(
                "partitions were deleted: "
                + ", ".join(f"{t}-{p}" for t, p in gone)
                + "; set failOnDataLoss=false to go on without them"
            )
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        # A partition whose high watermark went below ``begin`` (truncated, recreated)
        # stays in: planning the batch reports it as data loss, or skips it.
        return offsets_to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        log = _Log(self.opts.bootstrap_servers)
        try:
            earliest = log.earliest(sorted(until))
        finally:
            log.close()
        ranges = plan_stream_ranges(
            begin, until, earliest, fail_on_data_loss=self.opts.fail_on_data_loss
        )
        return [RangePartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition):
        return read_range(self.opts, partition.value, self.schema)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint, as with Kafka's source

    def stop(self) -> None:
        pass


class RaftlogWriter(DataSourceArrowWriter):
    """Batch writes: each task sends its rows with one idempotent producer."""

    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator) -> WriteCommit:
        return write_batches(self.opts, iterator)

    def commit(self, messages) -> None:
        pass  # every record was acknowledged before its task returned

    def abort(self, messages) -> None:
        pass  # acknowledged records stay (no transactions, as Kafka's sink)


if DataSourceStreamArrowWriter is not None:

    class RaftlogStreamWriter(DataSourceStreamArrowWriter):
        """Streaming writes (at-least-once, as Kafka's sink)."""

        def __init__(self, opts: WriteOptions):
            self.opts = opts

        def write(self, iterator) -> WriteCommit:
            return write_batches(self.opts, iterator)

        def commit(self, messages, batchId: int) -> None:
            pass

        def abort(self, messages, batchId: int) -> None:
            pass


def register(spark) -> None:
    """Make ``format("raftlog")`` available in this SparkSession."""
    spark.dataSource.register(RaftlogDataSource)


def local_session(app_name: str = "raftlog", master: str = "local[2]", **conf):
    """A local SparkSession whose Python workers are this interpreter (so they import
    raftlog), bound to 127.0.0.1, with ``format("raftlog")`` registered.

    Sets PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON and SPARK_LOCAL_IP unless already set;
    they must be set before the first SparkSession of the process starts its JVM.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = SparkSession.builder.appName(app_name).master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.host": "127.0.0.1",
    }
    for k, v in {**defaults, **conf}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    register(spark)
    return spark
