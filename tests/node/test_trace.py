"""Latency tracing (raftlog/trace.py, ``trace.events``, ``GET /trace``,
``Producer(trace=N)``): pure joins, and the hops of real records through a real node."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.localnode import free_port
from raftlog.node.config import NodeConfig
from raftlog.trace import HOPS, TraceLog, at, budget, hop_times, replica_budget

from ..conftest import wait_for_port


def test_trace_log_is_bounded_and_drains_oldest_first():
    log = TraceLog(3)
    for i in range(5):
        log.stamp("leader_append", "t", 0, i, i, t_ns=i)
    assert log.dropped == 2
    assert [e[3] for e in log.drain()] == [2, 3, 4]
    assert log.drain() == []
    log.stamp("hw_advance", "t", 0, 5, 4)  # an empty range stamps nothing
    assert log.drain() == []
    with pytest.raises(ValueError):
        TraceLog(0)


def test_hop_times_earliest_wins_but_the_last_follower_counts():
    events = [
        ("leader_append", "t", 0, 0, 9, 100),
        ("leader_append", "t", 0, 5, 5, 50),   # (a retry's stamp: earlier one wins)
        ("follower_append", "t", 0, 0, 4, 200),  # follower A
        ("follower_append", "t", 0, 0, 9, 300),  # follower B, later: the HW waits for it
        ("leader_append", "u", 0, 0, 9, 1),    # another topic
        ("leader_append", "t", 1, 0, 9, 1),    # another partition
    ]
    times = hop_times(events, "t", 0)
    assert times["leader_append"][0] == 100 and times["leader_append"][5] == 50
    assert times["follower_append"][3] == 300
    only = hop_times(events, "t", 0, offsets={2})
    assert set(only["leader_append"]) == {2}


def test_budget_orders_hops_and_measures_steps():
    times = {"enqueue": {0: 0, 1: 0}, "leader_append": {0: 2_000_000, 1: 4_000_000},
             "hw_advance": {0: 3_000_000, 1: 5_000_000}, "ack": {}}
    rows = budget(times)
    assert [r["hop"] for r in rows] == ["enqueue", "leader_append", "hw_advance"]
    la, hw = rows[1], rows[2]
    assert la["records"] == 2 and la["since_enqueue_p99_ms"] == 4.0
    assert hw["step_p50_ms"] == 1.0 and hw["step_p99_ms"] == 1.0


def test_replica_budget_gives_each_followers_own_steps():
    ms = 1_000_000
    events = [("enqueue", "t", 0, 0, 0, 0), ("leader_append", "t", 0, 0, 0, 1 * ms),
              (at("follower_fetch", 2), "t", 0, 0, 0, 2 * ms),
              (at("follower_fetch", 3), "t", 0, 0, 0, 5 * ms),  # 3 was away
              (at("follower_append", 2), "t", 0, 0, 0, 3 * ms),
              (at("follower_append", 3), "t", 0, 0, 0, 6 * ms),
              (at("follower_report", 2), "t", 0, 0, 0, 4 * ms),
              (at("follower_report", 3), "t", 0, 0, 0, 8 * ms)]
    per = replica_budget(hop_times(events, "t", 0))
    assert sorted(per) == [2, 3]
    steps = {r: {h["hop"]: h["step_p50_ms"] for h in rows} for r, rows in per.items()}
    assert steps[2] == {"enqueue": None, "leader_append": 1.0, "follower_fetch": 1.0,
                        "follower_append": 1.0, "follower_report": 1.0}
    assert steps[3]["follower_fetch"] == 4.0 and steps[3]["follower_report"] == 2.0
    assert replica_budget(hop_times(events[:2], "t", 0)) == {}  # (one node: none)


def test_trace_events_config():
    assert NodeConfig.from_properties({}).trace_events == 0
    assert NodeConfig.from_properties({"trace.events": "1000"}).trace_events == 1000
    with pytest.raises(Exception, match="trace.events"):
        NodeConfig.from_properties({"trace.events": "-1"})


def _get(port: int, path: str):
    wait_for_port("127.0.0.1", port)  # (the metrics listener starts after the node's)
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)


def test_a_traced_record_passes_every_hop_of_a_single_node_in_order(node_factory):
    """A real node with ``trace.events`` and an SDK producer with ``trace``: every
    record acknowledged is stamped at each hop of a single node's durable path, in path
    order, and GET /trace drains the node's events (a second GET has none of them)."""
    mport = free_port()
    n = node_factory(**{"trace.events": "10000", "metrics.listener": f"127.0.0.1:{mport}"})
    with Producer(n.bootstrap, trace=1000) as p:
        with Admin(n.bootstrap) as a:
            a.create_topic("traced", partitions=1, replication_factor=1)
        for i in range(3):  # three batches: each send() answered before the next
            p.send("traced", b"v%d" % i, partition=0).result(timeout=30)
        producer_events = p.trace.drain()
    c = Consumer(n.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("traced", 0)])
    got = []
    while len(got) < 3:
        got += c.poll(timeout_ms=5000)
    c.close()
    with _get(mport, "/trace") as r:
        body = json.loads(r.read())
    assert body["node_id"] == 1 and body["dropped"] == 0
    times = hop_times(body["events"] + producer_events, "traced", 0)
    path = ["send", "leader_read", "leader_append", "leader_sync", "hw_advance",
            "consumer_answer"]
    for o in range(3):
        stamps = [times[h][o] for h in path]  # (KeyError: a hop missed the record)
        assert stamps == sorted(stamps), dict(zip(path, stamps))
        assert times["ack"][o] >= times["hw_advance"][o]
    assert set(times) <= set(HOPS)
    with _get(mport, "/trace") as r:
        assert not [e for e in json.loads(r.read())["events"] if e[1] == "traced"]


def test_trace_endpoint_says_how_to_turn_tracing_on(node_factory):
    mport = free_port()
    node_factory(**{"metrics.listener": f"127.0.0.1:{mport}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        _get(mport, "/trace")
    assert e.value.code == 404 and b"trace.events" in e.value.read()
