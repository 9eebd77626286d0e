"""Consumer and bulk producer paths against a real node process."""

from __future__ import annotations

import time

import pytest

from raftlog.client import (
    Admin,
    Consumer,
    OffsetOutOfRangeError,
    Producer,
    TopicPartition,
)
from raftlog.client.partitioner import partition_for_key


def _poll_until(c: Consumer, n: int, timeout_s: float = 10.0) -> list:
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += c.poll(timeout_ms=200, max_records=100_000)
    return out


def test_many_partitions_one_consumer_keeps_each_partition_in_order(node):
    Admin(node.bootstrap).create_topic("multi", partitions=3)
    with Producer(node.bootstrap, acks="all", linger_ms=1) as p:
        for i in range(3000):
            p.send("multi", b"%d" % i, key=b"k%d" % (i % 7))
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition("multi", i) for i in range(3)])
    recs = _poll_until(c, 3000)
    c.close()
    assert len(recs) == 3000
    for part in range(3):
        mine = [r for r in recs if r.partition == part]
        assert [r.offset for r in mine] == list(range(len(mine)))
        assert all(partition_for_key(r.key, 3) == part for r in mine)
        values = [int(r.value) for r in mine]
        assert values == sorted(values)  # send order kept within a partition


def test_send_many_with_keys_spreads_by_key(node):
    Admin(node.bootstrap).create_topic("keyed", partitions=4)
    keys = [b"user-%d" % (i % 13) for i in range(1000)]
    with Producer(node.bootstrap, acks=1) as p:
        futures = p.send_many("keyed", [b"v"] * 1000, keys=keys)
        metas = [f.result(10) for f in futures]
    assert sum(m.count for m in metas) == 1000
    expected = {partition_for_key(k, 4) for k in keys}
    assert {m.partition for m in metas} == expected


def test_out_of_range_position_resets_or_raises(node):
    Admin(node.bootstrap).create_topic("oor")
    with Producer(node.bootstrap, acks=1) as p:
        p.send_many("oor", [b"a", b"b", b"c"], partition=0).result(10)
    tp = TopicPartition("oor", 0)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([tp])
    c.seek(tp, 1000)
    assert [r.value for r in _poll_until(c, 3)] == [b"a", b"b", b"c"]
    c.close()
    strict = Consumer(node.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=100)
    strict.assign([tp])
    strict.seek(tp, 1000)
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        _poll_until(strict, 1, timeout_s=5)
    strict.close()


def test_seek_during_a_long_poll_takes_effect(node):
    Admin(node.bootstrap).create_topic("seek")
    with Producer(node.bootstrap, acks=1) as p:
        p.send_many("seek", [b"%d" % i for i in range(10)], partition=0).result(10)
    tp = TopicPartition("seek", 0)
    c = Consumer(node.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=1000)
    c.assign([tp])
    assert c.poll(timeout_ms=300) == []  # at the end: a long-poll is now waiting
    c.seek(tp, 4)
    assert [r.offset for r in _poll_until(c, 6)] == [4, 5, 6, 7, 8, 9]
    c.close()


def test_iteration_and_group_features_are_clear(node):
    Admin(node.bootstrap).create_topic("it")
    with Producer(node.bootstrap, acks=1) as p:
        p.send_many("it", [b"x", b"y"], partition=0).result(10)
    with pytest.raises(ValueError, match="group_id"):
        Consumer(node.bootstrap).subscribe(["it"])
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", group_id="g")
    with pytest.raises(ValueError, match="either"):
        c.subscribe(["it"], pattern="i.*")
    c.assign([TopicPartition("it", 0)])
    got = []
    for r in c:
        got.append(r.value)
        if len(got) == 2:
            break
    assert got == [b"x", b"y"]
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.poll()
