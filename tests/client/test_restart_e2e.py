"""Clients keep working across a node restart (same port, same data dir)."""

from __future__ import annotations

import glob
import os
import re
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


def test_consume_says_why_it_stopped_at_damaged_offsets_and_delete_records_skips_them(
        node, capsys):
    """A node restarted after a segment of its only copy was cut short (below its recovery
    point) never serves the hole: `raftlog consume` stops there with exit status 1 and the
    node's error, which names the offset DeleteRecords must reach; after it, consuming
    goes on past the hole."""
    from raftlog.client import cli

    admin = Admin(node.bootstrap)
    admin.create_topic("d", config={"segment.bytes": 16 * 1024})
    with Producer(node.bootstrap, acks=1, linger_ms=1, batch_size=4096) as p:
        for f in [p.send("d", b"%05d" % i + b"z" * 100, partition=0) for i in range(3000)]:
            f.result(10)
    admin.close()
    node.stop()
    segs = sorted(glob.glob(os.path.join(node.data_dir, "d-0", "*.log")))[:-1]
    assert len(segs) >= 3
    os.truncate(segs[1], os.path.getsize(segs[1]) // 2 + 7)  # (mid-batch)
    node.start()

    argv = ["consume", "d", "--from-beginning", "--timeout-ms", "3000",
            "--bootstrap-server", node.bootstrap]
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    hole = re.search(r"offsets (\d+)\.\.(\d+) of .* DeleteRecords to offset (\d+)", err)
    assert "KAFKA_STORAGE_ERROR" in err and hole, err
    start, end = int(hole.group(1)), int(hole.group(3))
    assert [int(line.split("\t")[0].split(":")[1]) for line in out.splitlines()] == \
        list(range(start))
    with Admin(node.bootstrap) as a:
        assert a.delete_records({TopicPartition("d", 0): end}) == {TopicPartition("d", 0): end}
    assert cli.main(argv) == 0
    out, _ = capsys.readouterr()
    assert [line.split("\t")[-1] for line in out.splitlines()] == \
        [f"{i:05d}" + "z" * 100 for i in range(end, 3000)]
