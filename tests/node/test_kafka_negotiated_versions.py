"""Which Produce, Fetch and ListOffsets versions stock Kafka clients negotiate with
raftlog's listener, and that they work at those versions: each client talks to the
node through a recording TCP relay (the node advertises the relay's address, so every
connection goes through it), which notes every request's (api key, version)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tests.conftest import NodeProcess, free_ports, kafka_python_read, wait_for_port

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2


class Relay(threading.Thread):
    """127.0.0.1:port -> the node's Kafka listener, recording request headers."""

    def __init__(self, port: int, target: tuple[str, int]):
        super().__init__(daemon=True)
        self.target = target
        self.server = socket.create_server(("127.0.0.1", port))
        self.seen: dict = {}  # client_id prefix -> {api_key: {versions}}
        self.lock = threading.Lock()

    def run(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    size = struct.unpack(">i", buf[:4])[0]
                    frame, buf = buf[4 : 4 + size], buf[4 + size :]
                    self._note(frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def _note(self, frame: bytes) -> None:
        key, version = struct.unpack(">hh", frame[:4])
        (n,) = struct.unpack(">h", frame[8:10])
        client_id = frame[10 : 10 + n].decode() if n > 0 else ""
        with self.lock:
            self.seen.setdefault(client_id, {}).setdefault(key, set()).add(version)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def versions(self, client_id: str) -> dict:
        with self.lock:
            return {k: max(v) for k, v in self.seen.get(client_id, {}).items()}

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def relayed(tmp_path_factory):
    port, kport, rport = free_ports(3)
    node = NodeProcess(str(tmp_path_factory.mktemp("relay") / "node-1"), port, extra={
        "kafka.listener": f"127.0.0.1:{kport}", "kafka.brokers": f"1@127.0.0.1:{rport}",
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "true"})
    node.start()
    wait_for_port("127.0.0.1", kport)
    relay = Relay(rport, ("127.0.0.1", kport))
    relay.start()
    yield relay, f"127.0.0.1:{rport}"
    relay.close()
    node.stop()
    assert "kafka_handler_failed" not in node.log_text()


def _report(name: str, versions: dict) -> None:
    print(f"{name} negotiated: Produce v{versions.get(PRODUCE)}, Fetch v{versions.get(FETCH)}, "
          f"ListOffsets v{versions.get(LIST_OFFSETS)}")


def test_librdkafka_produces_and_consumes_at_its_newest_versions(relayed):
    ck = pytest.importorskip("confluent_kafka")
    relay, bootstrap = relayed
    p = ck.Producer({"bootstrap.servers": bootstrap, "client.id": "rdk", "acks": "all",
                     "enable.idempotence": True})
    for i in range(5):
        p.produce("rdk-t", value=b"v%d" % i)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": bootstrap, "client.id": "rdk", "group.id": "rdk-g",
                     "auto.offset.reset": "latest", "enable.auto.commit": False})
    c.assign([ck.TopicPartition("rdk-t", 0, ck.OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    lo, hi = c.get_watermark_offsets(ck.TopicPartition("rdk-t", 0), timeout=10)
    c.close()
    assert got == [b"v%d" % i for i in range(5)] and (lo, hi) == (0, 5)
    versions = relay.versions("rdk")
    _report("librdkafka " + ck.libversion()[0], versions)
    assert versions[FETCH] >= 13  # by topic id (librdkafka 2.16 fetches at v16)
    assert versions[PRODUCE] >= 9


def test_kafka_python_and_aiokafka_work_at_the_versions_they_pick(relayed):
    kafka = pytest.importorskip("kafka")
    relay, bootstrap = relayed
    prod = kafka.KafkaProducer(bootstrap_servers=bootstrap, client_id="kpy", acks="all")
    for i in range(3):
        prod.send("kpy-t", b"k%d" % i, partition=0)
    prod.flush(30)
    prod.close()
    cons = kafka.KafkaConsumer(bootstrap_servers=bootstrap, client_id="kpy",
                               auto_offset_reset="earliest", enable_auto_commit=False)
    tp = kafka.TopicPartition("kpy-t", 0)
    cons.assign([tp])
    got = [r.value for r in kafka_python_read(cons, 3)]
    ends = cons.end_offsets([tp])
    version = cons.config["api_version"]
    cons.close()
    assert got == [b"k0", b"k1", b"k2"] and ends == {tp: 3}
    assert version == (4, 2)  # inferred from ListOffsets v11
    versions = relay.versions("kpy")
    _report("kafka-python " + kafka.__version__, versions)
    assert versions[LIST_OFFSETS] == 11  # (3.0.12 stops at Produce v9 and Fetch v12)

    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    async def main():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="aio")
        await p.start()
        try:
            await p.send_and_wait("aio-t", b"a", partition=0)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id="aio",
                                      auto_offset_reset="earliest")
        await c.start()
        try:
            atp = aiokafka.TopicPartition("aio-t", 0)
            c.assign([atp])
            msg = await asyncio.wait_for(c.getone(), 30)
            end = await c.end_offsets([atp])
        finally:
            await c.stop()
        return msg.value, end[atp]

    assert asyncio.run(main()) == (b"a", 1)
    _report("aiokafka " + aiokafka.__version__, relay.versions("aio"))
