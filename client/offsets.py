"""Requests by partition leader, and ListOffsets written once (Consumer and Admin).

:func:`requests_by_leader` groups partitions by the node that leads them;
:func:`list_offsets` asks each leader once per round and retries, per partition, what
failed with a retriable error (a leader moving, a node restarting), with fresh
metadata, a bounded number of rounds. An unknown topic is final: ``partitions_for``
has already waited for a topic that is just being created.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

from .conn import Cluster
from .errors import BrokerNotAvailableError, api_error
from .types import TopicPartition


def requests_by_leader(cluster: Cluster, tps) -> tuple[dict[int, list], dict]:
    """({leader id: [tp, ...]}, {tp: ApiError of its leader lookup})."""
    by_leader: dict[int, list] = {}
    failed: dict = {}
    for tp in tps:
        try:
            by_leader.setdefault(cluster.leader_for(tp.topic, tp.partition), []).append(tp)
        except ApiError as e:
            failed[tp] = e
    return by_leader, failed


def list_offsets(cluster: Cluster, wanted: Mapping[TopicPartition, int], timeout_s: float, *,
                 rounds: int, backoff_s: float, isolation_level: int = 0) -> dict:
    """``{tp: (offset, timestamp)}``, or ``{tp: error}`` for a partition that failed;
    ``wanted`` maps each partition to a timestamp (LATEST_TIMESTAMP / EARLIEST_TIMESTAMP
    or ms). At most ``rounds`` rounds, ``backoff_s`` x round number apart.
    ``isolation_level`` 1 (read_committed): LATEST_TIMESTAMP is the last stable offset."""
    results: dict = {}
    pending = dict(wanted)
    for attempt in range(rounds):
        retry: dict = {}
        by_leader, failed = requests_by_leader(cluster, pending)
        for tp, e in failed.items():
            final = not e.retriable or e.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            (results if final else retry)[tp] = e
        for leader, tps in by_leader.items():
            try:
                frame = cluster.connection(leader).request(
                    Api.LIST_OFFSETS,
                    {"parts": [[tp.topic, tp.partition, pending[tp]] for tp in tps],
                     "isolation_level": isolation_level},
                    timeout_s=timeout_s,
                )
            except BrokerNotAvailableError as e:
                retry.update(dict.fromkeys(tps, e))
                continue
            except ApiError as e:
                (retry if e.retriable else results).update(dict.fromkeys(tps, e))
                continue
            for tp, part in zip(tps, frame.header["parts"]):
                if part.error:
                    e = api_error(part.error, f"list offsets of {tp.topic}-{tp.partition}")
                    (retry if e.retriable else results)[tp] = e
                else:
                    results[tp] = (part.offset, part.timestamp)
        if not retry:
            break
        if attempt + 1 == rounds:
            results.update(retry)
            break
        pending = {tp: wanted[tp] for tp in retry}
        cluster.topics.clear()
        time.sleep(backoff_s * (attempt + 1))
    return results


def list_offsets_strict(cluster: Cluster, wanted: Mapping, timeout_s: float, *, rounds: int,
                        backoff_s: float, isolation_level: int = 0) -> dict:
    """``{tp: (offset, timestamp)}``; raises the error of the first partition that failed."""
    out = {}
    for tp, r in sorted(list_offsets(cluster, wanted, timeout_s, rounds=rounds,
                                     backoff_s=backoff_s,
                                     isolation_level=isolation_level).items()):
        if not isinstance(r, tuple):
            raise r
        out[tp] = r
    return out
