"""#38: a crashed partition leader is fenced without waiting for its session: its
heartbeat connection closes and its listener refuses connections. The session is 60 s
here, so only crash detection can move leadership within the test's waits; a paused
(hung) leader is not fenced that way, and idempotent writes stay in order across it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from raftlog.client import Producer

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

SESSION_MS = 60_000


def _cluster(tmp_path) -> LocalCluster:
    return LocalCluster(tmp_path, 3, broker_session_timeout_ms=SESSION_MS,
                        broker_heartbeat_interval_ms=200).start()


def _controller_logs(c: LocalCluster) -> str:
    return "".join(n.log_text() for n in c.nodes)


def test_a_killed_leader_is_fenced_at_once_and_idempotent_writes_go_on_in_order(tmp_path):
    c = _cluster(tmp_path)
    try:
        with c.admin() as a:
            a.create_topic("crash", partitions=1, replication_factor=3)
        c.wait_isr("crash", 0, {1, 2, 3})
        acked: list[int] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce():
            with Producer(c.bootstrap) as p:  # SDK defaults: acks=all, idempotence
                i = 0
                while not stop.is_set():
                    try:
                        acked.append(p.send("crash", b"%d" % i, partition=0).result(60).offset)
                    except Exception as e:  # counted: none expected
                        errors.append(repr(e))
                    i += 1

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        until(lambda: len(acked) > 100, timeout_s=30)
        old = c.partition("crash")
        victim = c.node(old.leader)
        victim.kill()
        before = len(acked)
        survivor = next(n for n in c.nodes if n is not victim)
        # moved by crash detection: the session (60 s) is far from over
        new = until(lambda: (p := c.partition("crash", 0, survivor)).leader not in
                    (-1, old.leader) and p, timeout_s=30)
        assert new.leader_epoch > old.leader_epoch
        assert "event=broker_crash_seen" in _controller_logs(c)
        until(lambda: len(acked) > before + 100, timeout_s=30)  # the producer goes on
        stop.set()
        t.join(60)
        assert not errors, errors[:3]
        assert acked == list(range(acked[0], acked[0] + len(acked)))  # in order, no gap
    finally:
        c.stop()


def test_a_paused_leader_is_left_to_its_session(tmp_path):
    c = _cluster(tmp_path)
    paused = None
    try:
        with c.admin() as a:
            a.create_topic("hang", partitions=1, replication_factor=3)
        c.wait_isr("hang", 0, {1, 2, 3})
        old = c.partition("hang")
        paused = c.node(old.leader)
        os.kill(paused.proc.pid, signal.SIGSTOP)
        survivor = next(n for n in c.nodes if n is not paused)
        # the controller sees heartbeats stop, not a closed connection: the broker is
        # not probed, never refused, so it stays unfenced until its session ends
        with c.admin(survivor) as a:
            for _ in range(20):  # 2 s: ten of the controller's duty ticks, ten graces
                assert not {b.id for b in a.describe_cluster().brokers if b.fenced}
                time.sleep(0.1)
        assert "event=broker_crash_seen" not in _controller_logs(c)
    finally:
        if paused is not None:
            os.kill(paused.proc.pid, signal.SIGCONT)
        c.stop()
