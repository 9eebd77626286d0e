"""The PySpark data source: pure planning logic, then a real local Spark against a real node.

The Spark tests share one SparkSession (local[2]) and one node per module, and are
marked slow. They need the ``spark`` extra and Java 17.
"""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("CI"):  # CI installs the spark extra and Java: a missing one is a failure
    import pyarrow as pa
    import pyspark  # noqa: F401
else:
    pytest.importorskip("pyspark")
    pa = pytest.importorskip("pyarrow")

from raftlog.client.spark import (  # noqa: E402
    DataLossError,
    OffsetRange,
    OffsetSpec,
    RaftlogOptionError,
    Subscription,
    _arrow_schema,
    _batch_groups,
    _records_to_arrow,
    kafka_schema,
    offsets_from_json,
    offsets_to_json,
    parse_read_options,
    parse_write_options,
    plan_batch_ranges,
    plan_stream_ranges,
    rate_limit,
    resolve_offsets,
    split_ranges,
)
from raftlog.records import Record  # noqa: E402

from ..conftest import NodeProcess, free_port  # noqa: E402

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


# ====================================================================== options


def test_bootstrap_servers_required_and_checked():
    with pytest.raises(RaftlogOptionError, match="'bootstrap.servers'"):
        parse_read_options({"subscribe": "t"})
    with pytest.raises(RaftlogOptionError, match="'bootstrap.servers'"):
        parse_write_options({"topic": "t"})
    with pytest.raises(RaftlogOptionError, match="not host:port"):
        parse_read_options({"bootstrap.servers": "nohost", "subscribe": "t"})
    o = parse_read_options({"kafka.bootstrap.servers": "h:1,h:2", "subscribe": "t"})
    assert o.bootstrap_servers == "h:1,h:2"


def test_exactly_one_subscription():
    with pytest.raises(RaftlogOptionError, match="exactly one.*none"):
        parse_read_options(BOOT)
    with pytest.raises(RaftlogOptionError, match="given: subscribe, assign"):
        parse_read_options({**BOOT, "subscribe": "t", "assign": '{"t": [0]}'})
    assert parse_read_options({**BOOT, "subscribe": "a, b,a"}).subscription.topics == ("a", "b")
    sub = parse_read_options({**BOOT, "assign": '{"a": [1, 0], "b": [2]}'}).subscription
    assert sub.partitions == (("a", 1), ("a", 0), ("b", 2))
    with pytest.raises(RaftlogOptionError, match="'assign': invalid JSON"):
        parse_read_options({**BOOT, "assign": "{a: [0]}"})
    with pytest.raises(RaftlogOptionError, match="'assign'.*list of partition"):
        parse_read_options({**BOOT, "assign": '{"a": 0}'})
    with pytest.raises(RaftlogOptionError, match="'subscribePattern': bad regex"):
        parse_read_options({**BOOT, "subscribePattern": "a("})


def test_option_names_are_case_insensitive_and_typed():
    o = parse_read_options(
        {**BOOT, "SUBSCRIBE": "t", "minpartitions": "8", "FailOnDataLoss": "False"}
    )
    assert (o.min_partitions, o.fail_on_data_loss) == (8, False)
    with pytest.raises(RaftlogOptionError, match="'minPartitions' must be an integer"):
        parse_read_options({**BOOT, "subscribe": "t", "minPartitions": "many"})
    with pytest.raises(RaftlogOptionError, match="'failOnDataLoss' must be true or false"):
        parse_read_options({**BOOT, "subscribe": "t", "failOnDataLoss": "yes"})
    with pytest.raises(RaftlogOptionError, match="'maxOffsetsPerTrigger' is for streaming"):
        parse_read_options({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "10"})
    s = parse_read_options({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "10"}, True)
    assert s.max_offsets_per_trigger == 10


