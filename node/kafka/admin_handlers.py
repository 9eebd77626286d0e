"""Kafka admin API handlers (issue 37): Kafka request bodies in, Kafka response bodies
out, each by the native handler of the same API (node/broker.py, node/security.py,
node/group_handlers.py) through its native route's ACL check (node/routes.py,
``handlers._req``), as node/kafka/handlers.py does for the rest.

Per-resource refusals are answered per resource with Kafka's error code
(raftlog.kafka.errors); nothing here decides what the native path does not.
"""

from __future__ import annotations

import os
import time

from raftlog import acl as A
from raftlog import scram as S
from raftlog.errors import ApiError, ErrorCode
from raftlog.kafka import acl as KA
from raftlog.kafka.errors import to_kafka
from raftlog.protocol import Api

from ..authz import ALTER, CLUSTER, CLUSTER_NAME, DESCRIBE, GROUP, READ, TOPIC
from ..authz import DELETE as DELETE_OP
from .handlers import Context, _authorize, _req

_E = {c: to_kafka(c) for c in ErrorCode}
#: Kafka's name of the metadata log (DescribeQuorum's only topic-partition: -0)
METADATA_TOPIC = "__cluster_metadata"
#: How long a node waits for the controller's view of the quorum
QUORUM_CALL_TIMEOUT_S = 5.0
#: Most partitions one DescribeTopicPartitions answer holds (Kafka's
#: max.request.partition.size.limit default)
DESCRIBE_TOPIC_PARTITIONS_MAX = 2000
#: Kafka's codes with no raftlog twin (ElectLeaders)
PREFERRED_LEADER_NOT_AVAILABLE, ELECTION_NOT_NEEDED, LOG_DIR_NOT_FOUND = 80, 84, 57
#: Kafka's config resource types
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
#: IncrementalAlterConfigs' ConfigOperation codes (Kafka's AlterConfigOp.OpType)
CONFIG_OPS = {0: "set", 1: "delete", 2: "append", 3: "subtract"}
#: Kafka's ScramMechanism codes
SCRAM_MECHANISMS = {1: S.SCRAM_SHA_256, 2: S.SCRAM_SHA_512}
_SCRAM_CODES = {name: code for code, name in SCRAM_MECHANISMS.items()}


def _error_row(e: ApiError) -> tuple[int, str]:
    return _E[e.code], e.message


def manual_assignments(topic: dict) -> list | None:
    """The replica lists of a CreateTopics topic's manual ``assignments`` in partition
    order (None: none given). Kafka's rules: num_partitions and replication_factor
    must then be -1 (INVALID_REQUEST), the partition indexes 0..n-1
    (INVALID_REPLICA_ASSIGNMENT); the brokers are checked when it is created."""
    rows = topic["assignments"]
    if not rows:
        return None
    if topic["num_partitions"] != -1 or topic["replication_factor"] != -1:
        raise ApiError(ErrorCode.INVALID_REQUEST, "give either assignments or num_partitions "
                       "and replication_factor, not both (-1 when assigning)")
    rows = sorted(rows, key=lambda a: a["partition_index"])
    if [a["partition_index"] for a in rows] != list(range(len(rows))):
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"partitions {[a['partition_index'] for a in rows]} must be "
                       f"0..{len(rows) - 1}, each once")
    return [list(a["broker_ids"]) for a in rows]


