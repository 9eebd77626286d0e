"""Operator tools without a node: ``dump-log`` on real segment files (intact, with a
flipped byte, torn), and the pure status / log-dirs builders and formats."""

from __future__ import annotations

import json
import os

import pytest

from raftlog.client import cli
from raftlog.client.admin import (
    BrokerDescription,
    ClusterDescription,
    LogDirDescription,
    PartitionDescription,
    TopicDescription,
)
from raftlog.client.cli_ops import format_log_dirs, log_dirs_json
from raftlog.client.dumplog import BatchInfo, Problem, read_index, scan_segment
from raftlog.client.status import build_status, format_status, human_bytes, replica_lags
from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.protocol import LogDirPartition
from raftlog.records import encode_batch


def _segment(tmp_path) -> tuple[str, PartitionLog]:
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=1))
    log.append(encode_batch([b"a", b"b"], [b"k1", None], timestamp=1_000))
    log.append(encode_batch([b"c" * 100] * 3, timestamp=2_000), leader_epoch=3)
    log.append(encode_batch([b"d"], timestamp=3_000))
    log.flush()
    path = os.path.join(log.path, "00000000000000000000.log")
    return path, log


def _run(capsys, *argv) -> tuple[int, str]:
    rc = cli.main(list(argv))
    captured = capsys.readouterr()
    _run.err = captured.err
    return rc, captured.out


def test_dump_log_lists_every_batch_with_offsets_and_valid_crcs(tmp_path, capsys):
    path, log = _segment(tmp_path)
    log.close()
    items = list(scan_segment(path))
    assert all(isinstance(i, BatchInfo) and i.crc_ok for i in items)
    assert [(i.header.base_offset, i.header.last_offset) for i in items] == [(0, 1), (2, 4), (5, 5)]
    rc, out = _run(capsys, "dump-log", path, "--print-data-log")
    assert rc == 0
    assert "Starting offset: 0" in out
    assert "baseOffset: 2 lastOffset: 4 count: 3" in out and "partitionLeaderEpoch: 3" in out
    assert "isValid: true" in out and "isValid: false" not in out
    assert "| offset: 0 timestamp: 1000 keySize: 2 valueSize: 1 headerKeys: [] key: k1 payload: a" in out
    rc, out = _run(capsys, "dump-log", path, "--json")
    doc = json.loads(out)
    assert rc == 0 and [b["count"] for b in doc["batches"]] == [2, 3, 1] and not doc["problems"]


def test_dump_log_reports_a_flipped_byte_and_goes_on(tmp_path, capsys):
    path, log = _segment(tmp_path)
    second = list(scan_segment(path))[1]
    log.close()
    with open(path, "r+b") as f:  # a byte of the second batch's records
        f.seek(second.position + second.header.size - 5)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    items = list(scan_segment(path))
    assert [i.crc_ok for i in items] == [True, False, True]
    rc, out = _run(capsys, "dump-log", path, "--print-data-log")
    assert rc == 1
    assert out.count("isValid: false") == 1 and "computedCrc" in out
    assert "records not shown" in out
    assert "payload: d" in out  # the batch after it is still read


def test_dump_log_stops_at_a_torn_tail_and_says_where(tmp_path, capsys):
    path, log = _segment(tmp_path)
    size = os.path.getsize(path)
    log.close()
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    items = list(scan_segment(path))
    assert len([i for i in items if isinstance(i, BatchInfo)]) == 2
    assert isinstance(items[-1], Problem) and items[-1].fatal and "torn" in items[-1].message
    rc, out = _run(capsys, "dump-log", path)
    assert rc == 1 and "PROBLEM at position" in out


def test_dump_log_of_indexes_and_of_bad_paths(tmp_path, capsys):
    path, log = _segment(tmp_path)
    log.close()
    index = path[: -len(".log")] + ".index"
    rows, trailing = read_index(index)
    assert rows and rows[0] == (0, 0) and trailing == 0
    assert [o for o, _ in rows] == sorted(o for o, _ in rows)
    rc, out = _run(capsys, "dump-log", index)
    assert rc == 0 and "offset: 0 position: 0" in out
    rc, _ = _run(capsys, "dump-log", str(tmp_path / "nope.log"))
    assert rc == 1 and "No such file" in _run.err
    other = tmp_path / "x.txt"
    other.write_text("hi")
    rc, _ = _run(capsys, "dump-log", str(other))
    assert rc == 1 and "not a segment file" in _run.err


def test_dump_log_explains_the_index_files_of_the_active_segment(tmp_path, capsys):
    """The README's account: a running log's active segment has a .log and no index
    files (even after a flush); dump-log says why and what to dump instead. Once the
    segment rolls or the log closes, both index files exist and are listed."""
    path, log = _segment(tmp_path)  # flushed, still open: the segment is active
    base = path[: -len(".log")]
    assert os.path.exists(path)
    for suffix in (".index", ".timeindex"):
        assert not os.path.exists(base + suffix)
        rc, _ = _run(capsys, "dump-log", base + suffix)
        assert rc == 1
        assert "active segment" in _run.err and f"dump {path} instead" in _run.err
    rc, out = _run(capsys, "dump-log", path)  # the .log of the active segment reads fine
    assert rc == 0 and "baseOffset: 0" in out
    log.close()
    for suffix, line in ((".index", "offset: 0 position: 0"), (".timeindex", "timestamp: 1000")):
        rc, out = _run(capsys, "dump-log", base + suffix)
        assert rc == 0 and line in out
    rc, _ = _run(capsys, "dump-log", str(tmp_path / "t-0" / "00000000000000000099.index"))
    assert rc == 1 and "No such file" in _run.err  # no segment there at all


