"""`raftlog up --kafka-port`: the local node also serves Kafka clients."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from ..conftest import free_ports

kafka = pytest.importorskip("kafka")


def test_up_with_kafka_port_serves_kafka_clients(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    port, kport = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "raftlog.client.cli", "up", "--data-dir", str(tmp_path / "d"),
         "--port", str(port), "--kafka-port", str(kport)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = b"".join(proc.stdout.readline() for _ in range(5))
        assert f"bootstrap.servers=127.0.0.1:{kport}".encode() in out
        p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{kport}", acks="all")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kport}")
        admin.create_topics([NewTopic("up", 1, 1)])
        admin.close()  # (its I/O thread would outlive the test, calling `random`)
        p.send("up", b"hello").get(timeout=20)
        p.close()
        c = KafkaConsumer("up", bootstrap_servers=f"127.0.0.1:{kport}",
                          auto_offset_reset="earliest")
        got, deadline = [], time.monotonic() + 30
        while not got and time.monotonic() < deadline:  # (the first poll joins, then fetches)
            for recs in c.poll(timeout_ms=500).values():
                got += [m.value for m in recs]
        assert got == [b"hello"]
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"kafka_listening" in err
