"""#32: nothing stops a second node on a data dir in use -- now the second one exits at
once naming the owner, and the first keeps every acknowledged record."""

from __future__ import annotations

import signal
import subprocess

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.localnode import node_command

from ..conftest import NodeProcess, free_port


def _records(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(topic, 0)])
        out: list[bytes] = []
        for _ in range(20):
            out += [r.value for r in c.poll(timeout_ms=500)]
            if len(out) >= 2:
                break
        return out
    finally:
        c.close()


def test_a_second_node_on_a_data_dir_in_use_exits_at_once_and_loses_nothing(tmp_path):
    first = NodeProcess(str(tmp_path / "data"), free_port()).start()
    try:
        Admin(first.bootstrap).create_topic("t")
        with Producer(first.bootstrap) as p:
            p.send("t", b"one", partition=0).result(10)
        argv = node_command(node_id=1, port=free_port(), data_dir=first.data_dir)
        r = subprocess.run(argv, capture_output=True, timeout=60)
        assert r.returncode == 1, r.stderr.decode()
        assert (f"data dir {first.data_dir} is in use by pid {first.proc.pid} (node 1)"
                in r.stderr.decode()), r.stderr.decode()
        with Producer(first.bootstrap) as p:
            p.send("t", b"two", partition=0).result(10)
        first.restart()
        assert _records(first.bootstrap, "t") == [b"one", b"two"]
        assert open(f"{first.data_dir}/node.pid").read() == f"{first.proc.pid}\n"
    finally:
        first.stop()


def test_a_killed_node_restarts_on_its_data_dir_without_clean_up(tmp_path):
    n = NodeProcess(str(tmp_path / "data"), free_port()).start()
    try:
        Admin(n.bootstrap).create_topic("t")
        with Producer(n.bootstrap) as p:
            p.send("t", b"kept", partition=0).result(10)
        n.stop(signal.SIGKILL)
        n.start()
        assert _records(n.bootstrap, "t")[:1] == [b"kept"]
    finally:
        n.stop()
