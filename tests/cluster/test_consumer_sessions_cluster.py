"""The SDK consumer's fetch sessions across leader moves: a killed node's partitions
move to other leaders; the consumer's sessions with them (and with the survivors it
already fetched from) go on, and every record arrives once, in order."""

from __future__ import annotations

import time

import pytest

from raftlog.client import Consumer, Producer, TopicPartition

from .cluster import LocalCluster, until

pytestmark = pytest.mark.slow

PARTS = 6


def _produce(bootstrap: str, tag: str, n: int) -> None:
    with Producer(bootstrap, retry_backoff_ms=50) as p:  # acks=all
        futures = [p.send("moves", f"{tag}-{part}-{i}".encode(), partition=part)
                   for i in range(n) for part in range(PARTS)]
        for f in futures:
            f.result(60)


def _read(c: Consumer, n: int, got: list, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    want = len(got) + n
    while len(got) < want and time.monotonic() < deadline:
        got += c.poll(timeout_ms=200, max_records=10_000)


def test_an_sdk_consumer_follows_leader_moves_in_its_fetch_sessions(tmp_path):
    c = LocalCluster(tmp_path, 3, broker_session_timeout_ms=2000,
                     broker_heartbeat_interval_ms=200).start()
    try:
        with c.admin() as a:
            a.create_topic("moves", partitions=PARTS, replication_factor=3)
        for p in range(PARTS):
            c.wait_isr("moves", p, {1, 2, 3})
        cons = Consumer(c.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        cons.assign([TopicPartition("moves", p) for p in range(PARTS)])
        got: list = []
        _produce(c.bootstrap, "one", 10)
        _read(cons, PARTS * 10, got)
        victim = c.node(c.partition("moves", 0).leader)
        victim.kill()
        survivor = next(n for n in c.nodes if n is not victim)
        until(lambda: all(c.partition("moves", p, survivor).leader not in (-1, victim.node_id)
                          for p in range(PARTS)), timeout_s=30)
        _produce(survivor.bootstrap, "two", 10)
        _read(cons, PARTS * 10, got)
        assert len(got) == PARTS * 20
        for p in range(PARTS):
            rows = [(r.offset, r.value) for r in got if r.partition == p]
            assert rows == [(i, f"{'one' if i < 10 else 'two'}-{p}-{i % 10}".encode())
                            for i in range(20)], p
        sessions = {leader: s for leader, (_conn, s) in cons._fetcher.sessions.items()}
        moved_to = {c.partition("moves", p, survivor).leader for p in range(PARTS)}
        assert victim.node_id not in moved_to and moved_to <= set(sessions)
        assert all(sessions[n].session_id != 0 for n in moved_to)
        cons.close()
    finally:
        c.stop()
