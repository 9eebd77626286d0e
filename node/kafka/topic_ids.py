"""Topic ids on the Kafka listener (KIP-516): Fetch v13+ and Produce v13+ name topics by
id, not by name. The handlers (node/kafka/handlers.py) and fetch sessions work on names,
so the listener translates at its edge: :meth:`TopicIds.to_names` turns a request's
ids into the names they stand for (setting aside the ids no topic has), and
:meth:`TopicIds.to_ids` turns the answer's names back into ids and answers the ids set
aside with UNKNOWN_TOPIC_ID, as a Kafka broker does.

An id is the topic's ``topic_id`` of the metadata state (the one Metadata v10+ and
DescribeTopicPartitions report); a topic deleted and re-created under the same name
has a new id, so a client still naming the old one gets UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

#: Kafka's Errors.UNKNOWN_TOPIC_ID (no raftlog equivalent: raftlog names topics)
UNKNOWN_TOPIC_ID = 100
#: Kafka's UNKNOWN_TOPIC_OR_PARTITION, what a name no topic has gets
UNKNOWN_TOPIC_OR_PARTITION = 3
#: first versions naming topics by id
FETCH_TOPIC_IDS_FROM = 13
PRODUCE_TOPIC_IDS_FROM = 13
#: Fetch v15+ carry the replica id in ``replica_state`` (KIP-903), not ``replica_id``
FETCH_REPLICA_STATE_FROM = 15
#: names of topics gone (deleted or re-created) still answered with their old id
FORMER_IDS_MAX = 10_000
ZERO_ID = bytes(16)


def id_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a metadata ``topic_id`` (a UUID string); zeros if not one."""
    try:
        return uuid.UUID(topic_id).bytes
    except (ValueError, TypeError, AttributeError):
        return ZERO_ID


class Note(NamedTuple):
    """What :meth:`TopicIds.to_names` learnt of one request, for :meth:`TopicIds.to_ids`:
    the ids it named by name, and ``unknown``: (id, partitions) of ids no topic has."""

    ids: dict
    unknown: list


class TopicIds:
    """{id: name} and {name: id} of the node's topics, rebuilt when the metadata's
    topic table changes (``topics_of()`` returns the same dict while it does not)."""

    def __init__(self, topics_of) -> None:
        self._topics_of = topics_of
        self._cache: tuple = (None, {}, {})
        #: {name: id} of topics gone since, bounded (oldest dropped first)
        self._former: dict = {}

    def _maps(self) -> tuple:
        topics = self._topics_of()
        cached = self._cache
        if cached[0] is topics:
            return cached
        by_id, by_name = {}, {}
        for name, info in topics.items():
            b = id_bytes(info.topic_id)
            by_id[b] = name
            by_name[name] = b
        for name, old in cached[2].items():
            if by_name.get(name) != old:
                self._former.pop(name, None)
                self._former[name] = old
        while len(self._former) > FORMER_IDS_MAX:
            del self._former[next(iter(self._former))]
        self._cache = cached = (topics, by_id, by_name)
        return cached

    def name_of(self, topic_id: bytes) -> str | None:
        return self._maps()[1].get(bytes(topic_id))

    def id_of(self, name: str) -> bytes:
        """The id of a topic by name: its current one, else the one it had when it
        went (a session's row of a deleted topic), else zeros."""
        return self._maps()[2].get(name) or self._former.get(name, ZERO_ID)

    # ------------------------------------------------------------------ requests

    def to_names(self, api_key: int, version: int, body: dict) -> tuple[dict, Note | None]:
        """(body naming topics by name, note) of a Produce or Fetch request; the body
        itself and None for versions that name topics already."""
        if api_key == 0 and version >= PRODUCE_TOPIC_IDS_FROM:
            return self._named(body, "topic_data", "name", "partition_data", "index")
        if api_key == 1 and version >= FETCH_TOPIC_IDS_FROM:
            out, note = self._named(body, "topics", "topic", "partitions", "partition")
            by_id = self._maps()[1]
            out["forgotten_topics_data"] = [  # (an id no topic has is in no session)
                {**f, "topic": by_id[f["topic_id"]]}
                for f in body["forgotten_topics_data"] or () if f["topic_id"] in by_id]
            if version >= FETCH_REPLICA_STATE_FROM:
                state = body.get("replica_state")
                out["replica_id"] = state["replica_id"] if state else -1
            return out, note
        return body, None

    def _named(self, body: dict, array: str, name_key: str, parts_key: str,
               index_key: str) -> tuple[dict, Note]:
        by_id = self._maps()[1]
        named, ids, unknown = [], {}, []
        for t in body[array]:
            tid = t["topic_id"]
            name = by_id.get(tid)
            if name is None:
                unknown.append((tid, [p[index_key] for p in t[parts_key]]))
            else:
                ids[name] = tid
                named.append({**t, name_key: name})
        return {**body, array: named}, Note(ids, unknown)

    # ------------------------------------------------------------------ responses

    def to_ids(self, api_key: int, body: dict | None, note: Note | None) -> dict | None:
        """The answer of a request :meth:`to_names` translated (``note`` not None):
        each topic by id, and the ids set aside answered UNKNOWN_TOPIC_ID."""
        if note is None or body is None:
            return body
        if api_key == 0:
            return self._by_id(body, note, "name", "partition_responses", _produce_unknown)
        return self._by_id(body, note, "topic", "partitions", _fetch_unknown)

    def _by_id(self, body: dict, note: Note, name_key: str, parts_key: str, unknown_row):
        by_name = self._maps()[2]
        rows = []
        for t in body["responses"]:
            name = t[name_key]
            tid = note.ids.get(name) or self.id_of(name)
            parts = t[parts_key]
            if by_name.get(name) != tid:  # gone (or re-created) since: that id is unknown
                parts = [_as_unknown_id(p) for p in parts]
            rows.append({**t, name_key: "", "topic_id": tid, parts_key: parts})
        for tid, partitions in note.unknown:
            rows.append({name_key: "", "topic_id": tid,
                         parts_key: [unknown_row(p) for p in partitions]})
        return {**body, "responses": rows}


def _as_unknown_id(row: dict) -> dict:
    if row["error_code"] in (0, UNKNOWN_TOPIC_OR_PARTITION):
        row = {**row, "error_code": UNKNOWN_TOPIC_ID}
        if "records" in row:
            row["records"] = None
    return row


def _produce_unknown(index: int) -> dict:
    return {"index": index, "error_code": UNKNOWN_TOPIC_ID, "base_offset": -1,
            "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
            "error_message": None}


def _fetch_unknown(partition: int) -> dict:
    return {"partition_index": partition, "error_code": UNKNOWN_TOPIC_ID, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": None}
