"""The PySpark data source: its public names, Arrow conversion with Spark's schema, then a
real local Spark against a real node. The pure planning logic (raftlog.client.spark_plan)
is tested without pyspark in test_spark_plan.py.

The Spark tests share one SparkSession (local[2]) and one node per module, and are
marked slow. They need the ``spark`` extra and Java 17.
"""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("CI"):  # CI installs the spark extra and Java: a missing one is a failure
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
else:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")

import raftlog.client.spark as spark_source  # noqa: E402
import raftlog.client.spark_plan as spark_plan  # noqa: E402
from raftlog.client.spark import (  # noqa: E402
    DataLossError,
    OffsetRange,
    _arrow_schema,
    _records_to_arrow,
    kafka_schema,
    parse_read_options,
)
from raftlog.records import Record  # noqa: E402

from ..conftest import NodeProcess, free_port  # noqa: E402

# ====================================================================== public names


def test_names_moved_to_spark_plan_are_reexported():
    """``from raftlog.client.spark import X`` keeps working for every name that moved."""
    for name in spark_plan.__all__:
        assert getattr(spark_source, name) is getattr(spark_plan, name), name
    assert spark_source.__all__ == [
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
    assert spark_source.RaftlogDataSource.name() == "raftlog"
    for name in ("kafka_schema", "plan_batch", "read_range", "write_batches", "WriteCommit"):
        assert hasattr(spark_source, name), name


# ====================================================================== arrow conversion


def test_records_to_arrow_schema_and_values():
    recs = [
        Record("t", 3, 7, 1_700_000_000_123, b"k", b"v", (("h", b"x"), ("n", None))),
        Record("t", 3, 8, 1_700_000_000_124, None, None, ()),
    ]
    b = _records_to_arrow(recs, _arrow_schema(kafka_schema()))
    rows = b.to_pylist()
    assert [r["offset"] for r in rows] == [7, 8]
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] == [] and rows[1]["key"] is None
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123
    no_headers = _records_to_arrow(recs[1:], _arrow_schema(kafka_schema(False)))
    assert no_headers.schema.names[-1] == "timestampType"


# ====================================================================== real Spark, real node


@pytest.fixture(scope="module")
def rnode(tmp_path_factory):
    n = NodeProcess(str(tmp_path_factory.mktemp("spark-node")), free_port())
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="session")
def spark():
    from raftlog.client.spark import local_session

    s = local_session("raftlog-tests", "local[2]")
    yield s
    s.stop()


def _create(node, topic, partitions):
    from raftlog.client import Admin

    with Admin(node.bootstrap) as a:
        a.create_topic(topic, partitions=partitions)


def _produce(node, topic, n, partition=None, start=0):
    from raftlog.client import Producer

    with Producer(node.bootstrap, linger_ms=5) as p:
        for i in range(start, start + n):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=partition)


def _reader(spark, node, **opts):
    r = spark.read.format("raftlog").option("bootstrap.servers", node.bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


@pytest.mark.slow
def test_write_then_read_100k_rows_equal(spark, rnode):
    from raftlog.client.partitioner import partition_for_key

    _create(rnode, "big", 4)
    df = spark.range(100_000).selectExpr(
        "CAST(id AS STRING) AS key",
        "CAST(concat('value-', id) AS BINARY) AS value",
        "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers",
        # half of the rows name their partition, the others are partitioned by key
        "CASE WHEN id % 2 = 0 THEN CAST(id % 4 AS INT) END AS partition",
    )
    df.write.format("raftlog").option("bootstrap.servers", rnode.bootstrap).option(
        "topic", "big"
    ).mode("append").save()

    got = _reader(spark, rnode, subscribe="big")
    assert got.schema == kafka_schema()
    assert got.rdd.getNumPartitions() == 4
    rows = got.select("key", "value", "headers", "partition", "offset").collect()
    assert len(rows) == 100_000
    by_key = {bytes(r.key).decode(): r for r in rows}
    assert len(by_key) == 100_000
    for i in (0, 1, 2, 3, 77_777, 99_999):
        r = by_key[str(i)]
        assert bytes(r.value) == b"value-%d" % i
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("id", str(i).encode())]
        want = i % 4 if i % 2 == 0 else partition_for_key(str(i).encode(), 4)
        assert r.partition == want
    mismatched = [
        k
        for k, r in by_key.items()
        if bytes(r.value) != b"value-" + k.encode()
        or r.partition != (int(k) % 4 if int(k) % 2 == 0 else partition_for_key(k.encode(), 4))
    ]
    assert mismatched == []
    # offsets of each partition are 0..n-1 with no gap or duplicate
    per = got.groupBy("partition").agg({"offset": "max", "*": "count"}).collect()
    assert sorted(r["count(1)"] - 1 for r in per) == sorted(r["max(offset)"] for r in per)


