"""Clients keep working across a node restart (same port, same data dir)."""

from __future__ import annotations

import time

from raftlog.client import Admin, Consumer, Producer, TopicPartition


def test_clients_reconnect_after_a_node_restart(node):
    admin = Admin(node.bootstrap)
    admin.create_topic("r")
    tp = TopicPartition("r", 0)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200)
    c.assign([tp])
    with Producer(node.bootstrap, acks=1, retry_backoff_ms=50) as p:
        assert p.send("r", b"before", partition=0).result(10).offset == 0
        assert [r.value for r in c.poll(timeout_ms=5000)] == [b"before"]
        node.restart()
        assert admin.list_topics() == ["r"]  # read-only admin calls reconnect
        assert p.send("r", b"after", partition=0).result(20).offset == 1
    got, deadline = [], time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = c.poll(timeout_ms=500)
    assert [(r.offset, r.value) for r in got] == [(1, b"after")]
    c.close()
    admin.close()