def test_offset_options_as_spark_kafka():
    b = parse_read_options({**BOOT, "subscribe": "t"})
    assert (b.starting.kind, b.ending.kind) == ("earliest", "latest")
    s = parse_read_options({**BOOT, "subscribe": "t"}, streaming=True)
    assert (s.starting.kind, s.ending) == ("latest", None)
    j = parse_read_options(
        {**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": 23, "1": -2}}'}
    )
    assert j.starting == OffsetSpec("offsets", "startingOffsets", ((("t", 0), 23), (("t", 1), -2)))
    with pytest.raises(RaftlogOptionError, match="'startingOffsets' cannot be 'latest'"):
        parse_read_options({**BOOT, "subscribe": "t", "startingOffsets": "latest"})
    with pytest.raises(RaftlogOptionError, match="'endingOffsets' cannot be 'earliest'"):
        parse_read_options({**BOOT, "subscribe": "t", "endingOffsets": "earliest"})
    with pytest.raises(RaftlogOptionError, match="'startingOffsets': value -1 for t-0"):
        parse_read_options({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'})
    with pytest.raises(RaftlogOptionError, match="'endingOffsets': value -2"):
        parse_read_options({**BOOT, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'})
    with pytest.raises(RaftlogOptionError, match="'startingOffsets': invalid JSON"):
        parse_read_options({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {0: 1}}'})
    with pytest.raises(RaftlogOptionError, match="'endingOffsets' is for batch"):
        parse_read_options({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, True)
    ts = parse_read_options(
        {**BOOT, "subscribe": "t", "startingTimestamp": "1000", "startingOffsets": "earliest"}
    )
    assert ts.starting == OffsetSpec("timestamp", "startingTimestamp", timestamp_ms=1000)


def test_write_options():
    w = parse_write_options({**BOOT, "topic": "t", "kafka.linger.ms": "20"})
    assert (w.topic, dict(w.producer_config)) == ("t", {"linger_ms": 20})
    with pytest.raises(RaftlogOptionError, match="'kafka.acks' must be all"):
        parse_write_options({**BOOT, "kafka.acks": "1"})
    with pytest.raises(RaftlogOptionError, match="'kafka.compression.type'"):
        parse_write_options({**BOOT, "kafka.compression.type": "snappy"})


# ====================================================================== planning

TPS = [("t", 0), ("t", 1)]
EARLY = {("t", 0): 10, ("t", 1): 0}
LATE = {("t", 0): 100, ("t", 1): 50}


def _no_times(wanted):
    raise AssertionError("not expected")


def test_resolve_offsets():
    spec = OffsetSpec("offsets", "startingOffsets", ((("t", 0), -2), (("t", 1), 7)))
    assert resolve_offsets(spec, TPS, EARLY, LATE, _no_times) == {("t", 0): 10, ("t", 1): 7}
    spec = OffsetSpec("offsets", "endingOffsets", ((("t", 0), -1),))
    with pytest.raises(RaftlogOptionError, match="'endingOffsets'.*missing t-1"):
        resolve_offsets(spec, TPS, EARLY, LATE, _no_times)
    assert resolve_offsets(OffsetSpec("latest", "x"), TPS, EARLY, LATE, _no_times) == LATE

    def times(wanted):
        assert wanted == {("t", 0): 5000, ("t", 1): 5000}
        return {("t", 0): 42, ("t", 1): None}

    spec = OffsetSpec("timestamp", "startingTimestamp", timestamp_ms=5000)
    with pytest.raises(RaftlogOptionError, match="'startingTimestamp': t-1 has no record"):
        resolve_offsets(spec, TPS, EARLY, LATE, times)
    got = resolve_offsets(spec, TPS, EARLY, LATE, times, timestamp_strategy="latest")
    assert got == {("t", 0): 42, ("t", 1): 50}
    spec = OffsetSpec("timestamp", "endingTimestamp", timestamp_ms=5000)
    assert resolve_offsets(spec, TPS, EARLY, LATE, times, ending=True) == {
        ("t", 0): 42,
        ("t", 1): 50,
    }


def test_plan_batch_ranges_checks_against_the_log():
    start, end = {("t", 0): 10, ("t", 1): 0}, dict(LATE)
    assert plan_batch_ranges(start, end, EARLY, LATE) == [
        OffsetRange("t", 0, 10, 100),
        OffsetRange("t", 1, 0, 50),
    ]
    gone = {("t", 0): 3, ("t", 1): 0}
    with pytest.raises(DataLossError, match="t-0: offsets 3..9 were deleted"):
        plan_batch_ranges(gone, end, EARLY, LATE)
    got = plan_batch_ranges(gone, end, EARLY, LATE, fail_on_data_loss=False)
    assert got[0] == OffsetRange("t", 0, 10, 100)
    with pytest.raises(RaftlogOptionError, match="'endingOffsets': offset 60 of t-1 is beyond"):
        plan_batch_ranges(start, {**end, ("t", 1): 60}, EARLY, LATE)
    with pytest.raises(RaftlogOptionError, match="starting offset 40 is after ending offset 30"):
        plan_batch_ranges({**start, ("t", 1): 40}, {**end, ("t", 1): 30}, EARLY, LATE)


def test_plan_stream_ranges():
    # a partition new in ``end`` starts at its earliest offset
    got = plan_stream_ranges({("t", 0): 20}, {("t", 0): 30, ("t", 1): 5}, {("t", 1): 2})
    assert got == [OffsetRange("t", 0, 20, 30), OffsetRange("t", 1, 2, 5)]
    with pytest.raises(DataLossError, match="deleted: t-1"):
        plan_stream_ranges({("t", 0): 1, ("t", 1): 1}, {("t", 0): 2}, {})
    with pytest.raises(DataLossError, match="went back from 9 to 4"):
        plan_stream_ranges({("t", 0): 9}, {("t", 0): 4}, {})
    assert plan_stream_ranges({("t", 0): 9}, {("t", 0): 4}, {}, fail_on_data_loss=False) == []


def test_split_ranges_like_kafka_offset_range_calculator():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 105), OffsetRange("t", 2, 7, 7)]
    assert split_ranges(ranges) == ranges[:2]  # empty ranges dropped, no split by default
    assert split_ranges(ranges, 2) == ranges[:2]
    parts = split_ranges(ranges, 11)
    by_tp: dict = {}
    for r in parts:
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    # proportional: 1000 records get 10 parts, 100 get 1; contiguous, exact cover
    assert [len(v) for v in by_tp.values()] == [10, 1]
    for orig in ranges[:2]:
        rs = by_tp[(orig.topic, orig.partition)]
        assert rs[0].start == orig.start and rs[-1].end == orig.end
        assert all(a.end == b.start for a, b in zip(rs, rs[1:]))
    assert {r.size for r in by_tp[("t", 0)]} == {100}
    # a tiny range still gets one part
    tiny = split_ranges([OffsetRange("t", 0, 0, 10_000), OffsetRange("t", 1, 0, 1)], 4)
    assert tiny[-1] == OffsetRange("t", 1, 0, 1) and len(tiny) == 5


def test_rate_limit_proportional_to_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 10}
    assert rate_limit(start, latest, 100) == {("t", 0): 90, ("t", 1): 10, ("t", 2): 10}
    assert rate_limit(start, latest, 1) == {("t", 0): 1, ("t", 1): 1, ("t", 2): 10}
    assert rate_limit(start, latest, 10**9) == latest


def test_stream_offsets_json_round_trip():
    offs = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    j = offsets_to_json(offs)
    assert j == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert offsets_from_json(j) == offs


def test_subscription_resolve():
    topics = {"ev-a": [0, 1], "ev-b": [0], "other": [0], "__consumer_offsets": [0]}
    parts = topics.__getitem__
    sub = Subscription("subscribePattern", pattern="ev-.*|__.*")
    assert sub.resolve(lambda: list(topics), parts) == [("ev-a", 0), ("ev-a", 1), ("ev-b", 0)]
    with pytest.raises(RaftlogOptionError, match="'ev-b' has no partition 3"):
        Subscription("assign", partitions=(("ev-b", 3),)).resolve(list, parts)


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


def test_batch_groups_for_the_sink():
    h = pa.array(
        [[{"key": "a", "value": b"1"}], None, []],
        pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(["x", "y", "z"]),
            "key": pa.array([b"k1", None, b"k3"]),
            "partition": pa.array([None, 2, None], pa.int32()),
            "headers": h,
        }
    )
    groups = _batch_groups(batch, "t")
    assert groups == [
        ("t", None, [b"x", b"z"], [b"k1", b"k3"], [[("a", b"1")], None]),
        ("t", 2, [b"y"], [None], [None]),
    ]
    one = pa.RecordBatch.from_pydict({"value": pa.array([b"1", b"2"]), "topic": ["u", "u"]})
    assert _batch_groups(one, None) == [("u", None, [b"1", b"2"], None, None)]


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
    deadline = time.monotonic() + 15
    while (log_start := c.beginning_offsets([tp])[tp]) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
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
