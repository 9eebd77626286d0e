"""The planning half of the Spark data source (raftlog.client.spark_plan): option parsing,
offset resolution, range planning and splitting, and the sink's grouping of Arrow rows.

No pyspark needed: these run on any machine (the Arrow test needs pyarrow, which comes with
the ``spark`` extra). The Spark data source itself is tested in test_spark.py.
"""

from __future__ import annotations

import os

import pytest

from raftlog.client.spark_plan import (
    DataLossError,
    OffsetRange,
    OffsetSpec,
    RaftlogOptionError,
    Subscription,
    _batch_groups,
    _records_to_arrow,
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
from raftlog.records import Record


def _pyarrow():
    if os.environ.get("CI"):  # CI installs the spark extra: a missing pyarrow is a failure
        import pyarrow

        return pyarrow
    return pytest.importorskip("pyarrow")


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
    # empty entries are skipped as Kafka's clients skip them; none left is no list at all
    assert parse_read_options({"bootstrap.servers": "h:1,", "subscribe": "t"}).bootstrap_servers
    with pytest.raises(RaftlogOptionError, match="'bootstrap.servers'.*required"):
        parse_read_options({"bootstrap.servers": " , ", "subscribe": "t"})


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


def test_batch_groups_for_the_sink():
    pa = _pyarrow()
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


def test_records_to_arrow_with_a_pyarrow_schema():
    """The reader's conversion needs only pyarrow: any subset of the columns, in order."""
    pa = _pyarrow()
    recs = [
        Record("t", 3, 7, 1_700_000_000_123, b"k", b"v", (("h", b"x"),)),
        Record("t", 3, 8, 1_700_000_000_124, None, None, ()),
    ]
    schema = pa.schema(
        [
            ("offset", pa.int64()),
            ("value", pa.binary()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("partition", pa.int32()),
        ]
    )
    b = _records_to_arrow(recs, schema)
    assert b.schema == schema
    rows = b.to_pylist()
    assert [(r["offset"], r["value"], r["partition"]) for r in rows] == [(7, b"v", 3), (8, None, 3)]
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123


def test_security_options_pass_through_to_every_client():
    from raftlog.client.spark_plan import parse_read_options, parse_write_options

    opts = {"bootstrap.servers": "127.0.0.1:9093", "subscribe": "t",
            "kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.location": "/ca.pem",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "u",
            "kafka.sasl.password": "p", "kafka.ssl.endpoint.identification.algorithm": ""}
    want = (("sasl_mechanism", "SCRAM-SHA-512"), ("sasl_plain_password", "p"),
            ("sasl_plain_username", "u"), ("security_protocol", "SASL_SSL"),
            ("ssl_cafile", "/ca.pem"), ("ssl_check_hostname", False))
    assert parse_read_options(opts).security == want
    assert parse_write_options({**opts, "topic": "t"}).security == want
    assert parse_read_options({"bootstrap.servers": "h:1", "subscribe": "t"}).security == ()


@pytest.mark.parametrize("typo, meant", [
    ("startingOffset", "startingOffsets"), ("subscibe", "subscribe"),
    ("failOnDataLos", "failOnDataLoss"), ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
])
def test_a_misspelt_reader_option_names_the_one_meant(typo, meant):
    """A typo would otherwise be ignored (as by Spark's Kafka source) and read from the
    default; options close to no known one pass, as do security properties."""
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    with pytest.raises(RaftlogOptionError, match=f"unknown option {typo.lower()!r} "
                                                 f"\\(did you mean {meant!r}\\?\\)"):
        parse_read_options({**base, typo: "earliest"}, streaming=True)
    opts = parse_read_options({**base, "someOtherEngineOption": "x",
                               "minOffsetsPerTrigger": "10", "kafka.fetch.min.bytes": "1",
                               "kafka.security.protocol": "SASL_SSL",
                               "kafka.sasl.mechanism": "SCRAM-SHA-256"})
    assert dict(opts.security)["security_protocol"] == "SASL_SSL"


def test_a_misspelt_writer_option_names_the_one_meant():
    with pytest.raises(RaftlogOptionError, match=r"did you mean 'kafka.linger.ms'"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.linger.msec": "5"})
    with pytest.raises(RaftlogOptionError, match=r"did you mean 'topic'"):
        parse_write_options({"bootstrap.servers": "h:1", "topics": "t"})