@pytest.mark.slow
def test_offset_ranges_and_min_partitions(spark, rnode):
    _create(rnode, "ranges", 2)
    _produce(rnode, "ranges", 100, partition=0)
    _produce(rnode, "ranges", 50, partition=1, start=100)
    df = _reader(
        spark,
        rnode,
        subscribe="ranges",
        startingOffsets='{"ranges": {"0": 10, "1": -2}}',
        endingOffsets='{"ranges": {"0": 60, "1": -1}}',
    )
    offs = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offs == [(0, o) for o in range(10, 60)] + [(1, o) for o in range(50)]

    split = _reader(spark, rnode, assign='{"ranges": [0]}', minPartitions="5")
    assert split.rdd.getNumPartitions() == 5
    assert sorted(r.offset for r in split.select("offset").collect()) == list(range(100))

    empty = _reader(
        spark, rnode, subscribe="ranges", startingOffsets='{"ranges": {"0": -1, "1": 50}}'
    )
    # -1 is not allowed in batch startingOffsets, as in Spark's Kafka source
    with pytest.raises(Exception, match="startingOffsets"):
        empty.count()
    later = _reader(
        spark,
        rnode,
        subscribe="ranges",
        startingTimestamp=str(int(time.time() * 1000) + 60_000),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert later.count() == 0


@pytest.mark.slow
def test_bad_options_fail_naming_the_option(spark, rnode):
    with pytest.raises(Exception, match="'subscribe': topic 'nope' does not exist"):
        _reader(spark, rnode, subscribe="nope").count()
    with pytest.raises(Exception, match="bootstrap.servers"):
        spark.read.format("raftlog").option("subscribe", "x").load().count()
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.range(3).write.format("raftlog").option("bootstrap.servers", rnode.bootstrap).option(
            "topic", "ranges"
        ).mode("append").save()


@pytest.mark.slow
def test_stream_available_now_resumes_from_checkpoint(spark, rnode, tmp_path):
    _create(rnode, "stream", 3)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run(**extra):
        r = (
            spark.readStream.format("raftlog")
            .option("bootstrap.servers", rnode.bootstrap)
            .option("subscribe", "stream")
            .option("startingOffsets", "earliest")
        )
        for k, v in extra.items():
            r = r.option(k, v)
        q = (
            r.load()
            .selectExpr("CAST(key AS STRING) AS key", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return q

    _produce(rnode, "stream", 300)
    run()
    assert spark.read.parquet(out).count() == 300
    q = run()  # nothing new: no new rows
    assert spark.read.parquet(out).count() == 300
    _produce(rnode, "stream", 200, start=300)
    q = run(maxOffsetsPerTrigger="80")  # resumes at the checkpoint, in batches of <= 80
    rows = spark.read.parquet(out).collect()
    assert sorted(int(r.key[1:]) for r in rows) == list(range(500))  # no loss, no duplicate
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 200 and max(sizes) <= 80 + 3


@pytest.mark.slow
def test_stream_subscribe_pattern_picks_up_new_topics(spark, rnode, tmp_path):
    _create(rnode, "pat-a", 1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run():
        q = (
            spark.readStream.format("raftlog")
            .option("bootstrap.servers", rnode.bootstrap)
            .option("subscribePattern", "pat-.*")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("topic", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return sorted((r.topic, r.value) for r in spark.read.parquet(out).collect())

    _produce(rnode, "pat-a", 5)
    assert run() == [("pat-a", f"v{i}") for i in range(5)]
    _create(rnode, "pat-b", 2)  # created while the query is between runs
    _create(rnode, "other", 1)  # does not match
    _produce(rnode, "pat-b", 4, partition=1)
    _produce(rnode, "other", 3)
    got = run()  # exactly the new records: the new topic from its start, nothing twice
    assert got == sorted([("pat-a", f"v{i}") for i in range(5)]
                         + [("pat-b", f"v{i}") for i in range(4)])


@pytest.mark.slow
def test_stream_write_topic_to_topic(spark, rnode, tmp_path):
    from raftlog.client import Consumer, TopicPartition

    _create(rnode, "src", 2)
    _create(rnode, "dst", 1)
    _produce(rnode, "src", 100)
    q = (
        spark.readStream.format("raftlog")
        .option("bootstrap.servers", rnode.bootstrap)
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("raftlog")
        .option("bootstrap.servers", rnode.bootstrap)
        .option("topic", "dst")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    c = Consumer(rnode.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("dst", 0)])
    got, deadline = [], time.monotonic() + 10
    while len(got) < 100 and time.monotonic() < deadline:
        got += c.poll(timeout_ms=200)
    c.close()
    assert sorted(r.value for r in got) == sorted(b"V%d" % i for i in range(100))


@pytest.mark.slow
def test_data_loss_after_retention_without_spark(node_factory):
    """Planning and the task reader against a log whose head was deleted by retention."""
    from raftlog.client import Admin, Consumer, TopicPartition
    from raftlog.client.spark import plan_batch, read_range

    node = node_factory(**{"log.retention.check.interval.ms": "100"})
    with Admin(node.bootstrap) as a:
        a.create_topic(
            "ret", partitions=1, config={"segment.bytes": "2000", "retention.bytes": "4000"}
        )
    from raftlog.client import Producer

    with Producer(node.bootstrap) as p:
        for _ in range(30):  # 30 batches of ~1.2 KB: a segment rolls every two
            p.send_many("ret", [b"x" * 100] * 10, partition=0).result(10)
    c = Consumer(node.bootstrap)
    tp = TopicPartition("ret", 0)
    # retention deletes segment by segment as they become eligible (below the high
    # watermark, after group commit): wait until the log start has stopped moving -- the
    # same for 5 reads 0.2 s apart, 10 retention checks
    deadline, seen = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        seen.append(c.beginning_offsets([tp])[tp])
        if seen[-1] > 0 and len(seen) >= 5 and len(set(seen[-5:])) == 1:
            break
        time.sleep(0.2)
    log_start = seen[-1]
    c.close()
    assert 0 < log_start < 300
    opts = {"bootstrap.servers": node.bootstrap, "subscribe": "ret"}
    from_zero = {**opts, "startingOffsets": '{"ret": {"0": 0}}'}
    with pytest.raises(DataLossError, match=f"offsets 0..{log_start - 1} were deleted"):
        plan_batch(parse_read_options(from_zero))
    lenient = parse_read_options({**from_zero, "failOnDataLoss": "false"})
    assert plan_batch(lenient) == [OffsetRange("ret", 0, log_start, 300)]
    # a task whose range was planned before retention ran: fails, or skips the gap
    stale = OffsetRange("ret", 0, 0, 300)
    with pytest.raises(DataLossError):
        list(read_range(parse_read_options(opts), stale, kafka_schema()))
    got = [r for b in read_range(lenient, stale, kafka_schema()) for r in b.to_pylist()]
    assert [r["offset"] for r in got] == list(range(log_start, 300))
