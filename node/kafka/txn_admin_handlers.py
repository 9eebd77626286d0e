"""Kafka's transaction admin APIs (KIP-664; issue #33) on the Kafka listener:
DescribeProducers (61), DescribeTransactions (65), ListTransactions (66), each by the
native handler of the same API (node/broker.py, node/txn_host.py) through its native
route's ACL check (``handlers._req``), as node/kafka/admin_handlers.py does.

ACLs (the native filters, ``AclCheck.filter_response``): DescribeTransactions answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for each id the principal may not DESCRIBE and
leaves out a described transaction's partitions of topics it may not describe;
ListTransactions lists only the ids it may DESCRIBE, as Kafka. DescribeProducers needs
READ on each topic, as Kafka.
"""

from __future__ import annotations

from raftlog.errors import ApiError, ErrorCode
from raftlog.kafka.errors import to_kafka
from raftlog.protocol import Api

from ..authz import READ, TOPIC
from .handlers import Context, _req

_E = {c: to_kafka(c) for c in ErrorCode}


class KafkaTxnAdminApis:
    """The transaction-admin part of the Kafka listener's API table (merged into
    KafkaApis')."""

    def __init__(self, apis):
        self.broker = apis.broker

    def handlers(self) -> dict:
        return {61: self.describe_producers, 65: self.describe_transactions,
                66: self.list_transactions}

    def _txn(self):
        if self.broker.txn is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        return self.broker.txn

    async def describe_producers(self, v: int, body: dict, ctx: Context) -> dict:
        """Each partition's producers from this node as its leader
        (NOT_LEADER_OR_FOLLOWER otherwise), TOPIC_AUTHORIZATION_FAILED per partition
        without READ on its topic."""
        parts, early = [], {}
        for t in body["topics"]:
            for p in t["partition_indexes"]:
                key = (t["name"], p)
                if p < 0:
                    early[key] = (_E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], "no such partition")
                elif ctx.acl is not None and not ctx.acl.allowed(READ, TOPIC, key[0]):
                    early[key] = (_E[ErrorCode.TOPIC_AUTHORIZATION_FAILED],
                                  f"may not read topic {key[0]!r}")
                else:
                    parts.append(list(key))
        rows = {}
        if parts:
            head, _ = self.broker.describe_producers(
                _req(Api.DESCRIBE_PRODUCERS, ctx, {"parts": parts}))
            rows = {(r.topic, r.partition): r for r in head["parts"]}
        topics = []
        for t in body["topics"]:
            out = []
            for p in t["partition_indexes"]:
                key = (t["name"], p)
                r = rows.get(key)
                if r is None:
                    code, msg = early[key]
                    out.append({"partition_index": p, "error_code": code, "error_message": msg,
                                "active_producers": []})
                    continue
                out.append({"partition_index": p, "error_code": to_kafka(r.error),
                            "error_message": r.message or None,
                            "active_producers": [{
                                "producer_id": q.producer_id, "producer_epoch": q.producer_epoch,
                                "last_sequence": q.last_sequence,
                                "last_timestamp": q.last_timestamp,
                                "coordinator_epoch": q.coordinator_epoch,
                                "current_txn_start_offset": q.current_txn_start_offset}
                                for q in r.producers]})
            topics.append({"name": t["name"], "partitions": out})
        return {"throttle_time_ms": 0, "topics": topics}

    async def describe_transactions(self, v: int, body: dict, ctx: Context) -> dict:
        """Each id as this node coordinates it (NOT_COORDINATOR for another node's,
        TRANSACTIONAL_ID_NOT_FOUND for an unknown one)."""
        tids = list(body["transactional_ids"] or ())
        try:
            fields = _req(Api.DESCRIBE_TRANSACTIONS, ctx, {"transactional_ids": tids}).fields
            head = self._txn().describe_transactions(fields)
        except ApiError as e:
            return {"throttle_time_ms": 0,
                    "transaction_states": [_failed(t, _E[e.code]) for t in tids]}
        if ctx.acl is not None:
            head = ctx.acl.filter_response(Api.DESCRIBE_TRANSACTIONS, head)
        states = []
        for r in head["transactions"]:
            if r.error:
                states.append(_failed(r.transactional_id, to_kafka(r.error)))
                continue
            by_topic: dict = {}
            for topic, p in r.partitions:
                by_topic.setdefault(topic, []).append(p)
            states.append({"error_code": 0, "transactional_id": r.transactional_id,
                           "transaction_state": r.state, "transaction_timeout_ms": r.timeout_ms,
                           "transaction_start_time_ms": r.start_ms,
                           "producer_id": r.producer_id, "producer_epoch": r.producer_epoch,
                           "topics": [{"topic": t, "partitions": sorted(ps)}
                                      for t, ps in sorted(by_topic.items())]})
        return {"throttle_time_ms": 0, "transaction_states": states}

    async def list_transactions(self, v: int, body: dict, ctx: Context) -> dict:
        """The transactions of the ``__transaction_state`` partitions this node leads
        (a client asks every broker), filtered by state, producer id and (v1) how long
        they have been open."""
        fields = {"states": list(body["state_filters"] or ()),
                  "producer_ids": list(body["producer_id_filters"] or ()),
                  "duration_ms": body.get("duration_filter", -1) if v >= 1 else -1}
        try:
            head = self._txn().list_transactions(_req(Api.LIST_TRANSACTIONS, ctx, fields).fields)
            if ctx.acl is not None:
                head = ctx.acl.filter_response(Api.LIST_TRANSACTIONS, head)
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": _E[e.code],
                    "unknown_state_filters": [], "transaction_states": []}
        return {"throttle_time_ms": 0, "error_code": 0,
                "unknown_state_filters": head["unknown_states"],
                "transaction_states": [{"transactional_id": r.transactional_id,
                                        "producer_id": r.producer_id,
                                        "transaction_state": r.state}
                                       for r in head["transactions"]]}


def _failed(tid: str, code: int) -> dict:
    return {"error_code": code, "transactional_id": tid, "transaction_state": "",
            "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
            "producer_epoch": -1, "topics": []}
