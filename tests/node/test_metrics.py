"""node/metrics.py and metrics_http.py without sockets: counters, gauges at scrape time,
the text exposition format, group lag, the HTTP request/response logic."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from raftlog.errors import ConfigError
from raftlog.node.broker import Broker
from raftlog.node.config import NodeConfig
from raftlog.node.groups import CommittedOffset, Group, GroupCoordinator, partition_for
from raftlog.node.metrics import (
    METRICS,
    Exposition,
    Histogram,
    group_lag_rows,
    render,
)
from raftlog.node.metrics_http import answer, parse_request_head
from raftlog.protocol import Api, FetchPartHeader, Request
from raftlog.records import encode_batch

from .single_node import close_broker, open_broker

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                     r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> dict:
    """{(name, frozenset(labels)): value}; asserts every line is valid 0.0.4 syntax and
    every sample belongs to a family declared (HELP + TYPE) before it."""
    assert text.endswith("\n")
    declared: dict = {}
    out: dict = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in declared, f"family {name} declared twice"
            declared[name] = kind
            continue
        m = _SAMPLE.match(line)
        assert m, f"bad exposition line {line!r}"
        name, labels, value = m.group(1), m.group(3) or "", m.group(5)
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in declared else name
        assert family in declared, f"{name} sampled before its TYPE line"
        key = (name, frozenset(_LABEL.findall(labels)))
        assert key not in out, f"duplicate sample {key}"
        out[key] = float(value)
    return out


def value(samples: dict, name: str, **labels) -> float:
    want = {(k, str(v)) for k, v in labels.items()}
    hits = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def _broker(tmp_path) -> Broker:
    return open_broker(tmp_path)


def _node(broker):
    return SimpleNamespace(broker=broker, replicas=broker.replicas,
                           metrics=broker.replicas.metrics, server=None, store=broker.store)


def test_histogram_buckets_are_upper_bounds_and_cumulative():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    cumulative, total = h.snapshot()
    assert cumulative == [2, 3, 4]  # <=0.1 holds 0.05 and 0.1 itself; +Inf holds all
    assert total == pytest.approx(3.65)
    out = Exposition()
    out.histogram("raftlog_metadata_commit_seconds", h)
    s = parse_exposition(out.text())
    assert value(s, "raftlog_metadata_commit_seconds_bucket", le="0.1") == 2
    assert value(s, "raftlog_metadata_commit_seconds_bucket", le="+Inf") == 4
    assert value(s, "raftlog_metadata_commit_seconds_count") == 4


def test_label_values_are_escaped():
    out = Exposition()
    out.sample("raftlog_topic_bytes_in_total", 1, {"topic": 'a"b\\c\nd'})
    line = out.text().splitlines()[-1]
    assert line == 'raftlog_topic_bytes_in_total{topic="a\\"b\\\\c\\nd"} 1'
    parse_exposition(out.text())


def test_every_family_has_a_conventional_name():
    for name, (kind, help_text) in METRICS.items():
        assert name.startswith("raftlog_") and help_text
        assert name.endswith("_total") == (kind == "counter"), name
        assert not re.search(r"_(ms|milliseconds|bytes_total_bytes)$", name), name


def test_produce_and_fetch_move_the_topic_counters_and_log_gauges(tmp_path):
    broker = _broker(tmp_path)
    try:
        broker.create_topic("t", 2, 1, {})
        broker.replicas.reconcile()
        before = parse_exposition(render(_node(broker)))
        assert value(before, "raftlog_log_size_bytes", topic="t", partition=0) == 0
        assert value(before, "raftlog_partitions", role="leader") == 2
        batch = encode_batch([b"x" * 10] * 5)
        r = broker.replicas.produce_one("t", 0, batch)
        assert r.error == 0
        broker.replicas.produce_one("t", 0, encode_batch([b"y"] * 3))
        req = Request(Api.FETCH, 0, 1, {"replica_id": -1, "max_bytes": 1 << 20, "min_bytes": 1,
                                        "max_wait_ms": 0, "parts": [("t", 0, 2, 1 << 20, -1)]},
                      b"")
        headers, pieces, total, error = broker.replicas.fetch_once(req)
        assert not error and total > 0
        broker.replicas.fetch_answered(req, headers, pieces, total)
        s = parse_exposition(render(_node(broker)))
        assert value(s, "raftlog_topic_records_in_total", topic="t") == 8
        assert value(s, "raftlog_topic_bytes_in_total", topic="t") == len(batch) + len(
            encode_batch([b"y"] * 3))
        assert value(s, "raftlog_topic_bytes_out_total", topic="t") == total
        assert value(s, "raftlog_topic_records_out_total", topic="t") == 6  # offsets 2..7
        assert value(s, "raftlog_log_end_offset", topic="t", partition=0) == 8
        assert value(s, "raftlog_log_size_bytes", topic="t", partition=0) > 0
        assert value(s, "raftlog_log_segments", topic="t", partition=0) == 1
        assert value(s, "raftlog_under_replicated_partitions") == 0
        assert value(s, "raftlog_controller_active") == 1
        broker.store.delete("t")
        broker.replicas.reconcile()
        gone = parse_exposition(render(_node(broker)))
        assert not [k for k in gone if ("topic", "t") in k[1]]  # deleted: series dropped
    finally:
        close_broker(broker)


def test_replica_fetches_count_as_replication_bytes_not_topic_bytes(tmp_path):
    broker = _broker(tmp_path)
    try:
        broker.create_topic("t", 1, 1, {})
        broker.replicas.reconcile()
        req = Request(Api.FETCH, 0, 1, {"replica_id": 2, "parts": [("t", 0, 0, 100, -1)]}, b"")
        broker.replicas.fetch_answered(req, [FetchPartHeader("t", 0, 0, 0, 0, 70, "")], [None], 70)
        s = parse_exposition(render(_node(broker)))
        assert value(s, "raftlog_replication_bytes_out_total") == 70
        # (a topic's series appear with its first produce or consumer fetch)
        assert not [k for k in s if k[0].startswith("raftlog_topic_") and ("topic", "t") in k[1]]
    finally:
        close_broker(broker)


def test_request_latency_histogram_per_api(tmp_path):
    broker = _broker(tmp_path)
    try:
        broker.replicas.metrics.request_done(Api.PRODUCE, 0.002)
        broker.replicas.metrics.request_done(Api.PRODUCE, 0.2, error=True)
        broker.replicas.metrics.request_done(Api.FETCH, 0.0001)
        s = parse_exposition(render(_node(broker)))
        assert value(s, "raftlog_request_duration_seconds_count", api="PRODUCE") == 2
        assert value(s, "raftlog_request_duration_seconds_bucket", api="PRODUCE", le="0.0025") == 1
        assert value(s, "raftlog_request_errors_total", api="PRODUCE") == 1
        assert value(s, "raftlog_request_duration_seconds_count", api="FETCH") == 1
    finally:
        close_broker(broker)


def test_group_lag_in_records_and_seconds(tmp_path):
    broker = _broker(tmp_path)
    try:
        broker.create_topic("t", 2, 1, {})
        broker.replicas.reconcile()
        now_ms = int(time.time() * 1000)
        broker.replicas.produce_one("t", 0, encode_batch([b"a"] * 4, timestamp=now_ms - 5000))
        broker.replicas.produce_one("t", 0, encode_batch([b"b"] * 6, timestamp=now_ms - 1000))
        coord = GroupCoordinator()
        for gid, off in (("g1", 2), ("g2", 10)):
            coord.partitions[partition_for(gid, coord.config.offsets_partitions)] = True
            coord.groups[gid] = Group(gid, offsets={("t", 0): CommittedOffset(off),
                                                    ("gone", 0): CommittedOffset(1)})
        n = coord.config.offsets_partitions
        loading = next(g for g in (f"g{i}" for i in range(3, 100))
                       if partition_for(g, n) not in coord.partitions)
        coord.partitions[partition_for(loading, n)] = False  # still loading: not reported
        coord.groups[loading] = Group(loading, offsets={("t", 0): CommittedOffset(0)})
        rows = group_lag_rows(coord, broker.replicas.partitions, now_ms)
        by_group = {r[0]: r for r in rows}
        assert loading not in by_group
        g1 = by_group["g1"]
        assert g1[1:4] == ("t", 0, 8)  # HW 10 - committed 2
        assert g1[4] == pytest.approx(5.0, abs=1.0)  # the batch holding offset 2 is ~5 s old
        assert by_group["g2"][3:] == (0, 0.0)  # caught up
        assert all(r[1] != "gone" for r in rows)  # partitions not hosted here: no series
        capped = group_lag_rows(coord, broker.replicas.partitions, now_ms, max_rows=1, max_seconds=0)
        assert len(capped) == 1 and capped[0][4] is None
    finally:
        close_broker(broker)


def test_http_answers():
    assert parse_request_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n") == ("GET", "/metrics")
    with pytest.raises(ValueError):
        parse_request_head(b"\x16\x03\x01 garbage\r\n\r\n")
    ok = answer("GET", "/metrics", lambda: "raftlog_up_seconds 1\n")
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and ok.endswith(b"\r\n\r\nraftlog_up_seconds 1\n")
    assert b"version=0.0.4" in ok and b"Content-Length: 21\r\n" in ok
    assert answer("POST", "/metrics", lambda: "").startswith(b"HTTP/1.1 405")
    assert answer("GET", "/nope", lambda: "").startswith(b"HTTP/1.1 404")
    head = answer("HEAD", "/metrics", lambda: "abc\n")
    assert head.endswith(b"\r\n\r\n") and b"Content-Length: 4" in head


def test_metrics_listener_config():
    c = NodeConfig.from_properties({"metrics.listener": "127.0.0.1:9404"})
    assert (c.metrics_host, c.metrics_port) == ("127.0.0.1", 9404)
    assert NodeConfig.from_properties({}).metrics_port is None
    assert NodeConfig.from_properties({"metrics.listener": ""}).metrics_port is None
    with pytest.raises(ConfigError, match="metrics.listener"):
        NodeConfig.from_properties({"metrics.listener": "nope"})
    with pytest.raises(ConfigError, match="metrics.listener"):
        NodeConfig.from_properties({"listeners": "127.0.0.1:9092",
                                    "metrics.listener": "127.0.0.1:9092"})
