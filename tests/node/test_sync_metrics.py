"""The group commit's syncs are visible to an operator: raftlog_log_syncs_total counts the
fdatasyncs of durable logs (write.caching=false), by where they ran -- a real node."""

from __future__ import annotations

import urllib.request

from raftlog.client import Admin, Producer

from ..conftest import free_port
from .test_metrics import parse_exposition, value


def _syncs(port: int) -> tuple[float, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        s = parse_exposition(r.read().decode())
    syncs = sum(v for (name, _labels), v in s.items() if name == "raftlog_log_syncs_total")
    return syncs, value(s, "raftlog_log_sync_mean_seconds")


def test_acks_all_on_a_durable_topic_counts_syncs_and_a_cached_one_none(node_factory):
    port = free_port()
    n = node_factory(**{"metrics.listener": f"127.0.0.1:{port}"})
    with Admin(n.bootstrap) as a:
        a.create_topic("durable", partitions=1, replication_factor=1)
        a.create_topic("cached", partitions=1, replication_factor=1,
                       config={"write.caching": "true"})
    before, _ = _syncs(port)
    with Producer(n.bootstrap) as p:  # (SDK defaults: acks=all)
        for i in range(20):
            p.send("cached", b"c%d" % i).result(10)
    cached, _ = _syncs(port)
    with Producer(n.bootstrap) as p:
        for i in range(20):
            p.send("durable", b"d%d" % i).result(10)  # one at a time: a sync each
    durable, mean_s = _syncs(port)
    assert cached == before
    assert durable - cached >= 20
    assert mean_s > 0
