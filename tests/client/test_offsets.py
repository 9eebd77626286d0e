"""client/offsets.py: ListOffsets by leader, retried per partition, bounded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raftlog.client.errors import UnknownTopicOrPartitionError, api_error
from raftlog.client.offsets import list_offsets, list_offsets_strict
from raftlog.client.types import TopicPartition
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api, ListOffsetsPartResult

T0, T1, GONE = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("gone", 0)


class _Cluster:
    """Leaders and answers scripted per round; records each LIST_OFFSETS."""

    def __init__(self, answers):
        self.answers, self.asked, self.topics = answers, [], {"t": {}}

    def leader_for(self, topic, partition):
        if topic == "gone":
            raise api_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "gone")
        return partition + 1

    def connection(self, leader):
        def request(api, fields, timeout_s):
            assert api is Api.LIST_OFFSETS
            parts = fields["parts"]
            self.asked.append([(t, p) for t, p, _ in parts])
            return SimpleNamespace(header={"parts": [
                ListOffsetsPartResult(t, p, *self.answers[(t, p)].pop(0)) for t, p, _ in parts]})
        return SimpleNamespace(request=request)


def test_a_retriable_error_is_retried_for_that_partition_only():
    c = _Cluster({("t", 0): [(0, 5, -1)],
                  ("t", 1): [(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1), (0, 9, -1)]})
    out = list_offsets(c, {T0: -1, T1: -1, GONE: -1}, 1.0, rounds=3, backoff_s=0)
    assert out[T0] == (5, -1) and out[T1] == (9, -1)
    assert isinstance(out[GONE], UnknownTopicOrPartitionError)  # final: not retried
    assert c.asked == [[("t", 0)], [("t", 1)], [("t", 1)]]


def test_rounds_are_bounded_and_strict_raises_what_remains():
    bad = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1)
    c = _Cluster({("t", 0): [bad] * 2})
    with pytest.raises(ApiError) as e:
        list_offsets_strict(c, {T0: -2}, 1.0, rounds=2, backoff_s=0)
    assert e.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and len(c.asked) == 2