def _fixture():
    cluster = ClusterDescription("c1", 2, (BrokerDescription(1, "h", 1), BrokerDescription(2, "h", 2),
                                           BrokerDescription(3, "h", 3, fenced=True)), 7)
    topics = [TopicDescription("t", {}, (
        PartitionDescription(0, 1, (1, 2, 3), (1, 2), 4, (3,)),
        PartitionDescription(1, 2, (2, 1), (2, 1), 1),
        PartitionDescription(2, -1, (3,), (3,), 1, (3,)),
    ))]
    dirs = [
        LogDirDescription(1, "h", 1, ("broker", "controller"), "/d1", 100, 50, (
            LogDirPartition("t", 0, 1000, 2, 0, 100, 90, 1, 4, [[2, 90], [3, -1]]),
            LogDirPartition("t", 1, 500, 1, 0, 40, 40, 2, 1, []))),
        LogDirDescription(2, "h", 2, ("broker", "controller"), "/d2", 100, 60, (
            LogDirPartition("t", 0, 900, 2, 0, 90, 90, 1, 4, []),
            LogDirPartition("t", 1, 500, 1, 0, 40, 40, 2, 1, [[1, 40]]))),
        LogDirDescription(3, "h", 3, error="cannot connect to h:3"),
    ]
    return cluster, topics, dirs


def test_status_counts_nodes_partitions_and_lag():
    s = build_status(*_fixture())
    assert s["under_replicated"] == 1 and s["offline"] == 1  # t-0 (isr < replicas); t-2
    nodes = {n["id"]: n for n in s["nodes"]}
    assert nodes[1]["leaders"] == 1 and nodes[1]["replicas"] == 2 and nodes[1]["size_bytes"] == 1500
    assert nodes[2]["controller"] and nodes[2]["roles"] == ["broker", "controller"]
    assert nodes[3]["error"] and nodes[3]["size_bytes"] is None
    assert s["lag"] == [{"topic": "t", "partition": 0, "leader": 1, "follower": 2, "lag": 10,
                         "in_isr": True},
                        {"topic": "t", "partition": 0, "leader": 1, "follower": 3, "lag": -1,
                         "in_isr": False}]
    text = format_status(s)
    assert "controller 2" in text and "2*" in text
    assert "OFFLINE" in text and "UNDER-REPLICATED" in text and "not fetching" in text
    assert "unreachable" in text and "fenced" in text
    json.dumps(s)  # the --json form


def test_status_lag_section_agrees_with_the_under_replicated_count():
    """One definition: a partition is under-replicated when its ISR lacks a replica, and
    exactly those missing replicas are the lag section's out-of-ISR rows -- a follower
    out of the ISR that has caught up (lag 0) included, an in-sync follower a few
    records behind (every acks=all write makes one) not counted as under-replicated."""
    cluster = ClusterDescription("c1", 1, (BrokerDescription(1, "h", 1),
                                           BrokerDescription(2, "h", 2),
                                           BrokerDescription(3, "h", 3)), 7)
    topics = [TopicDescription("t", {}, (
        PartitionDescription(0, 1, (1, 2), (1, 2), 1),   # in sync, follower 5 behind
        PartitionDescription(1, 1, (1, 3), (1,), 1),     # 3 out of the ISR, caught up
        PartitionDescription(2, 2, (2, 3), (2,), 1),     # 3 out; leader 2 did not answer
    ))]
    dirs = [
        LogDirDescription(1, "h", 1, ("broker",), "/d1", 100, 50, (
            LogDirPartition("t", 0, 100, 1, 0, 50, 45, 1, 1, [[2, 45]]),
            LogDirPartition("t", 1, 100, 1, 0, 50, 50, 1, 1, [[3, 50]]))),
        LogDirDescription(2, "h", 2, error="cannot connect to h:2"),
    ]
    s = build_status(cluster, topics, dirs)
    assert s["under_replicated"] == 2
    out_of_isr = {(x["topic"], x["partition"]) for x in s["lag"] if not x["in_isr"]}
    assert out_of_isr == {(p["topic"], p["partition"]) for p in s["partitions"]
                          if p["under_replicated"]} == {("t", 1), ("t", 2)}
    rows = {(x["partition"], x["follower"]): (x["lag"], x["in_isr"]) for x in s["lag"]}
    assert rows == {(0, 2): (5, True), (1, 3): (0, False), (2, 3): (-1, False)}
    text = format_status(s)
    assert "2 out of the ISR, in the 2 under-replicated partition(s)" in text
    assert "under-replicated 2" in text and "not fetching" in text


def test_log_dirs_json_is_kafka_shaped_with_offset_lag():
    _c, _t, dirs = _fixture()
    doc = log_dirs_json(dirs)
    b1 = doc["brokers"][0]["logDirs"][0]
    b2 = doc["brokers"][1]["logDirs"][0]
    assert doc["version"] == 1 and b1["logDir"] == "/d1" and b1["error"] is None
    lag = {p["partition"]: p["offsetLag"] for p in b2["partitions"]}
    assert lag == {"t-0": 10, "t-1": 0}  # follower of t-0: leader LEO 100 - own 90
    assert doc["brokers"][2]["logDirs"][0]["error"]
    text = format_log_dirs(doc)
    assert "follower of 1" in text and "error: cannot connect" in text


def test_replica_lags_and_human_bytes():
    assert replica_lags([], []) == []
    assert human_bytes(0) == "0 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(-1) == "-"


@pytest.mark.parametrize("argv", [["cluster", "status", "--watch", "0"],
                                  ["cluster", "status", "--watch", "-1"]])
def test_watch_needs_a_positive_interval(argv, capsys):
    assert cli.main(argv + ["--bootstrap-server", "127.0.0.1:1"]) == 2
