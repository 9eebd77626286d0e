"""Kafka transaction API handlers (issue #33): AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
and TxnOffsetCommit on the Kafka listener, each by the node's transaction coordinator
(node/txn_host.py) or group coordinator (node/coordinator.py) as the native requests
are, so raftlog's SDK and Kafka clients share one transaction state machine.

Kafka's clients here run transaction version 1 (EndTxn v0-v4: kafka-python,
librdkafka, aiokafka keep their producer epoch across transactions): every request is
handed to the coordinator with ``transaction_version`` 1, and its EndTxn bumps no
epoch (node/transactions.py).

ACLs: each request is checked by its native route (node/routes.py), as on the native
listener: WRITE on the transactional id first (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
53), then Kafka's topic and group checks (WRITE on each topic added, READ on the group
of AddOffsetsToTxn and TxnOffsetCommit, READ on the committed topics).
"""

from __future__ import annotations

from raftlog.acl import CLUSTER_NAME
from raftlog.errors import ApiError, ErrorCode
from raftlog.kafka.errors import to_kafka
from raftlog.protocol import Api

from ..authz import CLUSTER, CLUSTER_ACTION, TOPIC, WRITE
from .handlers import Context, _authorize, commit_answer, commit_offsets

_E = {c: to_kafka(c) for c in ErrorCode}
#: Kafka's OPERATION_NOT_ATTEMPTED: the other partitions of an AddPartitionsToTxn of
#: which some partition was refused
OPERATION_NOT_ATTEMPTED = 55
#: the transaction version of Kafka's clients on this listener (EndTxn v0-v4)
KAFKA_TRANSACTION_VERSION = 1


def kafka_code(code: ErrorCode, version: int, fenced_since: int) -> int:
    """Kafka's error code of ``code`` for a request of ``version``: PRODUCER_FENCED is
    new in ``fenced_since``; older clients get INVALID_PRODUCER_EPOCH, as Kafka's
    broker answers them."""
    if code is ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return _E[ErrorCode.INVALID_PRODUCER_EPOCH]
    return _E[code]


def txn_host(broker):
    """The node's transaction coordinator host, or COORDINATOR_NOT_AVAILABLE."""
    if broker.txn is None:
        raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
    return broker.txn


