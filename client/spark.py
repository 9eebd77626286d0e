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

The planning half (option parsing, offset resolution, range planning and splitting, rate
limiting, the driver's questions to the log, record <-> Arrow conversion) lives in
:mod:`raftlog.client.spark_plan`, which needs no pyspark; the names that moved there are
re-exported here. This module holds the pyspark classes and the I/O of Spark's tasks.

What is durable when: a batch write (or a streaming micro-batch) succeeds only once every
record is acknowledged with acks=all; a failed task may leave some of its records written
(as Spark's Kafka sink: at-least-once, Spark's retry of the task can duplicate them).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
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

# The names that moved to spark_plan, all re-exported: ``from raftlog.client.spark import X``
# keeps working for each of them (F401: some are not used here).
from .spark_plan import (  # noqa: F401
    EARLIEST,
    LATEST,
    POLL_TIMEOUT_MS_DEFAULT,
    TP,
    DataLossError,
    OffsetRange,
    OffsetSpec,
    RaftlogOptionError,
    ReadOptions,
    Subscription,
    WriteOptions,
    _batch_groups,
    _bool,
    _check_start,
    _Log,
    _lower,
    _records_to_arrow,
    offsets_from_json,
    offsets_to_json,
    parse_partition_map,
    parse_read_options,
    parse_write_options,
    plan_batch,
    plan_batch_ranges,
    plan_stream_ranges,
    rate_limit,
    resolve_offsets,
    split_ranges,
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


# ====================================================================== I/O of a reading task


class RangePartition(InputPartition):
    """One Spark input partition: an OffsetRange (picklable: plain values only)."""

    def __init__(self, rng: OffsetRange):
        super().__init__(rng)


def _arrow_schema(schema: StructType):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


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
    config.update(dict(opts.security))
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


def write_batches(opts: WriteOptions, batches: Iterable) -> WriteCommit:
    """Send every row with one idempotent producer (acks=all); return only when all are
    acknowledged, else raise naming how many failed and the first error."""
    from raftlog.client import Producer

    config = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
    config.update(dict(opts.producer_config))
    config.update(dict(opts.security))
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
        log = _Log(self.opts.bootstrap_servers, self.opts.security)
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
        log = _Log(self.opts.bootstrap_servers, self.opts.security)
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
        log = _Log(self.opts.bootstrap_servers, self.opts.security)
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
