"""Planning half of the raftlog Spark data source: no pyspark here.

Everything :mod:`raftlog.client.spark` does that needs no Spark lives in this module, so
it imports and unit-tests on a machine without pyspark:

- option parsing and validation (``parse_read_options``, ``parse_write_options``), with
  the option names and defaults of Spark's Kafka source;
- offset resolution and range planning (``resolve_offsets``, ``plan_batch_ranges``,
  ``plan_stream_ranges``, ``split_ranges``, ``rate_limit``) and the stream offset's JSON
  form: pure functions, no sockets;
- the driver's questions to the log (``plan_batch`` and its ``_Log``), through the public
  client API only (Admin, Consumer);
- conversion between records and Arrow batches (``_records_to_arrow`` for reads,
  ``_batch_groups`` for writes): pyarrow, imported only when called.

:mod:`raftlog.client.spark` re-exports the public names, so
``from raftlog.client.spark import parse_read_options`` keeps working.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "EARLIEST",
    "LATEST",
    "POLL_TIMEOUT_MS_DEFAULT",
    "TP",
    "DataLossError",
    "OffsetRange",
    "OffsetSpec",
    "RaftlogOptionError",
    "ReadOptions",
    "Subscription",
    "WriteOptions",
    "offsets_from_json",
    "offsets_to_json",
    "parse_partition_map",
    "parse_read_options",
    "parse_write_options",
    "plan_batch",
    "plan_batch_ranges",
    "plan_stream_ranges",
    "rate_limit",
    "resolve_offsets",
    "split_ranges",
]

#: Offsets in startingOffsets/endingOffsets JSON, as Kafka's.
EARLIEST = -2
LATEST = -1
#: Spark's default for kafkaConsumer.pollTimeoutMs (spark.network.timeout).
POLL_TIMEOUT_MS_DEFAULT = 120_000

TP = tuple[str, int]  # (topic, partition): plain tuples pickle and sort cheaply


class RaftlogOptionError(ValueError):
    """A bad data source option; the message names the option."""


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention, truncation, a deleted topic) and
    failOnDataLoss is true."""


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
    #: TLS/SASL client options from kafka.security.protocol, kafka.sasl.* ... (see
    #: client/security.py), for every client the source opens
    security: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    producer_config: tuple[tuple[str, object], ...] = ()
    security: tuple[tuple[str, object], ...] = ()


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands a case-insensitive dict; plain dicts (tests, users) get the same treatment.
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bootstrap(opts: dict[str, str]) -> str:
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers or not servers.replace(",", "").strip():
        raise RaftlogOptionError(
            "option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required, "
            "e.g. .option('bootstrap.servers', '127.0.0.1:9092')"
        )
    from .conn import parse_servers  # (the SDK's own reading: empty entries skipped)

    try:
        parse_servers(servers)
    except ValueError as e:
        raise RaftlogOptionError(f"option 'bootstrap.servers': {e}") from None
    return servers.strip()


def _security(opts: dict[str, str]) -> tuple:
    """Client security options from Kafka's property names, with or without the
    ``kafka.`` prefix (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ...)."""
    from .security import option_from_property

    out = {}
    for key, value in opts.items():
        item = option_from_property(key[6:] if key.startswith("kafka.") else key, value)
        if item is not None:
            out[item[0]] = item[1]
    return tuple(sorted(out.items()))


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


#: The options a reader / a writer takes (Spark's Kafka source's names, case-insensitive),
#: to name the nearest when one is misspelt.
_READ_OPTIONS = ("bootstrap.servers", "kafka.bootstrap.servers", "subscribe",
                 "subscribePattern", "assign", "startingOffsets", "endingOffsets",
                 "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
                 "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
                 "failOnDataLoss", "minPartitions", "maxOffsetsPerTrigger", "includeHeaders",
                 "kafkaConsumer.pollTimeoutMs", "pollTimeoutMs", *_CONSUMER_KEYS)
_WRITE_OPTIONS = ("bootstrap.servers", "kafka.bootstrap.servers", "topic", "kafka.acks",
                  "kafka.compression.type", *_PRODUCER_INT_KEYS)
#: Spark's and Kafka's own option names that this source and sink do not use but a user
#: may rightly pass (ignored, as before): never taken for a typo of a near one
#: (minOffsetsPerTrigger is not a misspelt maxOffsetsPerTrigger).
_IGNORED_OPTIONS = ("minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix",
                    "kafka.group.id", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
                    "maxRecordsPerPartition", "kafka.fetch.min.bytes",
                    "kafka.max.poll.records", "kafka.session.timeout.ms",
                    "kafka.heartbeat.interval.ms", "kafka.max.request.size",
                    "kafka.max.block.ms", "kafka.retries", "kafka.client.id")


def _refuse_misspelt(opts: dict[str, str], names: tuple) -> None:
    """RaftlogOptionError for an option that is none of ``names`` but close to one.
    Options nobody reads are ignored (as by Spark's Kafka source), so a misspelt
    ``startingOffset`` would silently read from the default; options close to none
    (or security properties, ``_security``) pass."""
    from .security import option_from_property

    known = {n.lower(): n for n in names}
    ignored = {n.lower() for n in _IGNORED_OPTIONS}
    for key in opts:
        if key in known or key in ignored or option_from_property(
                key[6:] if key.startswith("kafka.") else key, "") is not None:
            continue
        near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.85)
        if near:
            raise RaftlogOptionError(f"unknown option {key!r} (did you mean "
                                     f"{known[near[0]]!r}?)")


def parse_read_options(options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
    """Validate reader options; RaftlogOptionError names the bad option."""
    opts = _lower(options)
    _refuse_misspelt(opts, _READ_OPTIONS)
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
        security=_security(opts),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate writer options. Every task's producer is idempotent with acks=all."""
    opts = _lower(options)
    _refuse_misspelt(opts, _WRITE_OPTIONS)
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
        security=_security(opts),
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


# ====================================================================== the log (client API)


class _Log:
    """Driver-side questions about the log, through the public client API only."""

    def __init__(self, bootstrap_servers: str, security: tuple = ()):
        from raftlog.client import Admin, Consumer

        self.admin = Admin(bootstrap_servers, **dict(security))
        self.consumer = Consumer(bootstrap_servers, **dict(security))

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


def plan_batch(opts: ReadOptions) -> list[OffsetRange]:
    """A batch read's input ranges: the subscription and the starting/ending offsets
    resolved against the log now, checked (``plan_batch_ranges``) and split by
    ``minPartitions``. Runs on the driver."""
    log = _Log(opts.bootstrap_servers, opts.security)
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


# ====================================================================== Arrow conversion
# pyarrow is imported inside the functions: it comes with the ``spark`` extra.


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