class KafkaTxnApis:
    """The transaction half of the Kafka listener's API table (merged into KafkaApis')."""

    def __init__(self, apis):
        self.broker = apis.broker

    def handlers(self) -> dict:
        """{Kafka api key: handler} of the APIs served here."""
        return {24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn,
                26: self.end_txn, 28: self.txn_offset_commit}

    # ------------------------------------------------------------------ AddPartitionsToTxn

    async def add_partitions_to_txn(self, v: int, body: dict, ctx: Context) -> dict:
        """v0-v3: one transaction (a client's); v4: a batch of transactions, maybe
        ``verify_only`` (KIP-890), which Kafka keeps for brokers (CLUSTER_ACTION)."""
        if v < 4:
            topics = await self._add_one(v, body["v3_and_below_transactional_id"],
                                         body["v3_and_below_producer_id"],
                                         body["v3_and_below_producer_epoch"],
                                         body["v3_and_below_topics"], False, ctx)
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": topics}
        if ctx.acl is not None and not ctx.acl.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            return {"throttle_time_ms": 0, "results_by_transaction": [],
                    "error_code": _E[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]}
        rows = []
        for t in body["transactions"]:
            rows.append({"transactional_id": t["transactional_id"], "topic_results":
                         await self._add_one(v, t["transactional_id"], t["producer_id"],
                                             t["producer_epoch"], t["topics"],
                                             t["verify_only"], ctx)})
        return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": rows}

    async def _add_one(self, v: int, tid: str, pid: int, epoch: int, topics: list,
                       verify_only: bool, ctx: Context) -> list:
        """One transaction's partitions added (or verified): its per-topic rows. A
        client's (v0-v3) without WRITE on the transactional id: every partition is
        refused (53); a partition the principal may not write, or that does not exist,
        is refused and the others are not attempted (Kafka's rule): nothing is added
        then. v4 is the brokers' (CLUSTER_ACTION, checked by the caller), as Kafka."""
        tps = list(dict.fromkeys((t["name"], p) for t in topics for p in t["partitions"]))
        codes: dict = {}
        try:
            denied: set = set()
            try:
                if v < 4:
                    _authorize(Api.ADD_PARTITIONS_TO_TXN, ctx,
                               {"transactional_id": tid, "parts": tps, "verify_only": False})
            except ApiError as e:
                if e.code is not ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise
                denied = {tp for tp in tps if not ctx.acl.allowed(WRITE, TOPIC, tp[0])}
            host = txn_host(self.broker)
            unknown = {tp for tp in tps if tp not in denied and not _exists(host, *tp)}
            if denied or unknown:
                for tp in tps:
                    codes[tp] = (_E[ErrorCode.TOPIC_AUTHORIZATION_FAILED] if tp in denied
                                 else _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] if tp in unknown
                                 else OPERATION_NOT_ATTEMPTED)
            elif tps:
                got = await host.add_partitions({
                    "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                    "parts": tps, "verify_only": verify_only,
                    "transaction_version": KAFKA_TRANSACTION_VERSION})
                codes = {(r.topic, r.partition): to_kafka(r.error) for r in got["parts"]}
        except ApiError as e:
            codes = {tp: kafka_code(e.code, v, 2) for tp in tps}
        by_topic: dict = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append({"partition_index": p,
                                               "partition_error_code": codes.get((t, p), 0)})
        return [{"name": t, "results_by_partition": rows} for t, rows in by_topic.items()]

    # ------------------------------------------------------------------ AddOffsetsToTxn, EndTxn

    async def add_offsets_to_txn(self, v: int, body: dict, ctx: Context) -> dict:
        return await self._txn_call(v, ctx, Api.ADD_OFFSETS_TO_TXN, body, "add_offsets",
                                    group=body["group_id"])

    async def end_txn(self, v: int, body: dict, ctx: Context) -> dict:
        return await self._txn_call(v, ctx, Api.END_TXN, body, "end_txn",
                                    commit=body["committed"])

    async def _txn_call(self, v: int, ctx: Context, api: Api, body: dict, method: str,
                        **extra) -> dict:
        """AddOffsetsToTxn / EndTxn: the producer's ids and ``extra`` to the TxnHost
        ``method``, authorized as the native ``api``; the answer is its error code."""
        fields = {"transactional_id": body["transactional_id"],
                  "producer_id": body["producer_id"], "producer_epoch": body["producer_epoch"],
                  "transaction_version": KAFKA_TRANSACTION_VERSION, **extra}
        try:
            _authorize(api, ctx, fields)
            await getattr(txn_host(self.broker), method)(fields)
            code = 0
        except ApiError as e:
            code = kafka_code(e.code, v, 2)
        return {"throttle_time_ms": 0, "error_code": code}

    # ------------------------------------------------------------------ TxnOffsetCommit

    async def txn_offset_commit(self, v: int, body: dict, ctx: Context) -> dict:
        """At the group's coordinator: the offsets are appended as the producer's
        transactional batch and become the group's committed offsets at its commit."""
        offsets, bad = commit_offsets(body)
        fields = {"transactional_id": body["transactional_id"], "group": body["group_id"],
                  "producer_id": body["producer_id"], "producer_epoch": body["producer_epoch"],
                  "generation": body.get("generation_id", -1),
                  "member_id": body.get("member_id", ""),
                  "group_instance_id": body.get("group_instance_id"), "offsets": offsets}
        codes: dict = {}
        whole = None
        try:
            _authorize(Api.TXN_OFFSET_COMMIT, ctx, fields)
            if offsets:
                if self.broker.groups is None:
                    raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
                got = await self.broker.groups.txn_offset_commit(fields)
                codes = {(r.topic, r.partition): to_kafka(r.error) for r in got["parts"]}
        except ApiError as e:
            whole = kafka_code(e.code, v, 3)
        return commit_answer(body, bad, whole, codes)


def _exists(host, topic: str, partition: int) -> bool:
    info = host.store.topics.get(topic)
    return info is not None and 0 <= partition < len(info.partitions)
