"""The metrics listener of a real node process, scraped over HTTP: values move when
records are produced, consumed and left unconsumed by a group."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.client.types import TopicPartition

from ..conftest import free_port
from ..node.test_metrics import parse_exposition, value
from .test_groups_e2e import GROUP_NODE


def _status_watch(bootstrap: str, *more: str) -> str:
    out = subprocess.run([sys.executable, "-m", "raftlog.client.cli", "cluster", "status",
                          "--watch", "0.1", "--count", "2", *more, "--bootstrap-server", bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse_exposition(r.read().decode())


@pytest.mark.slow
def test_scrape_a_node_while_producing_and_consuming(node_factory):
    port = free_port()
    node = node_factory(**GROUP_NODE, **{"metrics.listener": f"127.0.0.1:{port}"})
    admin = Admin(node.bootstrap)
    admin.create_topic("m", partitions=2)
    before = scrape(port)
    assert value(before, "raftlog_partitions", role="leader") >= 2
    assert value(before, "raftlog_log_end_offset", topic="m", partition=0) == 0

    with Producer(node.bootstrap, acks="all") as p:
        for i in range(100):
            p.send("m", b"v%03d" % i, partition=i % 2)
        p.flush()
    mid = scrape(port)
    assert value(mid, "raftlog_topic_records_in_total", topic="m") == 100
    assert value(mid, "raftlog_topic_bytes_in_total", topic="m") > 100 * 4
    assert value(mid, "raftlog_log_end_offset", topic="m", partition=1) == 50
    assert value(mid, "raftlog_log_size_bytes", topic="m", partition=1) > 0
    assert value(mid, "raftlog_request_duration_seconds_count", api="PRODUCE") >= 1
    assert (value(mid, "raftlog_request_duration_seconds_count", api="CREATE_TOPICS")
            == value(before, "raftlog_request_duration_seconds_count", api="CREATE_TOPICS"))

    c = Consumer(node.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("m", 0), TopicPartition("m", 1)])
    got = []
    for _ in range(50):
        got += c.poll(timeout_ms=200)
        if len(got) >= 100:
            break
    c.close()
    assert len(got) == 100
    # a group that has read 10 of partition 0's 50 records
    admin.alter_group_offsets("lagging", {TopicPartition("m", 0): 10})
    after = scrape(port)
    assert value(after, "raftlog_topic_records_out_total", topic="m") >= 100
    assert (value(after, "raftlog_topic_bytes_out_total", topic="m")
            >= value(mid, "raftlog_topic_bytes_in_total", topic="m"))
    assert value(after, "raftlog_request_duration_seconds_count", api="FETCH") >= 1
    assert value(after, "raftlog_consumer_group_lag_records",
                 group="lagging", topic="m", partition=0) == 40
    assert value(after, "raftlog_consumer_group_lag_seconds",
                 group="lagging", topic="m", partition=0) >= 0
    assert value(after, "raftlog_under_replicated_partitions") == 0
    assert value(after, "raftlog_controller_active") == 1
    admin.close()

    # cluster status --watch: two refreshes, text and JSON lines
    text = _status_watch(node.bootstrap)
    assert text.count("cluster raftlog") == 2 and text.count("every partition is fully") == 2
    lines = _status_watch(node.bootstrap, "--json").splitlines()
    assert len(lines) == 2 and all(json.loads(x)["nodes"][0]["replicas"] >= 2 for x in lines)

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=10)
    assert e.value.code == 404
