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

from raftlog.client import Consumer, Producer, TopicPartition

from .cluster import AckedWrites, LocalCluster, until

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
        w = AckedWrites(c.bootstrap, "crash").start()
        acked = w.acked
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
        w.stop()
        assert not w.errors, w.errors[:3]
        assert w.in_order()
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


def test_clients_move_off_a_paused_leader_once_its_session_ends(tmp_path):
    """A hung leader answers nothing, and its connections stay open: the SDK producer
    and consumer must not wait out their request timeout (60 s here) on it. Once the
    session (2 s here) fences it and another replica leads, the producer's in-flight
    batches go to the new leader in order, and the consumer fetches from it."""
    request_timeout_ms = 60_000
    c = LocalCluster(tmp_path, 3, broker_session_timeout_ms=2000,
                     broker_heartbeat_interval_ms=200).start()
    paused = None
    try:
        with c.admin() as a:
            a.create_topic("stall", partitions=1, replication_factor=3)
        c.wait_isr("stall", 0, {1, 2, 3})
        acks: list[tuple[int, float]] = []  # (record number, acknowledged at)
        errors: list[str] = []
        read: list[bytes] = []
        stop, produced = threading.Event(), threading.Event()

        def on_ack(i):
            def done(fut):
                if fut.exception() is None:
                    acks.append((i, time.monotonic()))
                else:
                    errors.append(repr(fut.exception()))
            return done

        def produce():  # SDK defaults (acks=all, idempotence), several batches in flight
            with Producer(c.bootstrap, request_timeout_ms=request_timeout_ms,
                          delivery_timeout_ms=2 * request_timeout_ms) as p:
                i = 0
                while not stop.is_set():
                    p.send("stall", b"%d" % i, partition=0).add_done_callback(on_ack(i))
                    i += 1
                    time.sleep(0.002)
                p.flush(2 * request_timeout_ms / 1000)
            produced.set()

        def consume():
            with Consumer(c.bootstrap, auto_offset_reset="earliest",
                          request_timeout_ms=request_timeout_ms) as cons:
                cons.assign([TopicPartition("stall", 0)])
                deadline = time.monotonic() + 300
                while (not produced.is_set() or len(read) < len(acks)) and \
                        time.monotonic() < deadline:
                    read.extend(r.value for r in cons.poll(timeout_ms=100))

        threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
        for t in threads:
            t.start()
        until(lambda: len(acks) > 200 and len(read) > 200, timeout_s=30)
        old = c.partition("stall")
        paused = c.node(old.leader)
        os.kill(paused.proc.pid, signal.SIGSTOP)
        survivor = next(n for n in c.nodes if n is not paused)
        until(lambda: c.partition("stall", 0, survivor).leader not in (-1, old.leader),
              timeout_s=30)
        # from here on only the new leader answers: both clients go on through it, long
        # before their request timeout (60 s) would have given up on the paused one
        mark = max((i for i, _ in acks), default=-1)
        half = request_timeout_ms / 1000 / 2
        until(lambda: any(i > mark for i, _ in acks[-50:]), timeout_s=half)
        until(lambda: read and int(read[-1]) > mark, timeout_s=half)
        stop.set()
        for t in threads:
            t.join(2 * request_timeout_ms / 1000)
        assert not errors, errors[:3]
        n = len(acks)
        assert sorted(i for i, _ in acks) == list(range(n))
        # read back: every acknowledged record once, in the order sent (no duplicate from
        # a batch both the old and the new leader took, no gap)
        assert read == [b"%d" % i for i in range(n)]
    finally:
        if paused is not None:
            os.kill(paused.proc.pid, signal.SIGCONT)
        c.stop()
