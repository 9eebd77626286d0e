"""What a producer takes as a record's key, value and headers (client/record_fields.py,
pure), what it does with the rest against a real node, and what a consumer says of a
batch it cannot decode."""

from __future__ import annotations

import time

import pytest

from raftlog import records
from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.consumer import _undecodable
from raftlog.client.record_fields import as_bytes, as_bytes_list, headers
from raftlog.errors import CorruptRecordError

from ..conftest import NodeProcess, free_port


def test_keys_and_values_are_bytes_str_as_utf8_or_refused_with_what_to_do():
    assert as_bytes("héllo", "value") == "héllo".encode()
    assert as_bytes(bytearray(b"ab"), "value") == b"ab"
    assert as_bytes(memoryview(b"cd"), "value") == b"cd"
    for bad in (5, 1.5, {"a": 1}, [b"x"], object()):
        with pytest.raises(TypeError, match=r"value must be bytes, str or None, not .*json"):
            as_bytes(bad, "value")
    same = [b"a", None, b"c"]
    assert as_bytes_list(same, "values") is same  # (the bulk path: not copied)
    assert as_bytes_list(["a", None, "c"], "values") == [b"a", None, b"c"]
    assert as_bytes_list([b"a", 3, b"c"], "values") == [b"a", 3, b"c"]  # (left to encode)
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes"):
        as_bytes_list([b"a", 3, b"c"], "values", every=True)


def test_headers_are_pairs_or_a_dict_of_str_names():
    assert headers(None) is None and headers([]) is None and headers({}) is None
    assert headers({"a": b"1", "b": "two", "c": None}) == [
        ("a", b"1"), ("b", b"two"), ("c", None)]
    assert headers([("a", b"1"), ["b", bytearray(b"2")]]) == [("a", b"1"), ("b", b"2")]
    for bad, says in [("a=b", "list of"), (b"ab", "list of"), ([("a",)], "pair"),
                      (["ab"], "pair"), ([(1, b"x")], "name must be str"),
                      ([("a", 5)], "header 'a'"), ({"a": 5}, "header 'a'")]:
        with pytest.raises(TypeError, match=says):
            headers(bad)


def test_a_batch_that_does_not_decode_is_named_with_the_offset_to_seek_to():
    good = records.encode_batch([b"ok"], base_offset=0)
    # headers CBOR of the shape a dict of headers used to be stored as (its keys only)
    bad = records.encode_batch([b"x", b"y"], headers=[[("a",)], None], base_offset=1)
    data = good + bad
    with pytest.raises(CorruptRecordError):
        records.decode_batches(data, "t", 0)
    e = _undecodable(data, TopicPartition("t", 3), CorruptRecordError("a header is bad"))
    assert e.offsets == (1, 3)
    assert "t-3: the batch at offsets 1-2 does not decode (a header is bad)" in str(e)
    assert "consumer.seek(TopicPartition('t', 3), 3)" in str(e)
    assert "raftlog consume t --partition 3 --offset 3" in str(e)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(str(tmp_path_factory.mktemp("fields") / "node-1"), free_port())
    n.start()
    Admin(n.bootstrap).create_topic("fields")
    yield n
    n.stop()


def _read(node, n):
    c = Consumer(node.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("fields", 0)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(timeout_ms=200)
    c.close()
    return got


def test_what_the_producer_takes_reads_back_and_what_it_refuses_writes_nothing(node):
    with Producer(node.bootstrap) as p:
        p.send("fields", "text", key="k", partition=0,
               headers={"h": "v", "b": b"\x00", "n": None}).result(timeout=30)
        p.send_many("fields", ["s1", "s2"], partition=0).result(timeout=30)
        for bad in (lambda: p.send("fields", 5, partition=0),
                    lambda: p.send("fields", b"x", key=5, partition=0),
                    lambda: p.send("fields", b"x", headers=[("h",)], partition=0),
                    lambda: p.send_many("fields", [b"a", 2], partition=0),
                    lambda: p.send_many("fields", [b"a"], keys=[b"k", b"l"], partition=0)):
            with pytest.raises((TypeError, ValueError)):
                bad()
        # a stray str deep in a bulk list: its batch's future fails, nothing hangs
        f = p.send_many("fields", [b"a", "mid", b"c"], partition=0)
        with pytest.raises(TypeError, match="does not encode"):
            f.result(timeout=30)
        last = p.send("fields", b"after", partition=0).result(timeout=30)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 5  # close() waited for no failed batch
    got = _read(node, 4)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (0, b"k", b"text"), (1, None, b"s1"), (2, None, b"s2"), (3, None, b"after")]
    assert got[0].headers == (("h", b"v"), ("b", b"\x00"), ("n", None))
    assert last.offset == 3  # no gap, nothing of the refused sends written
