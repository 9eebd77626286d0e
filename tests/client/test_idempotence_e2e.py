"""The idempotent producer against a real node (issue #7): a retried batch whose
response was lost is appended once; sequence and epoch errors are clear."""

from __future__ import annotations

import os
import socket
import struct
import threading

import pytest

from raftlog import records
from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.conn import BrokerConnection
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from ..conftest import NodeProcess, free_port


class CuttingProxy:
    """Forwards one port to the node; after the first PRODUCE request has gone
    through, it drops the connection instead of forwarding the node's answer: the
    node appended, the producer never heard of it. ``arm_after``: cut after that many
    PRODUCE requests instead (later ones may be in flight behind it)."""

    def __init__(self, port: int, target: tuple[str, int], arm_after: int = 1):
        self.target = target
        self.arm_after = arm_after
        self.produces = 0
        self.listener = socket.create_server(("127.0.0.1", port))
        self.armed = threading.Event()
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _up(self, src, dst):
        buf = b""
        try:
            while data := src.recv(65536):
                buf += data
                while len(buf) >= 8:
                    n = struct.unpack("<I", buf[:4])[0]
                    if len(buf) < 4 + n:
                        break
                    frame, buf = buf[4:4 + n], buf[4 + n:]
                    if not self.cut.is_set() and b"acks" in frame:
                        self.produces += 1
                        if self.produces >= self.arm_after:
                            self.armed.set()
                dst.sendall(data)
        except OSError:
            pass

    def _down(self, src, dst):
        try:
            while data := src.recv(65536):
                if self.armed.is_set() and not self.cut.is_set():
                    self.cut.set()
                    for sock in (dst, src):  # shutdown: another thread is in recv on it
                        sock.shutdown(socket.SHUT_RDWR)
                        sock.close()
                    return
                dst.sendall(data)
        except OSError:
            pass

    def close(self):
        self.listener.close()


@pytest.fixture
def proxied_node(tmp_path, request):
    proxy_port = free_port()
    n = NodeProcess(str(tmp_path / "node"), free_port(),
                    extra={"advertised.listeners": f"127.0.0.1:{proxy_port}"})
    n.start()
    proxy = CuttingProxy(proxy_port, (n.host, n.port), getattr(request, "param", 1))
    yield n, proxy_port, proxy
    proxy.close()
    n.stop()