class KafkaAdminApis:
    """The admin half of the Kafka listener's API table (merged into KafkaApis')."""

    def __init__(self, apis):
        self.apis = apis
        self.broker = apis.broker
        self.replicas = apis.replicas
        self.config = apis.config

    def handlers(self) -> dict:
        """{Kafka api key: handler} of the APIs served here."""
        return {37: self.create_partitions, 33: self.alter_configs,
                44: self.incremental_alter_configs, 42: self.delete_groups,
                47: self.offset_delete, 29: self.describe_acls, 30: self.create_acls,
                31: self.delete_acls, 21: self.delete_records,
                50: self.describe_user_scram_credentials,
                51: self.alter_user_scram_credentials,
                35: self.describe_log_dirs, 34: self.alter_replica_log_dirs,
                43: self.elect_leaders,
                45: self.alter_partition_reassignments,
                46: self.list_partition_reassignments, 74: self.list_config_resources,
                75: self.describe_topic_partitions, 55: self.describe_quorum}

    async def _quorum(self, method, req):
        return await self.apis._quorum(method, req)

    # ------------------------------------------------------------------ topics

    async def create_partitions(self, v: int, body: dict, ctx: Context) -> dict:
        """Each topic grown in turn; a refusal is that topic's: UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_PARTITIONS (not larger), INVALID_REPLICA_ASSIGNMENT, or
        TOPIC_AUTHORIZATION_FAILED (ALTER on the topic)."""
        results, seen = [], set()
        for t in body["topics"]:
            name = t["name"]
            try:
                if name in seen:
                    raise ApiError(ErrorCode.INVALID_REQUEST, f"topic {name!r} named twice")
                seen.add(name)
                assignments = (None if t["assignments"] is None
                               else [list(a["broker_ids"]) for a in t["assignments"]])
                req = _req(Api.CREATE_PARTITIONS, ctx, {
                    "topic": name, "count": t["count"], "assignments": assignments,
                    "timeout_ms": max(body["timeout_ms"], 0),
                    "validate_only": body["validate_only"]})
                await self._quorum(self.broker.create_partitions, req)
                code, msg = 0, None
            except ApiError as e:
                code, msg = _error_row(e)
            results.append({"name": name, "error_code": code, "error_message": msg})
        return {"throttle_time_ms": 0, "results": results}

    async def delete_records(self, v: int, body: dict, ctx: Context) -> dict:
        """Each partition's log start offset moved by its leader (this node: the client
        found it): NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE (past the high
        watermark), UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED (DELETE on
        the topic) per partition."""
        parts, codes = [], {}
        for t in body["topics"]:
            for p in t["partitions"]:
                key = (t["name"], p["partition_index"])
                if key[1] < 0:
                    codes[key] = _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
                elif ctx.acl is not None and not ctx.acl.allowed(DELETE_OP, TOPIC, key[0]):
                    codes[key] = _E[ErrorCode.TOPIC_AUTHORIZATION_FAILED]
                else:
                    parts.append([key[0], key[1], p["offset"]])
        lows: dict = {}
        if parts:
            head, _ = self.broker.delete_records(_req(Api.DELETE_RECORDS, ctx, {
                "parts": parts, "throttle": 0, "timeout_ms": max(body["timeout_ms"], 0)}))
            for r in head["parts"]:
                codes[(r.topic, r.partition)] = to_kafka(r.error)
                lows[(r.topic, r.partition)] = r.low_watermark
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"],
                 "low_watermark": lows.get((t["name"], p["partition_index"]), -1),
                 "error_code": codes[(t["name"], p["partition_index"])]}
                for p in t["partitions"]]} for t in body["topics"]]}

    # ------------------------------------------------------------------ operating

    async def describe_log_dirs(self, v: int, body: dict, ctx: Context) -> dict:
        """This node's one log dir (its data directory) with the replicas it hosts
        (all, or those of ``topics``; a partition list narrows within a topic);
        CLUSTER_AUTHORIZATION_FAILED (DESCRIBE on the cluster) as a top-level code."""
        wanted = body["topics"]
        try:
            head, _ = self.broker.describe_log_dirs(_req(Api.DESCRIBE_LOG_DIRS, ctx, {
                "topics": None if wanted is None else [t["topic"] for t in wanted]}))
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": _E[e.code], "results": []}
        only = (None if wanted is None
                else {t["topic"]: set(t["partitions"]) for t in wanted})
        topics: dict = {}
        for r in head["partitions"]:
            if only is not None and only.get(r.topic) and r.partition not in only[r.topic]:
                continue
            lag = 0 if r.leader == self.config.node_id else max(
                r.high_watermark - r.log_end_offset, 0)
            topics.setdefault(r.topic, []).append({
                "partition_index": r.partition, "partition_size": r.size_bytes,
                "offset_lag": lag, "is_future_key": False})
        return {"throttle_time_ms": 0, "error_code": 0, "results": [{
            "error_code": 0, "log_dir": head["log_dir"],
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())],
            "total_bytes": head["total_bytes"], "usable_bytes": head["usable_bytes"]}]}

    async def describe_quorum(self, v: int, body: dict, ctx: Context) -> dict:
        """DescribeQuorum of ``__cluster_metadata``-0, Kafka's name for the metadata log
        (raftlog's is pysyncobj's Raft log, not a partition): the active controller's
        view -- a node that is not the controller asks it (a peer call) and answers its
        own view if that fails (the other voters' log ends -1). Terms are the leader
        epochs, the commit index the high watermark; broker-only nodes (learners) are
        not listed as observers; ``nodes`` (v2) gives each voter's Raft address. CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the
        cluster, UNKNOWN_TOPIC_OR_PARTITION for another topic or partition."""
        try:
            head, _ = self.broker.describe_quorum(_req(Api.DESCRIBE_QUORUM, ctx, {}))
        except ApiError as e:
            return {"error_code": _E[e.code], "error_message": e.message, "topics": [],
                    "nodes": []}
        txn = self.broker.txn
        if not head["is_leader"] and head["leader_id"] >= 0 and txn is not None:
            try:
                head = await txn.peers.call(head["leader_id"], Api.DESCRIBE_QUORUM, {},
                                            QUORUM_CALL_TIMEOUT_S)
            except ApiError:
                pass  # (this voter's own view)
        now_ms = int(time.time() * 1000)
        voters = [{"replica_id": nid, "replica_directory_id": bytes(16), "log_end_offset": end,
                   "last_fetch_timestamp": now_ms - ago if ago >= 0 else -1,
                   "last_caught_up_timestamp": now_ms - up if up >= 0 else -1}
                  for nid, end, ago, up in head["voters"]]
        topics = []
        for t in body["topics"]:
            rows = []
            for p in t["partitions"]:
                known = t["topic_name"] == METADATA_TOPIC and p["partition_index"] == 0
                code = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if not known
                        else ErrorCode.NOT_LEADER_OR_FOLLOWER if head["leader_id"] < 0
                        else ErrorCode.NONE)
                rows.append({"partition_index": p["partition_index"], "error_code": _E[code],
                             "error_message": None if code is ErrorCode.NONE else (
                                 "no controller now" if known else
                                 f"only {METADATA_TOPIC}-0 has a quorum"),
                             "leader_id": head["leader_id"] if known else -1,
                             "leader_epoch": head["leader_epoch"] if known else -1,
                             "high_watermark": head["high_watermark"] if known else -1,
                             "current_voters": voters if known else [], "observers": []})
            topics.append({"topic_name": t["topic_name"], "partitions": rows})
        nodes = [{"node_id": nid, "listeners": [{"name": "RAFT", "host": h, "port": port}]}
                 for nid, (h, port) in sorted(self.config.metadata_voters.items())]
        return {"error_code": 0, "error_message": None, "topics": topics, "nodes": nodes}

    async def describe_topic_partitions(self, v: int, body: dict, ctx: Context) -> dict:
        """Metadata's topic rows (never auto-creating), topics in name order, paged as
        Kafka pages them: from ``cursor`` at most ``response_partition_limit`` partitions
        (capped at DESCRIBE_TOPIC_PARTITIONS_MAX), ``next_cursor`` where the next page
        starts. No topics named: every topic the principal may describe."""
        names = sorted({t["name"] for t in body["topics"]}) or None
        meta = await self.apis.metadata(12, {
            "topics": None if names is None else [{"name": n} for n in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True}, ctx)
        rows = sorted(meta["topics"], key=lambda t: t["name"])
        cursor = body["cursor"]
        if cursor is not None:
            rows = [t for t in rows if t["name"] >= cursor["topic_name"]]
        budget = max(min(body["response_partition_limit"], DESCRIBE_TOPIC_PARTITIONS_MAX), 1)
        out, next_cursor = [], None
        for t in rows:
            parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
            if cursor is not None and t["name"] == cursor["topic_name"]:
                parts = [p for p in parts if p["partition_index"] >= cursor["partition_index"]]
            if budget <= 0 and (parts or not out):
                next_cursor = {"topic_name": t["name"],
                               "partition_index": parts[0]["partition_index"] if parts else 0}
                break
            taken, rest = parts[:budget], parts[budget:]
            budget -= len(taken)
            out.append({**t, "partitions": [{**p, "eligible_leader_replicas": None,
                                             "last_known_elr": None} for p in taken]})
            if rest:
                next_cursor = {"topic_name": t["name"],
                               "partition_index": rest[0]["partition_index"]}
                break
        return {"throttle_time_ms": 0, "topics": out, "next_cursor": next_cursor}

    async def list_config_resources(self, v: int, body: dict, ctx: Context) -> dict:
        """The resources with configs: topics (those the principal may describe) and
        brokers. v0 asks for client-metrics resources only, which raftlog has none of;
        v1 for the types listed (none listed: every type). CLUSTER_AUTHORIZATION_FAILED
        without DESCRIBE on the cluster."""
        if ctx.acl is not None and not ctx.acl.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
            return {"throttle_time_ms": 0, "config_resources": [],
                    "error_code": _E[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]}
        types = set(body["resource_types"] or (RESOURCE_TOPIC, RESOURCE_BROKER)) if v else ()
        rows = []
        if RESOURCE_TOPIC in types:
            rows += [{"resource_name": t, "resource_type": RESOURCE_TOPIC}
                     for t in sorted(self.broker.store.topics)
                     if ctx.acl is None or ctx.acl.allowed(DESCRIBE, TOPIC, t)]
        if RESOURCE_BROKER in types:
            rows += [{"resource_name": str(b["node_id"]), "resource_type": RESOURCE_BROKER}
                     for b in self.apis._known_brokers()]
        return {"throttle_time_ms": 0, "error_code": 0, "config_resources": rows}

    async def alter_replica_log_dirs(self, v: int, body: dict, ctx: Context) -> dict:
        """A node has one log dir (its data directory): moving a replica to it is a
        no-op (NONE, also for a replica the node does not host yet, as Kafka), any
        other path LOG_DIR_NOT_FOUND; CLUSTER_AUTHORIZATION_FAILED without ALTER on
        the cluster; UNKNOWN_TOPIC_OR_PARTITION."""
        here = os.path.abspath(self.config.data_dir)
        allowed = ctx.acl is None or ctx.acl.allowed(ALTER, CLUSTER, CLUSTER_NAME)
        topics = self.broker.store.topics
        by_topic: dict = {}
        for d in body["dirs"]:
            for t in d["topics"]:
                info = topics.get(t["name"])
                for p in t["partitions"]:
                    if not allowed:
                        code = _E[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
                    elif info is None or not 0 <= p < len(info.partitions):
                        code = _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
                    elif os.path.abspath(d["path"]) != here:
                        code = LOG_DIR_NOT_FOUND
                    else:
                        code = 0
                    by_topic.setdefault(t["name"], []).append(
                        {"partition_index": p, "error_code": code})
        return {"throttle_time_ms": 0, "results": [
            {"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def elect_leaders(self, v: int, body: dict, ctx: Context) -> dict:
        """Preferred-leader elections (election type 0; unclean ones, type 1, are not
        offered: INVALID_REQUEST). Per partition as Kafka: ELECTION_NOT_NEEDED where the
        preferred replica leads already, PREFERRED_LEADER_NOT_AVAILABLE where it is not
        alive and in the ISR, UNKNOWN_TOPIC_OR_PARTITION."""
        wanted = body["topic_partitions"]
        parts = (None if wanted is None
                 else [(t["topic"], p) for t in wanted for p in t["partitions"]])
        try:
            _authorize(Api.ELECT_LEADERS, ctx, {"parts": parts})
            if v >= 1 and body["election_type"] != 0:
                raise ApiError(ErrorCode.INVALID_REQUEST,
                               "only preferred-leader elections (type 0) are offered")
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": _E[e.code],
                    "replica_election_results": []}
        rows: dict = {}
        ask = []
        topics = self.broker.store.topics
        for t, p in parts if parts is not None else []:
            info = topics.get(t)
            part = (info.partitions[p] if info is not None and 0 <= p < len(info.partitions)
                    else None)
            if part is not None and part.leader == part.replicas[0]:
                rows[(t, p)] = (ELECTION_NOT_NEEDED, "already led by its preferred replica")
            elif part is not None and part.replicas[0] not in part.isr:
                rows[(t, p)] = (PREFERRED_LEADER_NOT_AVAILABLE,
                                f"preferred replica {part.replicas[0]} is not in the ISR")
            else:
                ask.append((t, p))
        if ask or parts is None:
            head, _ = await self._quorum(self.broker.elect_leaders, _req(
                Api.ELECT_LEADERS, ctx, {"parts": ask if parts is not None else None}))
            for r in head["results"]:
                rows[(r.topic, r.partition)] = (to_kafka(r.error), r.message or None)
        by_topic: dict = {}
        for (t, p), (code, msg) in rows.items():
            by_topic.setdefault(t, []).append(
                {"partition_id": p, "error_code": code, "error_message": msg})
        return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
            {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}

    async def alter_partition_reassignments(self, v: int, body: dict, ctx: Context) -> dict:
        """Start (replicas given) or cancel (null replicas) each partition's move."""
        parts = [[t["name"], p["partition_index"],
                  [] if p["replicas"] is None else list(p["replicas"])]
                 for t in body["topics"] for p in t["partitions"]]
        try:
            head, _ = await self._quorum(self.broker.alter_partition_reassignments, _req(
                Api.ALTER_PARTITION_REASSIGNMENTS, ctx, {
                    "parts": parts, "throttle": 0, "timeout_ms": max(body["timeout_ms"], 0)}))
        except ApiError as e:
            code, msg = _error_row(e)
            return {"throttle_time_ms": 0, "error_code": code, "error_message": msg,
                    "responses": []}
        by_topic: dict = {}
        for r in head["results"]:
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "error_code": to_kafka(r.error),
                "error_message": r.message or None})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def list_partition_reassignments(self, v: int, body: dict, ctx: Context) -> dict:
        wanted = body["topics"]
        parts = (None if wanted is None
                 else [(t["name"], p) for t in wanted for p in t["partition_indexes"]])
        try:
            head, _ = self.broker.list_partition_reassignments(_req(
                Api.LIST_PARTITION_REASSIGNMENTS, ctx, {"parts": parts}))
        except ApiError as e:
            code, msg = _error_row(e)
            return {"throttle_time_ms": 0, "error_code": code, "error_message": msg,
                    "topics": []}
        by_topic: dict = {}
        for r in head["reassignments"]:
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "replicas": list(r.replicas),
                "adding_replicas": list(r.adding), "removing_replicas": list(r.removing)})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    # ------------------------------------------------------------------ configs

    async def alter_configs(self, v: int, body: dict, ctx: Context) -> dict:
        """Kafka's AlterConfigs: each topic's configs become exactly those given (keys
        left out return to their defaults)."""
        return await self._alter(body, ctx, lambda res: {
            "config": {c["name"]: c["value"] for c in res["configs"]}, "replace": True})

    async def incremental_alter_configs(self, v: int, body: dict, ctx: Context) -> dict:
        """SET, DELETE, APPEND and SUBTRACT (list configs: cleanup.policy) per key."""
        def fields(res):
            ops = []
            for c in res["configs"]:
                op = CONFIG_OPS.get(c["config_operation"])
                if op is None:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   f"config operation {c['config_operation']} is unknown")
                ops.append([c["name"], op, c["value"]])
            return {"config": {}, "ops": ops}
        return await self._alter(body, ctx, fields)

    async def _alter(self, body: dict, ctx: Context, fields_of) -> dict:
        out = []
        for res in body["resources"]:
            name, rtype = res["resource_name"], res["resource_type"]
            try:
                if rtype == RESOURCE_BROKER:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   "broker configs are read-only: they come from each node's "
                                   "server.properties (restart the node to change them)")
                if rtype != RESOURCE_TOPIC:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   f"resource type {rtype} has no configs here; use TOPIC (2)")
                req = _req(Api.ALTER_CONFIGS, ctx, {
                    "topic": name, **fields_of(res), "validate_only": body["validate_only"]})
                await self._quorum(self.broker.alter_configs, req)
                code, msg = 0, None
            except ApiError as e:
                code, msg = _error_row(e)
            out.append({"error_code": code, "error_message": msg, "resource_type": rtype,
                        "resource_name": name})
        return {"throttle_time_ms": 0, "responses": out}

    # ------------------------------------------------------------------ groups

    async def delete_groups(self, v: int, body: dict, ctx: Context) -> dict:
        """Each group deleted by its coordinator (this node: the client found it):
        GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR or
        GROUP_AUTHORIZATION_FAILED (DELETE on the group) per group."""
        out = []
        for gid in body["groups_names"]:
            try:
                got = await self.apis._group(Api.DELETE_GROUPS, {"groups": [gid]}, ctx)
                (r,) = got["results"]
                code = to_kafka(r.error)
            except ApiError as e:
                code = _E[e.code]
            out.append({"group_id": gid, "error_code": code})
        return {"throttle_time_ms": 0, "results": out}

    async def offset_delete(self, v: int, body: dict, ctx: Context) -> dict:
        """The group's committed offsets of the named partitions deleted (Kafka's
        rules): GROUP_ID_NOT_FOUND / GROUP_AUTHORIZATION_FAILED for the whole request;
        per partition TOPIC_AUTHORIZATION_FAILED (READ on the topic),
        UNKNOWN_TOPIC_OR_PARTITION, GROUP_SUBSCRIBED_TO_TOPIC."""
        gid = body["group_id"]
        codes: dict = {}
        parts = []
        topics = self.broker.store.topics
        for t in body["topics"]:
            info = topics.get(t["name"])
            for p in t["partitions"]:
                key = (t["name"], p["partition_index"])
                if ctx.acl is not None and not ctx.acl.allowed(READ, TOPIC, key[0]):
                    codes[key] = _E[ErrorCode.TOPIC_AUTHORIZATION_FAILED]
                elif info is None or not 0 <= key[1] < len(info.partitions):
                    codes[key] = _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
                else:
                    parts.append(key)
        top = 0
        try:
            if ctx.acl is not None and not ctx.acl.allowed(DELETE_OP, GROUP, gid):
                raise ApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                               f"{ctx.acl.principal} may not delete group {gid!r}")
            got = await self.apis._group(Api.OFFSET_DELETE, {"group": gid, "parts": parts}, ctx)
            codes.update({(r.topic, r.partition): to_kafka(r.error) for r in got["parts"]})
        except ApiError as e:
            top = _E[e.code]
        return {"error_code": top, "throttle_time_ms": 0, "topics": [] if top else [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"],
                 "error_code": codes.get((t["name"], p["partition_index"]), 0)}
                for p in t["partitions"]]} for t in body["topics"]]}

    # ------------------------------------------------------------------ ACLs

    async def describe_acls(self, v: int, body: dict, ctx: Context) -> dict:
        """The bindings matching the filter, grouped by resource (DESCRIBE on the
        cluster; INVALID_REQUEST for an UNKNOWN code)."""
        try:
            _authorize(Api.DESCRIBE_ACLS, ctx, {})
            bindings = self._matching(body, ctx)
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": _E[e.code], "error_message": e.message,
                    "resources": []}
        by_resource: dict = {}
        for b in bindings:
            row = KA.binding_row(b)
            key = (row["resource_type"], row["resource_name"], row["pattern_type"])
            by_resource.setdefault(key, []).append(
                {k: row[k] for k in ("principal", "host", "operation", "permission_type")})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in by_resource.items()]}

    def _matching(self, f: dict, ctx: Context) -> list:
        """The bindings a Kafka ACL filter matches (ApiError INVALID_REQUEST for a bad one)."""
        try:
            fields, match = KA.native_filter(f)
        except KA.NoMatch:
            return []
        except KA.KafkaAclError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        head, _ = self.broker.security.describe_acls(_req(Api.DESCRIBE_ACLS, ctx, fields))
        bindings = [A.from_tuple(t) for t in head["acls"]]
        return [b for b in bindings if match is None or KA.matches_name(b, match)]

    async def create_acls(self, v: int, body: dict, ctx: Context) -> dict:
        """Every valid creation in one metadata write; a creation raftlog cannot hold
        (a host other than '*', an operation or resource type it has no twin for)
        gets INVALID_REQUEST, the others CLUSTER_AUTHORIZATION_FAILED without ALTER
        on the cluster."""
        rows: list = []
        valid = []
        for c in body["creations"]:
            try:
                t = KA.binding_tuple(c)
                A.from_tuple(t)
                valid.append(t)
                rows.append(None)
            except (KA.KafkaAclError, A.AclError) as e:
                rows.append((_E[ErrorCode.INVALID_REQUEST], str(e)))
        ok = (0, None)
        if valid:
            try:
                await self._quorum(self.broker.security.create_acls,
                                   _req(Api.CREATE_ACLS, ctx, {"acls": valid}))
            except ApiError as e:
                ok = _error_row(e)
        return {"throttle_time_ms": 0, "results": [
            {"error_code": (r or ok)[0], "error_message": (r or ok)[1]} for r in rows]}

    async def delete_acls(self, v: int, body: dict, ctx: Context) -> dict:
        """Per filter, the bindings it matched, deleted (ALTER on the cluster)."""
        out = []
        for f in body["filters"]:
            try:
                _authorize(Api.DELETE_ACLS, ctx, {})
                gone = []
                for b in self._matching(f, ctx):
                    fields = dict(zip(("principal", "resource_type", "resource_name",
                                       "pattern_type", "operation", "permission"),
                                      b.as_tuple()))
                    head, _ = await self._quorum(self.broker.security.delete_acls,
                                                 _req(Api.DELETE_ACLS, ctx, fields))
                    gone += [A.from_tuple(t) for t in head["deleted"]]
                out.append({"error_code": 0, "error_message": None, "matching_acls": [
                    {"error_code": 0, "error_message": None, **KA.binding_row(b)}
                    for b in gone]})
            except ApiError as e:
                code, msg = _error_row(e)
                out.append({"error_code": code, "error_message": msg, "matching_acls": []})
        return {"throttle_time_ms": 0, "filter_results": out}

    # ------------------------------------------------------------------ SCRAM users

    async def describe_user_scram_credentials(self, v: int, body: dict, ctx: Context) -> dict:
        """Each user's mechanisms and iteration counts (never a salt or key): every
        user, or those named (RESOURCE_NOT_FOUND: none; DUPLICATE_RESOURCE: named
        twice); CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster."""
        names = None if body["users"] is None else [u["name"] for u in body["users"]]
        try:
            head, _ = self.broker.security.describe_users(_req(
                Api.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx,
                {"users": None if names is None else sorted(set(names))}))
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": _E[e.code], "error_message": e.message,
                    "results": []}
        found = {u: mechs for u, mechs in head["users"]}
        results = []
        for user in (sorted(found) if names is None else list(dict.fromkeys(names))):
            code, msg, infos = 0, None, []
            if names is not None and names.count(user) > 1:
                code, msg = _E[ErrorCode.DUPLICATE_RESOURCE], f"user {user!r} named twice"
            elif user not in found:
                code, msg = (_E[ErrorCode.RESOURCE_NOT_FOUND],
                             f"user {user!r} has no SCRAM credentials")
            else:
                infos = [{"mechanism": _SCRAM_CODES.get(m, 0), "iterations": i}
                         for m, i in found[user]]
            results.append({"user": user, "error_code": code, "error_message": msg,
                            "credential_infos": infos})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "results": results}

    async def alter_user_scram_credentials(self, v: int, body: dict, ctx: Context) -> dict:
        """Upsertions (salted passwords: the stored keys are derived here) and deletions,
        one result per user: UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL (an
        empty name, iterations out of range), RESOURCE_NOT_FOUND (deleting what is not
        there), DUPLICATE_RESOURCE (a user's mechanism altered twice),
        CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster."""
        ops: dict = {}  # user -> ([upsertions], [deletions])
        bad: dict = {}
        seen = set()
        for kind, rows in (("upsert", body["upsertions"]), ("delete", body["deletions"])):
            for r in rows:
                user = r["name"]
                ops.setdefault(user, ([], []))
                try:
                    mech = SCRAM_MECHANISMS.get(r["mechanism"])
                    if mech is None:
                        raise ApiError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                       f"SCRAM mechanism code {r['mechanism']} is unknown "
                                       "(1: SCRAM-SHA-256, 2: SCRAM-SHA-512)")
                    if not user:
                        raise ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty user name")
                    if (user, mech) in seen:
                        raise ApiError(ErrorCode.DUPLICATE_RESOURCE,
                                       f"user {user!r}'s {mech} credential altered twice")
                    seen.add((user, mech))
                    if kind == "delete":
                        ops[user][1].append([user, mech])
                        continue
                    try:
                        S.check_iterations(r["iterations"])
                    except S.ScramError as e:
                        raise ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(e)) from None
                    c = S.credential_from_salted(mech, r["salt"], r["iterations"],
                                                 r["salted_password"])
                    ops[user][0].append([user, mech, c.salt, c.iterations, c.stored_key,
                                         c.server_key])
                except ApiError as e:
                    bad.setdefault(user, _error_row(e))
        results = []
        for user, (ups, dels) in ops.items():
            code, msg = bad.get(user, (0, None))
            if not code:
                try:
                    head, _ = await self._quorum(
                        self.broker.security.alter_users,
                        _req(Api.ALTER_USER_SCRAM_CREDENTIALS, ctx,
                             {"upsertions": ups, "deletions": dels, "timeout_ms": 30_000}))
                    failed = next((r for r in head["results"] if r.error), None)
                    if failed is not None:
                        code, msg = to_kafka(failed.error), failed.message
                except ApiError as e:
                    code, msg = _error_row(e)
            results.append({"user": user, "error_code": code, "error_message": msg})
        return {"throttle_time_ms": 0, "results": results}
