"""The SDK consumer's fetch sessions (KIP-227) on the native listener, through real
node processes and sockets: node/consumer_fetch_session.py (the code the Kafka listener
uses too) and client/fetch_session.py."""

from __future__ import annotations

import time

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.conn import BrokerConnection
from raftlog.errors import ErrorCode
from raftlog.protocol import Api


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    with Producer(bootstrap, acks=1, linger_ms=5, retry_backoff_ms=50) as p:
        futures = [p.send(topic, f"{tag}-{part}-{i}".encode(), partition=part)
                   for i in range(per_partition) for part in range(partitions)]
        for f in futures:
            f.result(30)


def read(c: Consumer, n: int, timeout_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(timeout_ms=200, max_records=10_000)
    return got


def by_partition(records) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault(r.partition, []).append((r.offset, r.value))
    return out


def session_of(c: Consumer):
    """The consumer's one fetch session (one node)."""
    [(_conn, s)] = c._fetcher.sessions.values()
    return s


def wait_until(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_consumer_of_many_partitions_reads_everything_in_order_through_a_session(node):
    parts = 200
    with Admin(node.bootstrap) as a:
        a.create_topic("many", partitions=parts)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition("many", p) for p in range(parts)])
    produce(node.bootstrap, "many", parts, 3, "a")
    got = read(c, parts * 3)
    produce(node.bootstrap, "many", parts, 2, "b")
    got += read(c, parts * 2)
    assert len(got) == parts * 5
    expect = {p: [(i, f"{'a' if i < 3 else 'b'}-{p}-{i if i < 3 else i - 3}".encode())
                  for i in range(5)] for p in range(parts)}
    assert by_partition(got) == expect  # every record once, each partition in order
    s = session_of(c)
    assert s.session_id != 0 and s.incremental_fetches > s.full_fetches >= 1
    # quiet now: incremental fetches name nothing, and answers hold nothing
    before = s.incremental_fetches
    assert c.poll(timeout_ms=500) == []
    wait_until(lambda: s.incremental_fetches > before + 1)
    assert len(s.told) == parts  # the node's session holds every partition
    assert s.build({tp: v for tp, v in s.told.items()})[2:] == ([], [])
    c.close()


def test_fetch_sessions_off_sends_full_fetches(node):
    with Admin(node.bootstrap) as a:
        a.create_topic("off", partitions=4)
    produce(node.bootstrap, "off", 4, 2, "x")
    with Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_sessions=False) as c:
        c.assign([TopicPartition("off", p) for p in range(4)])
        assert len(read(c, 8)) == 8
        assert c._fetcher.sessions == {}


def test_a_node_restart_or_an_evicted_session_starts_a_new_one_losing_nothing(node):
    parts = 20
    with Admin(node.bootstrap) as a:
        a.create_topic("r", partitions=parts)
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition("r", p) for p in range(parts)])
    produce(node.bootstrap, "r", parts, 2, "one")
    got = read(c, parts * 2)
    old = session_of(c).session_id
    assert old != 0

    # evicted: another client's full fetch with the session's id closes it on the node
    # (as Kafka's), so the consumer's next incremental fetch gets FETCH_SESSION_ID_NOT_FOUND
    other = BrokerConnection("127.0.0.1", node.port)
    answer = other.request(Api.FETCH, {"parts": [["r", 0, 0, 1024, -1]], "max_wait_ms": 0,
                                       "session_id": old, "session_epoch": 0})
    assert answer.header["session_id"] not in (0, old)
    other.close()
    wait_until(lambda: session_of(c).session_id not in (0, old))  # a new full fetch
    produce(node.bootstrap, "r", parts, 2, "two")
    got += read(c, parts * 2)

    node.restart()  # the connection and every session go: a new one on reconnect
    produce(node.bootstrap, "r", parts, 2, "three")
    got += read(c, parts * 2, timeout_s=40)
    assert len(got) == parts * 6
    for p, rows in by_partition(got).items():
        assert [o for o, _ in rows] == list(range(6)), p
        assert [v for _, v in rows] == [f"{t}-{p}-{i}".encode() for t in ("one", "two", "three")
                                        for i in range(2)]
    assert session_of(c).session_id != 0 and session_of(c).full_fetches >= 1
    c.close()


def test_an_unknown_session_or_a_wrong_epoch_is_answered_with_kafkas_errors(node):
    with Admin(node.bootstrap) as a:
        a.create_topic("e")
    conn = BrokerConnection("127.0.0.1", node.port)
    part = [["e", 0, 0, 1024, -1]]

    def ask(fields):
        conn.send(Api.FETCH, fields)
        return conn.receive(30)
    try:
        frame = conn.request(Api.FETCH, {"parts": part, "max_wait_ms": 0, "session_id": 0,
                                          "session_epoch": 0})
        sid = frame.header["session_id"]
        assert sid > 0
        frame = ask({"parts": [], "max_wait_ms": 0, "session_id": sid, "session_epoch": 5})
        assert frame.header["error"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert "full fetch" in frame.header["message"]
        frame = ask({"parts": [], "max_wait_ms": 0, "session_id": sid + 1,
                     "session_epoch": 1})
        assert frame.header["error"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # the right epoch: only rows with news (none), the same id
        frame = conn.request(Api.FETCH, {"parts": [], "max_wait_ms": 0, "session_id": sid,
                                          "session_epoch": 1})
        assert (frame.header["parts"], frame.header["session_id"]) == ([], sid)
        # a fetch without the fields (an older client): a full answer, no session
        frame = conn.request(Api.FETCH, {"parts": part, "max_wait_ms": 0})
        assert len(frame.header["parts"]) == 1 and "session_id" not in frame.header
    finally:
        conn.close()


def test_seek_and_pause_resume_within_a_session(node):
    parts = 10
    with Admin(node.bootstrap) as a:
        a.create_topic("s", partitions=parts)
    produce(node.bootstrap, "s", parts, 3, "x")
    c = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    tps = [TopicPartition("s", p) for p in range(parts)]
    c.assign(tps)
    assert len(read(c, parts * 3)) == parts * 3
    opened = session_of(c).session_id
    assert opened != 0
    # seek one partition back: its records again from there, the others not
    c.seek(tps[3], 1)
    again = read(c, 2)
    assert [(r.partition, r.offset) for r in again] == [(3, 1), (3, 2)]
    # pause two: records written to them are not returned until resumed
    c.pause(tps[0], tps[1])
    assert c.paused() == {tps[0], tps[1]}
    produce(node.bootstrap, "s", parts, 1, "y")
    got = read(c, parts - 2)
    assert sorted(r.partition for r in got) == list(range(2, parts))
    assert c.poll(timeout_ms=300) == []
    c.resume(tps[0], tps[1])
    got = read(c, 2)
    assert sorted((r.partition, r.offset, r.value) for r in got) == [
        (0, 3, b"y-0-0"), (1, 3, b"y-1-0")]
    assert c.position(tps[0]) == 4 and c.position(tps[1]) == 4
    # all in the one session: a long poll in flight at each change was superseded by
    # the next fetch on the same connection, not dropped with it
    s = session_of(c)
    assert (s.session_id, s.full_fetches) == (opened, 1) and s.incremental_fetches > 3
    c.close()
