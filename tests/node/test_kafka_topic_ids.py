"""node/kafka/topic_ids.py, pure: a Produce or Fetch naming topics by id read by name,
and its answer by id again; ids no topic has set aside and answered UNKNOWN_TOPIC_ID."""

from __future__ import annotations

import uuid

from raftlog.node.kafka.topic_ids import (
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    TopicIds,
    id_bytes,
)
from raftlog.node.topics import TopicInfo

A, B, GHOST = (uuid.uuid4() for _ in range(3))


class _Store:
    def __init__(self, **topics):
        self.topics = {n: TopicInfo(n, str(i)) for n, i in topics.items()}


def _ids(store) -> TopicIds:
    return TopicIds(lambda: store.topics)


def test_versions_before_ids_pass_through_untouched():
    ids = _ids(_Store(a=A))
    body = {"topic_data": [{"name": "a", "partition_data": []}]}
    assert ids.to_names(0, 12, body) == (body, None)
    assert ids.to_names(1, 12, {"topics": []}) == ({"topics": []}, None)
    assert ids.to_ids(0, {"responses": []}, None) == {"responses": []}


def test_a_produce_by_id_is_read_by_name_and_answered_by_id():
    ids = _ids(_Store(a=A, b=B))
    body = {"acks": 1, "topic_data": [
        {"topic_id": A.bytes, "name": "", "partition_data": [{"index": 0, "records": b""}]},
        {"topic_id": GHOST.bytes, "name": "", "partition_data": [{"index": 1, "records": b""},
                                                                 {"index": 2, "records": b""}]}]}
    named, note = ids.to_names(0, 13, body)
    assert [t["name"] for t in named["topic_data"]] == ["a"]  # the ghost set aside
    answer = {"responses": [{"name": "a", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7}]}], "throttle_time_ms": 0}
    out = ids.to_ids(0, answer, note)
    assert [(t["topic_id"], [(p["index"], p["error_code"]) for p in t["partition_responses"]])
            for t in out["responses"]] == [
        (A.bytes, [(0, 0)]), (GHOST.bytes, [(1, UNKNOWN_TOPIC_ID), (2, UNKNOWN_TOPIC_ID)])]
    assert out["responses"][1]["partition_responses"][0]["base_offset"] == -1


def test_a_fetch_by_id_forgets_by_id_and_reads_the_replica_state():
    ids = _ids(_Store(a=A))
    body = {"replica_id": -1, "replica_state": {"replica_id": 5, "replica_epoch": 3},
            "topics": [{"topic_id": A.bytes, "partitions": [{"partition": 0}]}],
            "forgotten_topics_data": [{"topic_id": A.bytes, "partitions": [1]},
                                      {"topic_id": GHOST.bytes, "partitions": [0]}]}
    named, note = ids.to_names(1, 15, body)
    assert named["topics"][0]["topic"] == "a"
    assert [f["topic"] for f in named["forgotten_topics_data"]] == ["a"]
    assert named["replica_id"] == 5  # v15+: from replica_state
    assert ids.to_names(1, 14, {**body, "replica_id": -1})[0]["replica_id"] == -1


def test_a_topic_gone_or_recreated_since_answers_its_old_id_as_unknown():
    store = _Store(a=A)
    ids = _ids(store)
    named, note = ids.to_names(1, 13, {"topics": [{"topic_id": A.bytes, "partitions": []}],
                                       "forgotten_topics_data": []})
    store.topics = {"a": TopicInfo("a", str(B))}  # deleted and re-created meanwhile
    answer = {"responses": [{"topic": "a", "partitions": [
        {"partition_index": 0, "error_code": 0, "records": b"x"}]}]}
    (t,) = ids.to_ids(1, answer, note)["responses"]
    assert t["topic_id"] == A.bytes
    assert t["partitions"][0]["error_code"] == UNKNOWN_TOPIC_ID
    assert t["partitions"][0]["records"] is None
    # a row of a deleted topic named by no request (a fetch session's) keeps its old id
    store.topics = {}
    _, empty = ids.to_names(1, 13, {"topics": [], "forgotten_topics_data": []})
    (t,) = ids.to_ids(1, {"responses": [{"topic": "a", "partitions": [
        {"partition_index": 0, "error_code": UNKNOWN_TOPIC_OR_PARTITION}]}]},
        empty)["responses"]
    assert t["topic_id"] == B.bytes and t["partitions"][0]["error_code"] == UNKNOWN_TOPIC_ID


def test_id_bytes_of_a_bad_id_is_zeros():
    assert id_bytes(str(A)) == A.bytes and id_bytes("nope") == bytes(16)