def _read_all(bootstrap: str, topic: str, n: int) -> list:
    c = Consumer(bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    got: list = []
    for _ in range(200):
        got += c.poll(timeout_ms=100, max_records=100_000)
        if len(got) >= n:
            break
    got += c.poll(timeout_ms=200)  # anything extra (a duplicate) shows up too
    c.close()
    return got


@pytest.mark.parametrize("proxied_node", [6], indirect=True)
def test_retries_after_a_lost_connection_with_batches_in_flight_append_once_in_order(
        proxied_node):
    """Several idempotent batches of one partition in flight when the connection dies:
    the node appended some of them, the producer heard of none. The retries go out in
    sequence order; what was appended is answered as a duplicate, the rest appended."""
    node, proxy_port, proxy = proxied_node
    Admin(node.bootstrap).create_topic("inflight")
    n = 3000
    with Producer(f"127.0.0.1:{proxy_port}", acks="all", linger_ms=0, batch_size=512,
                  retry_backoff_ms=50) as p:
        futures = [p.send("inflight", b"%05d" % i, partition=0) for i in range(n)]
        offsets = [f.result(30).offset for f in futures]
        assert proxy.cut.is_set(), "the proxy never cut the connection"
    assert offsets == list(range(n))
    got = _read_all(node.bootstrap, "inflight", n)
    assert [r.value for r in got] == [b"%05d" % i for i in range(n)]


def test_a_send_many_of_several_batches_is_pipelined_one_batch_a_request(node):
    """A send_many larger than batch_size splits into batches; with idempotence a
    partition's window is five batches, so the producer sends each batch in a request
    of its own (as Kafka's does) rather than all five in one request that nothing can
    follow until it is answered. The records land once, in order."""
    Admin(node.bootstrap).create_topic("pipelined")
    values = [b"%05d" % i for i in range(5000)]
    with Producer(node.bootstrap, batch_size=13 * 1000) as p:  # 13 B a record: 5 batches
        assert p.enable_idempotence
        p.send("pipelined", b"first", partition=0).result(10)  # (the partition acked once)
        before = p._io.produce_requests
        futures = p.send_many("pipelined", values, partition=0)
        assert len(futures) == 5
        offsets = [f.result(30).base_offset for f in futures]
        assert p._io.produce_requests - before == 5
    assert offsets == [1 + 1000 * i for i in range(5)]
    got = _read_all(node.bootstrap, "pipelined", 5001)
    assert [r.value for r in got] == [b"first", *values]


def test_small_send_many_calls_join_one_batch(node):
    """send_many calls smaller than batch_size join the partition's open batch, as
    send()'s records do (each used to be a batch of its own, and a partition's window is
    five batches: ten-record calls made ~15K records/s). One batch, one request, every
    call's offsets consecutive and in order."""
    Admin(node.bootstrap).create_topic("small")
    with Producer(node.bootstrap, linger_ms=60_000) as p:  # (flush() seals the batch)
        p.send("small", b"first", partition=0)
        p.flush()
        before = p._io.produce_requests
        futures = [p.send_many("small", [b"%d-%d" % (c, i) for i in range(10)], partition=0)
                   for c in range(200)]
        p.flush()
        assert p._io.produce_requests - before == 1
        assert [f.result(10).offsets for f in futures] == [
            range(1 + 10 * c, 11 + 10 * c) for c in range(200)]
    got = _read_all(node.bootstrap, "small", 2001)
    assert [r.value for r in got[1:]] == [b"%d-%d" % (c, i) for c in range(200) for i in range(10)]


def test_large_records_never_make_a_batch_over_max_message_bytes(node):
    """With the default batch_size (1,000,000) a record that would take the open batch
    past it starts the next batch: records of 300 KB sent together (the window full, so
    they accumulate) all land, none refused as MESSAGE_TOO_LARGE by the topic's default
    max.message.bytes (1 MiB + 12)."""
    Admin(node.bootstrap).create_topic("large")
    values = [bytes([i]) * 300_000 for i in range(20)]
    with Producer(node.bootstrap, linger_ms=100) as p:
        futures = [p.send("large", v, partition=0) for v in values]
        offsets = [f.result(30).offset for f in futures]
        # a send_many whose large records bunch up at its start: an even split by count
        # would put all four in its first chunk (1.2 MB)
        mixed = [b"L" * 300_000] * 4 + [b"s"] * 500
        metas = [f.result(30) for f in p.send_many("large", mixed, partition=0)]
    assert offsets == list(range(20))
    assert [o for m in metas for o in m.offsets] == list(range(20, 524))
    got = _read_all(node.bootstrap, "large", 524)
    assert [r.value for r in got] == values + mixed


def test_a_batch_size_above_max_message_bytes_is_refused_saying_what_to_do(node):
    """A user's mistake: batch_size raised above the topic's max.message.bytes. The batch
    is refused (nothing written) with an error naming both settings."""
    Admin(node.bootstrap).create_topic("toolarge")
    with Producer(node.bootstrap, batch_size=4_000_000, linger_ms=200) as p:
        futures = [p.send("toolarge", b"v" * 300_000, partition=0) for _ in range(8)]
        with pytest.raises(ApiError, match="MESSAGE_TOO_LARGE") as e:
            futures[0].result(30)
    assert "batch_size" in e.value.message and "max.message.bytes" in e.value.message
    assert "'toolarge'" in e.value.message
    c = Consumer(node.bootstrap)
    assert c.end_offsets([TopicPartition("toolarge", 0)]) == {TopicPartition("toolarge", 0): 0}
    c.close()


def test_a_retry_after_a_lost_response_is_appended_once(proxied_node):
    node, proxy_port, proxy = proxied_node
    Admin(node.bootstrap).create_topic("once")
    with Producer(f"127.0.0.1:{proxy_port}", acks="all", retry_backoff_ms=50) as p:
        assert p.enable_idempotence
        meta = p.send("once", b"exactly-once", partition=0).result(20)
        assert proxy.cut.is_set(), "the proxy never cut a produce response"
        p.send("once", b"next", partition=0).result(20)
    assert meta.offset == 0
    c = Consumer(node.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("once", 0)])
    got = []
    for _ in range(50):
        got += c.poll(timeout_ms=100)
        if len(got) >= 2:
            break
    c.close()
    assert [r.value for r in got] == [b"exactly-once", b"next"]


