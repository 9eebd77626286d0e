"""A full disk: one log line per incident, KAFKA_STORAGE_ERROR with the node's reason,
the SDK failing the future with it (not after delivery_timeout_ms), reads served
throughout, appends resuming by themselves once space returns, nothing acknowledged lost.

The disk is "filled" with RLIMIT_FSIZE set on the running node (``prlimit``): writes
that would grow the segment file past the limit fail with EFBIG, exactly as an append
on a full disk fails with ENOSPC (same code path: a failed pwrite, cut back). Raising
the limit again is "freeing space". It needs no mount privileges, so it runs anywhere.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import resource

from raftlog.client import Admin, Consumer, DeliveryTimeoutError, KafkaStorageError, Producer
from raftlog.client.types import TopicPartition
from raftlog.errors import ApiError, ErrorCode, StorageError
from raftlog.node.disk import RECOVERY_QUIET_S, DiskHealth, storage_error_message

from ..cluster.cluster import until
from ..conftest import NodeProcess, free_port

UNLIMITED = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)


class Recorder:
    """A recording EventLog stand-in."""

    def __init__(self):
        self.lines = []

    def error(self, event, **fields):
        self.lines.append(("error", event, fields))

    def warning(self, event, **fields):
        self.lines.append(("warning", event, fields))


def test_storage_error_message_names_the_errno_text_node_and_data_dir():
    err = StorageError("append to /d/t-0/x.log failed: [Errno 28] No space left", errno.ENOSPC)
    assert storage_error_message(3, "/d", err) == \
        "STORAGE_ERROR: no space left on device on node 3 (data dir /d)"
    assert "pwrite returned 0" in storage_error_message(3, "/d", StorageError("pwrite returned 0"))


def test_disk_health_logs_once_per_incident_and_once_on_recovery():
    ev = Recorder()
    now = [100.0]
    disk = DiskHealth(2, "/data", ev, clock=lambda: now[0])
    disk.write_ok("t-0")  # healthy: nothing to say
    assert ev.lines == [] and disk.writable
    full = StorageError("append failed", errno.ENOSPC)
    for part in ("t-0", "t-1", "t-0"):
        msg = disk.write_failed(full, part)
    assert msg == "STORAGE_ERROR: no space left on device on node 2 (data dir /data)"
    assert [(lvl, e) for lvl, e, _ in ev.lines] == [("error", "log_dir_unwritable")]
    f = ev.lines[0][2]
    assert (f["data_dir"], f["error"], f["partition"]) == ("/data", "no space left on device", "t-0")
    assert not disk.writable and disk.stats()["log_dir_writable"] == 0
    now[0] += RECOVERY_QUIET_S / 2
    disk.write_ok("t-1")  # a small append that still fit, right after failures: not yet
    assert not disk.writable and len(ev.lines) == 1
    now[0] += RECOVERY_QUIET_S
    disk.write_ok("t-1")
    disk.write_ok("t-1")
    assert [e for _, e, _ in ev.lines] == ["log_dir_unwritable", "log_dir_recovered"]
    assert disk.writable
    assert disk.stats() == {"log_dir_writable": 1, "storage_write_errors": 3,
                            "log_dir_unwritable_incidents": 1}


def test_client_storage_error_shows_the_node_message_as_is():
    from raftlog.client.errors import api_error

    e = api_error(ErrorCode.KAFKA_STORAGE_ERROR, "STORAGE_ERROR: no space left on device on node 1 (data dir /d)")
    assert isinstance(e, KafkaStorageError) and isinstance(e, ApiError)
    assert str(e) == "STORAGE_ERROR: no space left on device on node 1 (data dir /d)"
    assert e.code == ErrorCode.KAFKA_STORAGE_ERROR


def segment_size(data_dir: str, topic: str, partition: int = 0) -> int:
    return max(os.path.getsize(p) for p in glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log")))


def fill_disk(node: NodeProcess, topic: str, room: int = 20_000) -> None:
    """The node's files may grow ``room`` bytes past its active segment's size."""
    limit = segment_size(node.data_dir, topic) + room
    resource.prlimit(node.proc.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def free_disk(node: NodeProcess) -> None:
    resource.prlimit(node.proc.pid, resource.RLIMIT_FSIZE, UNLIMITED)


def send_all(prod: Producer, topic: str, values: list) -> tuple[dict, list]:
    """({offset: value} acknowledged, [errors])."""
    futs = [(v, prod.send(topic, v, partition=0)) for v in values]
    acked, errors = {}, []
    for v, f in futs:
        try:
            acked[f.result(timeout=60).offset] = v
        except Exception as e:  # noqa: BLE001 - every failure is examined by the test
            errors.append(e)
    return acked, errors


def read_all(bootstrap: str, topic: str, expect: int) -> dict:
    c = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, 0)])
    got: dict = {}
    try:
        for _ in range(200):
            for r in c.poll(timeout_ms=200, max_records=100_000):
                got[r.offset] = r.value
            if len(got) >= expect:
                break
    finally:
        c.close()
    return got


def produce_until_recovered(prod: Producer, topic: str, node: NodeProcess, acked: dict) -> None:
    """Recovery is declared by an append RECOVERY_QUIET_S after the last failed write:
    produce one record at a time until ``node`` logs it."""
    n = iter(range(10**6))

    def step():
        more, errors = send_all(prod, topic, [b"d%06d" % next(n)])
        assert not errors, errors
        acked.update(more)
        return events(node, "log_dir_recovered")

    until(step, timeout_s=30)


def events(node: NodeProcess, name: str) -> list[str]:
    return [line for line in node.log_text().splitlines() if f"event={name} " in line]


def test_full_disk_fails_produce_with_the_reason_serves_reads_and_recovers(tmp_path):
    node = NodeProcess(str(tmp_path / "node-1"), free_port()).start()
    try:
        with Admin(node.bootstrap) as a:
            a.create_topic("t", partitions=1)
        value = b"x" * 1000
        with Producer(node.bootstrap, acks="all", linger_ms=0) as prod:
            acked, errors = send_all(prod, "t", [b"a%04d" % i + value for i in range(100)])
            assert not errors and len(acked) == 100
            fill_disk(node, "t")
            more, errors = send_all(prod, "t", [b"b%04d" % i + value for i in range(100)])
            acked.update(more)
            assert errors, "the disk never filled"
            assert all(isinstance(e, KafkaStorageError) for e in errors), errors
            assert not any(isinstance(e, DeliveryTimeoutError) for e in errors)
            # every attempt refused by a failed append: the sends failed for sure
            assert all(e.written is False for e in errors), [e.written for e in errors]
            msg = str(errors[0])
            assert re.fullmatch(r"STORAGE_ERROR: file too large on node 1 \(data dir .+\)", msg), msg
            assert node.data_dir in msg
            # reads keep working while the disk is full: exactly what was acknowledged
            assert read_all(node.bootstrap, "t", len(acked)) == acked
            down = events(node, "log_dir_unwritable")
            assert len(down) == 1, down
            assert 'error="file too large"' in down[0] and "partition=t-0" in down[0]
            assert f"data_dir={node.data_dir}" in down[0] and "level=error" in down[0]
            assert events(node, "log_dir_recovered") == []

            free_disk(node)  # space returns: appends resume by themselves
            after, errors = send_all(prod, "t", [b"c%04d" % i + value for i in range(50)])
            assert not errors and len(after) == 50
            acked.update(after)
            produce_until_recovered(prod, "t", node, acked)
        assert len(events(node, "log_dir_recovered")) == 1
        assert len(events(node, "log_dir_unwritable")) == 1
        got = read_all(node.bootstrap, "t", len(acked))
        assert got == acked  # nothing acknowledged lost, nothing unacknowledged served
        assert sorted(got) == list(range(len(got)))  # offsets stay contiguous
    finally:
        node.stop()
