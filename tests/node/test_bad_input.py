"""A node never dies because of what a client sent. Real node process, raw sockets."""

from __future__ import annotations

import socket
import struct

import cbor2

from raftlog.errors import ErrorCode
from raftlog.protocol import Api, ClientConnection, encode_frame, encode_request
from raftlog.records import encode_batch


class Raw:
    """A minimal blocking protocol client for poking the node."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.conn = ClientConnection()

    def call(self, api: Api, fields: dict, body: bytes = b""):
        _, data = self.conn.send_request(api, fields, body)
        self.sock.sendall(data)
        return self.read_response()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_response(self):
        while True:
            f = self.conn.next_response()
            if f is not None:
                return f
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by node")
            self.conn.receive_data(chunk)

    def read_raw_frame(self):
        from raftlog.protocol import FrameDecoder

        d = FrameDecoder()
        while True:
            f = d.next_frame()
            if f is not None:
                return f
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by node")
            d.receive_data(chunk)

    def closed_by_peer(self) -> bool:
        self.sock.settimeout(10)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def _create(bootstrap, name="t", partitions=2):
    r = Raw(bootstrap)
    f = r.call(Api.CREATE_TOPICS, {"topics": [{"name": name, "partitions": partitions}]})
    assert f.header["results"] == [(name, 0, "")]
    r.close()


def _still_serves(bootstrap):
    r = Raw(bootstrap)
    f = r.call(Api.API_VERSIONS, {})
    assert f.header["error"] == 0 and f.header["apis"]
    r.close()


def test_garbage_bytes_close_that_connection_only(node):
    bad = Raw(node.bootstrap)
    good = Raw(node.bootstrap)
    bad.send_raw(b"\x10\x00\x00\x00\x04\x00\x00\x00\xff\xff\xff\xff" + b"\x00" * 8)
    assert bad.closed_by_peer()
    assert good.call(Api.API_VERSIONS, {}).header["error"] == 0
    _still_serves(node.bootstrap)
    assert "connection_closed" in node.log_text()


def test_oversize_frame_is_rejected_and_logged(node_factory):
    n = node_factory(**{"max.frame.bytes": "4096"})
    r = Raw(n.bootstrap)
    r.send_raw(struct.pack("<I", 1 << 30))
    assert r.closed_by_peer()
    assert "exceeds the maximum" in n.log_text()
    _still_serves(n.bootstrap)


def test_unknown_api_and_wrong_types_get_errors_and_keep_the_connection(node):
    r = Raw(node.bootstrap)
    r.send_raw(encode_frame({"id": 1, "api": 77}))
    f = r.read_raw_frame()
    assert f.header["id"] == 1 and f.header["error"] == ErrorCode.UNKNOWN_API
    r.send_raw(encode_frame({"id": 2, "api": int(Api.FETCH), "parts": [["t", "zero", 0, 1, -1]]}))
    f = r.read_raw_frame()
    assert f.header["error"] == ErrorCode.INVALID_REQUEST and "parts" in f.header["message"]
    r.send_raw(encode_frame({"id": 3, "api": int(Api.API_VERSIONS)}))
    assert r.read_raw_frame().header["error"] == 0


def test_unknown_topic_and_partition(node):
    _create(node.bootstrap)
    r = Raw(node.bootstrap)
    batch = encode_batch([b"v"])
    f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["nope", 0, len(batch)], ["t", 9, len(batch)]]}, batch + batch)
    codes = [p[2] for p in f.header["parts"]]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    f = r.call(Api.FETCH, {"max_wait_ms": 0, "parts": [["nope", 0, 0, 1000, -1]]})
    assert f.header["parts"][0][2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    f = r.call(Api.METADATA, {"topics": ["nope"]})
    assert f.header["topics"][0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_out_of_range_and_negative_offsets(node):
    _create(node.bootstrap)
    r = Raw(node.bootstrap)
    for off in (-1, 5, 2**40):
        f = r.call(Api.FETCH, {"max_wait_ms": 0, "parts": [["t", 0, off, 1000, -1]]})
        part = f.header["parts"][0]
        assert part[2] == ErrorCode.OFFSET_OUT_OF_RANGE, part
    f = r.call(Api.LIST_OFFSETS, {"parts": [["t", 0, -7]]})
    assert f.header["parts"][0][2] == ErrorCode.INVALID_REQUEST


def test_corrupt_batch_is_rejected_and_nothing_is_appended(node):
    _create(node.bootstrap)
    r = Raw(node.bootstrap)
    batch = bytearray(encode_batch([b"hello"]))
    batch[-1] ^= 0xFF
    f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["t", 0, len(batch)]]}, bytes(batch))
    assert f.header["parts"][0][2] == ErrorCode.CORRUPT_MESSAGE
    f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["t", 0, 5]]}, b"short")
    assert f.header["parts"][0][2] == ErrorCode.CORRUPT_MESSAGE
    f = r.call(Api.LIST_OFFSETS, {"parts": [["t", 0, -1]]})
    assert f.header["parts"][0][3] == 0
    # body shorter than the announced part lengths
    r.send_raw(encode_request(Api.PRODUCE, 50, {"acks": 1, "parts": [["t", 0, 100]]}, b"x"))
    assert r.read_raw_frame().header["error"] == ErrorCode.INVALID_REQUEST
    _still_serves(node.bootstrap)


def test_a_batch_whose_records_do_not_parse_is_refused_and_readers_go_on(node):
    """A native client (hostile or buggy) sends batches with a valid CRC whose records
    region does not parse: each is refused with CORRUPT_MESSAGE and nothing is
    appended, so no consumer ever meets a batch it cannot decode."""
    from raftlog.client import Consumer, TopicPartition

    from ..raftlog.test_records import lying_batches

    _create(node.bootstrap)
    r = Raw(node.bootstrap)
    for kind, batch in lying_batches().items():
        f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
        code, message = f.header["parts"][0][2], f.header["parts"][0][5]
        assert code == ErrorCode.CORRUPT_MESSAGE, (kind, f.header)
        assert message, kind
    f = r.call(Api.LIST_OFFSETS, {"parts": [["t", 0, -1]]})
    assert f.header["parts"][0][3] == 0  # nothing appended
    good = encode_batch([b"after"])
    f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["t", 0, len(good)]]}, good)
    assert f.header["parts"][0][2] == 0
    r.close()
    c = Consumer(node.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("t", 0)])
    try:
        assert [rec.value for rec in c.poll(timeout_ms=10_000)] == [b"after"]
    finally:
        c.close()


def test_bad_topic_names_and_configs(node):
    r = Raw(node.bootstrap)
    f = r.call(
        Api.CREATE_TOPICS,
        {"topics": [
            {"name": "bad/name"},
            {"name": "ok1", "partitions": 0},
            {"name": "ok2", "replication_factor": 3},
            {"name": "ok3", "config": {"retention.ms": "soon"}},
            {"name": "ok4", "config": {"no.such.key": "1"}},
        ]},
    )
    codes = [res[1] for res in f.header["results"]]
    assert codes == [
        ErrorCode.INVALID_TOPIC,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_CONFIG,
    ]
    assert all(res[2] for res in f.header["results"])
    f = r.call(Api.METADATA, {})
    assert f.header["topics"] == []


def test_invalid_acks(node):
    _create(node.bootstrap)
    r = Raw(node.bootstrap)
    b = encode_batch([b"x"])
    f = r.call(Api.PRODUCE, {"acks": 2, "parts": [["t", 0, len(b)]]}, b)
    assert f.header["error"] == ErrorCode.INVALID_REQUIRED_ACKS


def test_header_cbor_garbage(node):
    r = Raw(node.bootstrap)
    h = b"\xff\xfe"
    r.send_raw(struct.pack("<II", 4 + len(h), len(h)) + h)
    assert r.closed_by_peer()
    h = cbor2.dumps("a string")
    r2 = Raw(node.bootstrap)
    r2.send_raw(struct.pack("<II", 4 + len(h), len(h)) + h)
    assert r2.closed_by_peer()
    _still_serves(node.bootstrap)


def test_full_disk_gives_storage_error_and_the_node_keeps_serving(tmp_path):
    import os
    import resource
    import signal
    import subprocess

    from raftlog.localnode import node_command

    from ..conftest import free_port, wait_for_port

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, resource.RLIM_INFINITY))

    port = free_port()
    data_dir = str(tmp_path / "full")
    os.makedirs(data_dir)
    proc = subprocess.Popen(  # (its own spawn: the file-size limit must be set in the child)
        node_command(port=port, data_dir=data_dir),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit_file_size,
    )
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
        bootstrap = f"127.0.0.1:{port}"
        _create(bootstrap)
        r = Raw(bootstrap)
        batch = encode_batch([b"x" * 1000] * 50)
        codes, acked = [], 0
        for _ in range(10):
            f = r.call(Api.PRODUCE, {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
            part = f.header["parts"][0]
            codes.append(part[2])
            if part[2] == 0:
                acked += 50
        assert ErrorCode.KAFKA_STORAGE_ERROR in codes
        assert "StorageError" not in str(codes)
        _still_serves(bootstrap)
        f = r.call(Api.LIST_OFFSETS, {"parts": [["t", 0, -1]]})
        assert f.header["parts"][0][3] == acked  # exactly what was acknowledged
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_broker_heartbeat_without_a_quorum_is_refused(node):
    r = Raw(node.bootstrap)
    f = r.call(Api.BROKER_HEARTBEAT, {"broker_id": 7, "incarnation_id": "x"})
    assert f.header["error"] == ErrorCode.NOT_CONTROLLER and f.header["message"]
    r.send_raw(encode_frame({"id": 9, "api": int(Api.BROKER_HEARTBEAT), "broker_id": -1, "incarnation_id": 3}))
    assert r.read_raw_frame().header["error"] == ErrorCode.INVALID_REQUEST