def _produce_raw(conn, data, acks=-1):
    h = conn.request(Api.PRODUCE, {"acks": acks, "timeout_ms": 5000,
                                   "parts": [["raw", 0, len(data)]]}, data).header
    return h["parts"][0]


def test_duplicates_out_of_order_and_fenced_epochs_on_the_wire(node):
    Admin(node.bootstrap).create_topic("raw")
    conn = BrokerConnection(node.host, node.port)
    pid = conn.request(Api.INIT_PRODUCER_ID, {}).header["producer_id"]
    other = conn.request(Api.INIT_PRODUCER_ID, {}).header["producer_id"]
    assert pid >= 0 and other != pid

    def batch(seq, n=2, epoch=0, producer=pid):
        return records.encode_batch([b"x"] * n, producer_id=producer, producer_epoch=epoch,
                                    base_sequence=seq)

    assert _produce_raw(conn, batch(0))[2:4] == (0, 0)
    assert _produce_raw(conn, batch(2))[2:4] == (0, 2)
    # a retry of either batch: its original offset, nothing appended
    assert _produce_raw(conn, batch(0))[2:4] == (0, 0)
    assert _produce_raw(conn, batch(2))[2:4] == (0, 2)
    # a gap in the sequence
    r = _produce_raw(conn, batch(7))
    assert r[2] == ErrorCode.OUT_OF_ORDER_SEQUENCE and "expected 4" in r[5]
    # a new epoch fences the old one
    assert _produce_raw(conn, batch(0, epoch=1))[2:4] == (0, 4)
    r = _produce_raw(conn, batch(4, epoch=0))
    assert r[2] == ErrorCode.INVALID_PRODUCER_EPOCH
    # another producer has its own sequence
    assert _produce_raw(conn, batch(0, producer=other))[2:4] == (0, 6)
    # the state survives a restart (rebuilt from the log)
    conn.close()
    node.restart()
    conn = BrokerConnection(node.host, node.port)
    assert _produce_raw(conn, batch(0, epoch=1))[2:4] == (0, 4)
    assert _produce_raw(conn, batch(2, epoch=1))[2:4] == (0, 8)
    # producer ids are never handed out twice, also after a restart
    assert conn.request(Api.INIT_PRODUCER_ID, {}).header["producer_id"] > other
    conn.close()
    node.restart()  # clean: the state is snapshotted, then the snapshot is used
    assert os.path.exists(os.path.join(node.data_dir, "raw-0", "producer.snapshot"))
    conn = BrokerConnection(node.host, node.port)
    assert _produce_raw(conn, batch(2, epoch=1))[2:4] == (0, 8)
    assert _produce_raw(conn, batch(4, epoch=1))[2:4] == (0, 10)
    conn.close()
    node.kill()  # a crash: rebuilt from the snapshot plus the log after it
    node.start()
    conn = BrokerConnection(node.host, node.port)
    assert _produce_raw(conn, batch(4, epoch=1))[2:4] == (0, 10)
    assert _produce_raw(conn, batch(0, producer=other))[2:4] == (0, 6)
    r = _produce_raw(conn, batch(9, epoch=1))
    assert r[2] == ErrorCode.OUT_OF_ORDER_SEQUENCE and "expected 6" in r[5]
    conn.close()


def test_several_idempotent_batches_in_one_partition_entry_are_refused(node):
    Admin(node.bootstrap).create_topic("raw")
    conn = BrokerConnection(node.host, node.port)
    pid = conn.request(Api.INIT_PRODUCER_ID, {}).header["producer_id"]
    two = b"".join(records.encode_batch([b"x"], producer_id=pid, producer_epoch=0,
                                        base_sequence=s) for s in (0, 1))
    r = _produce_raw(conn, two)
    assert r[2] == ErrorCode.INVALID_REQUEST and "exactly one batch" in r[5]
    conn.close()
    with pytest.raises(ApiError):
        raise ApiError(ErrorCode(r[2]), r[5])
