"""A Kafka fetch of many partitions is read in slices with a checkpoint between them
(node/kafka/handlers.py ``fetch_large``), in process over a real single-node broker:
other tasks run while it is read, and its answer is the one a small fetch gives."""

from __future__ import annotations

import trio
import trio.testing

from raftlog.kafka import batch as kb
from raftlog.node.kafka.handlers import FETCH_PARTITIONS_PER_STEP, Context, KafkaApis
from raftlog.protocol import Api, Request

from .single_node import close_broker, open_broker

PARTITIONS = 8


def _body(parts: list, max_wait_ms: int = 0, min_bytes: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "t", "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1} for p in parts]}]}


def test_a_fetch_of_many_partitions_yields_between_slices(tmp_path):
    broker = open_broker(tmp_path)
    try:
        broker.create_topic("t", PARTITIONS, 1, {})
        broker.replicas.reconcile()
        data = kb.to_raftlog(kb.encode_batch([b"v"], timestamps=[1]))[0]
        broker.produce(Request(Api.PRODUCE, 0, 1, {"acks": 1, "timeout_ms": 1000,
                                                   "parts": [("t", 3, len(data))]}, data))
        apis = KafkaApis(broker, broker.replicas, broker.config, lambda *a: ("127.0.0.1", 1))
        # 4 slices' worth: the real partitions, unknown ones, and every one twice
        parts = list(range(4 * FETCH_PARTITIONS_PER_STEP)) * 2
        body = _body(parts)
        assert apis.fetch_is_large(body) and not apis.fetch_is_large(_body(range(10)))
        ran = []

        async def main():
            async def other():
                while True:
                    ran.append(1)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as n:
                n.start_soon(other)
                await trio.lowlevel.checkpoint()
                before = len(ran)
                answer = await apis.fetch_large(4, body, Context("c", "h", 1))
                others = len(ran) - before
                n.cancel_scope.cancel()
            small, wait = apis.fetch_begin(4, _body(list(range(PARTITIONS))), Context("c", "h", 2))
            assert wait is None
            return answer, others, small

        answer, others, small = trio.run(main)
        # the other task ran between the slices: at least once per checkpoint but the
        # first (trio may run it before or after this task within a batch)
        assert others >= 2
        [topic] = answer["responses"]
        rows = topic["partitions"]
        assert [r["partition_index"] for r in rows] == list(range(4 * FETCH_PARTITIONS_PER_STEP))
        assert [r["error_code"] for r in rows[:PARTITIONS]] == [0] * PARTITIONS
        assert all(r["error_code"] == 3 for r in rows[PARTITIONS:])  # UNKNOWN_TOPIC_OR_PARTITION
        got = {r["partition_index"]: b"".join(bytes(x) for x in r["records"].items)
               if r["records"] else b"" for r in rows[:PARTITIONS]}
        assert b"v" in got[3] and all(got[p] == b"" for p in got if p != 3)
        # the same rows as a small fetch of those partitions gives
        assert [(r["partition_index"], r["error_code"], r["high_watermark"])
                for r in small["responses"][0]["partitions"]] == \
            [(r["partition_index"], r["error_code"], r["high_watermark"]) for r in rows[:PARTITIONS]]
    finally:
        close_broker(broker)


def test_a_large_fetch_long_polls_once_then_reads_again(tmp_path):
    """Less than min_bytes and no error: one wait of max_wait_ms (virtual clock), then
    the records appended meanwhile are in the answer."""
    broker = open_broker(tmp_path)
    try:
        broker.create_topic("t", 2, 1, {})
        broker.replicas.reconcile()
        apis = KafkaApis(broker, broker.replicas, broker.config, lambda *a: ("127.0.0.1", 1))
        # both real partitions, each named past the slice size (duplicates are dropped)
        body = _body([0, 1] * FETCH_PARTITIONS_PER_STEP, max_wait_ms=5_000, min_bytes=1)
        data = kb.to_raftlog(kb.encode_batch([b"late"], timestamps=[1]))[0]

        async def main():
            async with trio.open_nursery() as n:
                async def append_later():
                    await trio.sleep(1)
                    broker.produce(Request(Api.PRODUCE, 0, 1, {
                        "acks": 1, "timeout_ms": 1000, "parts": [("t", 1, len(data))]}, data))
                n.start_soon(append_later)
                t0 = trio.current_time()
                answer = await apis.fetch_large(4, body, Context("c", "h", 1))
                return answer, trio.current_time() - t0

        answer, waited = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert waited == 5.0  # max_wait_ms, once
        rows = answer["responses"][0]["partitions"]
        assert [r["partition_index"] for r in rows] == [0, 1]
        assert not rows[0]["records"] and rows[1]["records"]
    finally:
        close_broker(broker)


def test_a_native_fetch_reads_a_partition_named_twice_once(tmp_path):
    broker = open_broker(tmp_path)
    try:
        broker.create_topic("t", 1, 1, {})
        broker.replicas.reconcile()
        data = kb.to_raftlog(kb.encode_batch([b"v"], timestamps=[1]))[0]
        broker.produce(Request(Api.PRODUCE, 0, 1, {"acks": 1, "timeout_ms": 1000,
                                                   "parts": [("t", 0, len(data))]}, data))
        req = Request(Api.FETCH, 0, 2, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                        "max_bytes": 1 << 20,
                                        "parts": [("t", 0, 0, 1 << 20, -1)] * 5_000}, b"")
        headers, pieces, total, error = broker.replicas.fetch_once(req)
        assert [(h.topic, h.partition) for h in headers] == [("t", 0)]
        assert len(pieces) == 1 and total == headers[0].length and not error
    finally:
        close_broker(broker)
