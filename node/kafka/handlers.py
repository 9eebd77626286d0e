"""Kafka API handlers: Kafka request bodies in, Kafka response bodies out, by calling the
node's own handlers (broker.py, replica_manager.py, group_handlers.py) with native requests.

Nothing here decides anything the native path decides: a Kafka request is translated
into the native request of the same API (``raftlog.protocol.Request`` with its
``fields``), handed to the same method the native server calls, and its raftlog-shaped
answer is translated back -- error codes through raftlog.kafka.errors, record batches
through raftlog.kafka.batch (once per batch). So a group may mix raftlog and Kafka
clients, and idempotent-producer sequence checks, min.insync.replicas, acks=all and
long-poll fetches behave the same on both listeners.

Each handler is ``async (version, body, ctx) -> response body dict`` (None: no
response, Produce with acks=0). Per-item errors go in the response; an ApiError of a
whole request becomes the API's top-level error where it has one, else every item's.

Produce and Fetch are also split in two synchronous halves, so the listener parks a
waiting one in the node's purgatory as the native server does (node/purgatory.py: woken
in the turn that moves its partition, no task per request): ``*_begin`` answers now or
returns a :class:`Wait`, and ``*_check(wait, expired)`` answers once it can.
"""

from __future__ import annotations

import uuid

import trio

from raftlog.acl import CLUSTER_NAME
from raftlog.errors import ApiError, CorruptRecordError, ErrorCode
from raftlog.kafka import batch as kafka_batch
from raftlog.kafka import consumer_protocol as cp
from raftlog.kafka.errors import to_kafka
from raftlog.kafka.wire import SUPPORTED, RawPieces
from raftlog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Api, Request

from ..authz import CLUSTER, DESCRIBE, NOT_ASKED, TOPIC, AclCheck, authorized_operations
from ..clock import node_ms
from ..consumer_fetch_session import FINAL_EPOCH
from ..routes import ROUTES
from . import configs as kafka_configs
from .topic_ids import Note, TopicIds

#: Kafka's INVALID_REQUEST etc. by raftlog name, for errors made here.
_E = {c: to_kafka(c) for c in ErrorCode}
#: Fetch size caps when a client sends 0 or a negative limit.
FETCH_MAX_BYTES_MAX = 64 * 1024 * 1024
#: Partitions of one Kafka fetch read in one event-loop step (~30 us each): a fetch
#: naming more is read in slices with a checkpoint between (KafkaApis.fetch_large).
FETCH_PARTITIONS_PER_STEP = 500
#: Longest a Kafka fetch long-polls, whatever it asks.
FETCH_MAX_WAIT_MS = 30_000
#: A produce with more record bytes than this is converted in a worker thread ...
PRODUCE_INLINE_BYTES_MAX = 256 * 1024
#: ... and so is one with compressed batches past this (gzip expands ~1000x, zstd more).
PRODUCE_INLINE_COMPRESSED_BYTES_MAX = 4 * 1024
#: Produces converted in worker threads at once (each may hold a decompressed batch of
#: up to limits.DECOMPRESSED_BATCH_BYTES_MAX while it is checked).
CONVERT_THREADS_MAX = 2
#: Batches whose headers are looked at to tell: a produce with more is heavy anyway.
PRODUCE_INLINE_BATCHES_MAX = 64
kb_ATTRIBUTES = kafka_batch.ATTRIBUTES_OFFSET
#: Kafka's TOPIC and BROKER config resource types.
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_TOPIC = 5, 1


#: ListOffsets' special timestamps (Kafka's ListOffsetsRequest) -> the first version that
#: may ask for them (Kafka's ReplicaManager.timestampMinSupportedVersion)
EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP = -4, -5, -6
LIST_OFFSETS_SINCE = {LATEST_TIMESTAMP: 1, EARLIEST_TIMESTAMP: 1, MAX_TIMESTAMP: 7,
                      EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
                      EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}
#: asked of the log as EARLIEST_TIMESTAMP: no tiered storage, so the local log starts
#: where the log does; the tiered ones only check the partition's leadership
_AS_EARLIEST = (EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
                EARLIEST_PENDING_UPLOAD_TIMESTAMP)

#: api key -> (first version with leader hints, topic name key, rows key, partition key,
#: Kafka error codes hinted): KIP-951's NOT_LEADER_OR_FOLLOWER (6), FENCED_LEADER_EPOCH (74)
_HINTED = {0: (10, "name", "partition_responses", "index", (6,)),
           1: (16, "topic", "partitions", "partition_index", (6, 74))}


def _partition_info(info, partition: int):
    """The PartitionInfo of ``partition`` of a TopicInfo (None: no such partition)."""
    if info is None or not 0 <= partition < len(info.partitions):
        return None
    p = info.partitions[partition]
    return p if p.partition == partition else None


def _config_entry(name: str, value, source: int, read_only: bool) -> dict:
    return {"name": name, "value": value, "read_only": read_only,
            "is_default": source == CONFIG_SOURCE_DEFAULT, "config_source": source,
            "is_sensitive": False, "synonyms": [],
            "config_type": kafka_configs.config_type(name), "documentation": None}


class Context:
    """Per-connection facts a handler may need; ``acl``: the connection's principal
    checked against the node's ACLs (None: ACLs off, everything allowed)."""

    __slots__ = ("client_id", "client_host", "correlation_id", "acl", "conn")

    def __init__(self, client_id: str | None, client_host: str, correlation_id: int,
                 acl: AclCheck | None = None, conn=None):
        self.client_id = client_id or ""
        self.client_host = client_host
        self.correlation_id = correlation_id
        self.acl = acl
        #: the connection (its fetch sessions die with it); None in unit tests
        self.conn = conn


def _authorize(api: Api, ctx: Context, fields: dict) -> None:
    """The ACL check of the native route of ``api`` (routes.py) on the native request
    fields: raises the *_AUTHORIZATION_FAILED ApiError before anything is done."""
    if ctx.acl is not None:
        ctx.acl.check_route(api, ROUTES[api].acl, fields)


def _req(api: Api, ctx: Context, fields: dict, body: bytes = b"") -> Request:
    """The native request of a Kafka one, once the ACLs allow it (every handler builds
    its native request here: the Kafka listener's authorization choke point)."""
    _authorize(api, ctx, fields)
    return Request(api, 0, ctx.correlation_id, fields, body)


def _topic_id_bytes(topic_id: str) -> bytes:
    try:
        return uuid.UUID(topic_id).bytes
    except (ValueError, TypeError, AttributeError):
        return bytes(16)


class Wait:
    """A Produce (acks=all) or Fetch that waits for its partitions: what ``*_check``
    needs, the partitions to watch (their high watermark), and its deadline; ``note``:
    the request's topic ids (:meth:`KafkaApis.finish`)."""

    __slots__ = ("kind", "req", "parts", "deadline", "state", "note")

    def __init__(self, kind: str, req: Request, parts: list, deadline: float, state: tuple):
        self.kind, self.req, self.parts, self.deadline, self.state = kind, req, parts, deadline, state
        self.note = None


class KafkaApis:
    """The Kafka listener's API table over one node's broker."""

    def __init__(self, broker, replicas, config, kafka_address):
        #: the native handlers (node/broker.py)
        self.broker = broker
        #: the partitions: produce and fetch (node/replica_manager.py)
        self.replicas = replicas
        self.config = config
        self._convert_limiter = trio.CapacityLimiter(CONVERT_THREADS_MAX)
        #: (node_id, native host, native port) -> (host, port) of that node's Kafka listener
        self.kafka_address = kafka_address
        self.handlers = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.join_group, 12: self.heartbeat, 13: self.leave_group, 14: self.sync_group,
            15: self.describe_groups, 16: self.list_groups, 18: self.api_versions,
            19: self.create_topics, 20: self.delete_topics, 22: self.init_producer_id,
            32: self.describe_configs, 60: self.describe_cluster,
            17: self.sasl_handshake, 36: self.sasl_authenticate,
        }
        from .admin_handlers import KafkaAdminApis  # (they import this module)
        from .txn_admin_handlers import KafkaTxnAdminApis
        from .txn_handlers import KafkaTxnApis

        self.handlers.update(KafkaAdminApis(self).handlers())
        self.handlers.update(KafkaTxnApis(self).handlers())
        self.handlers.update(KafkaTxnAdminApis(self).handlers())
        assert set(self.handlers) == set(SUPPORTED)
        #: topic ids <-> names for Fetch v13+ and Produce v13+ (KIP-516)
        self.topic_ids = TopicIds(lambda: replicas.store.topics)

    @property
    def sessions(self):
        """Consumers' fetch sessions (KIP-227, node/consumer_fetch_session.py): one cache
        for both listeners, held by the ReplicaManager."""
        return self.replicas.consumer_sessions

    # ------------------------------------------------------------------ the edge

    def start(self, api_key: int, version: int, body: dict) -> tuple[dict, Note | None]:
        """A request body as the handlers read it: a Produce or Fetch naming topics by
        id (v13+) names them by name; the note is for :meth:`finish`."""
        return self.topic_ids.to_names(api_key, version, body)

    def finish(self, api_key: int, version: int, body: dict | None,
               note: Note | None) -> dict | None:
        """A Produce or Fetch answer as the client reads it: the leader hints of
        KIP-951 on its NOT_LEADER_OR_FOLLOWER (and, Fetch, FENCED_LEADER_EPOCH) rows,
        and topics by id again when the request named them so."""
        if body is None or api_key not in _HINTED:
            return body
        return self.topic_ids.to_ids(api_key, self._leader_hints(api_key, version, body), note)

    def _leader_hints(self, api_key: int, version: int, body: dict) -> dict:
        """Each row refused because this node does not lead (or leads another epoch)
        says who does (``current_leader``) and the answer where to reach them
        (``node_endpoints``), so the client goes there without a Metadata round trip
        (KIP-951: Produce v10+, Fetch v16+, as Kafka's KafkaApis)."""
        since, name_key, parts_key, index_key, codes = _HINTED[api_key]
        if version < since:
            return body
        topics, leaders, out = self.replicas.store.topics, set(), []
        for t in body["responses"]:
            info, rows = topics.get(t[name_key]), []
            for row in t[parts_key]:
                part = _partition_info(info, row[index_key]) if row["error_code"] in codes else None
                if part is not None and part.leader >= 0:
                    row = {**row, "current_leader": {"leader_id": part.leader,
                                                     "leader_epoch": part.leader_epoch}}
                    leaders.add(part.leader)
                rows.append(row)
            out.append({**t, parts_key: rows})
        if not leaders:
            return body
        return {**body, "responses": out, "node_endpoints": [
            {"node_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in self._brokers(self.broker.brokers()) if b["node_id"] in leaders]}

    async def _quorum(self, method, req: Request):
        """A metadata write, in a worker thread (a Raft commit may take seconds), then
        its effect on this node's partitions, as the native server runs it."""
        out = await trio.to_thread.run_sync(method, req)
        self.replicas.reconcile()
        return out

    # ------------------------------------------------------------------ versions, metadata

    async def api_versions(self, v: int, body: dict, ctx: Context) -> dict:
        return {"error_code": 0, "throttle_time_ms": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (lo, hi) in sorted(SUPPORTED.items())]}

    async def sasl_handshake(self, v: int, body: dict, ctx: Context) -> dict:
        """Only a SASL listener's connection before authentication uses SASL (the
        listener answers it there); here it is out of place, as in Kafka."""
        return {"error_code": _E[ErrorCode.ILLEGAL_SASL_STATE], "mechanisms": []}

    async def sasl_authenticate(self, v: int, body: dict, ctx: Context) -> dict:
        return {"error_code": _E[ErrorCode.ILLEGAL_SASL_STATE],
                "error_message": "no SASL authentication on this connection now",
                "auth_bytes": b"", "session_lifetime_ms": 0}

    def _brokers(self, rows) -> list:
        out = []
        for b in rows:
            host, port = self.kafka_address(b.node_id, b.host, b.port)
            out.append({"node_id": b.node_id, "host": host, "port": port, "rack": b.rack})
        return out

    async def metadata(self, v: int, body: dict, ctx: Context) -> dict:
        topics = body["topics"]
        names = None if topics is None or (v == 0 and not topics) else [t["name"] for t in topics]
        cluster_ops = (authorized_operations(ctx.acl, CLUSTER, CLUSTER_NAME)
                       if body.get("include_cluster_authorized_operations") else NOT_ASKED)
        topic_ops = body.get("include_topic_authorized_operations", False)
        try:
            if names is not None and any(n is None for n in names):
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               "topics by id are not supported; name them")
            fields, hidden = {"topics": names, "include_configs": False,
                              "allow_auto_topic_creation": False}, []
            if ctx.acl is not None:  # hidden topics look unknown and are never auto-created
                fields, hidden = ctx.acl.metadata_request(fields)
            created = None
            if body.get("allow_auto_topic_creation", True):
                created = await self.broker.auto_create_for_metadata(
                    _req(Api.METADATA, ctx, {**fields, "allow_auto_topic_creation": True}),
                    ctx.acl)
            head, _ = self.broker.metadata(_req(Api.METADATA, ctx, fields), created)
            if ctx.acl is not None:
                head = ctx.acl.filter_response(Api.METADATA, head, hidden)
        except ApiError as e:
            # never an empty broker list (librdkafka would drop every broker): the
            # brokers this node knows, or itself
            return {"brokers": self._known_brokers(), "cluster_id": self.config.cluster_id,
                    "controller_id": -1, "cluster_authorized_operations": cluster_ops,
                    "topics": [{"error_code": _E[e.code], "name": n, "partitions": []}
                               for n in (names or [])]}
        return {
            "brokers": self._brokers(head["brokers"]) or self._known_brokers(),
            "cluster_id": head["cluster_id"],
            "controller_id": head["controller_id"],
            "cluster_authorized_operations": cluster_ops,
            "topics": [{
                "error_code": to_kafka(t["error"]), "name": t["name"],
                "topic_id": _topic_id_bytes(t["topic_id"]),
                "is_internal": t["name"].startswith("__"),
                "topic_authorized_operations": (
                    authorized_operations(ctx.acl, TOPIC, t["name"]) if topic_ops else NOT_ASKED),
                "partitions": [{
                    "error_code": to_kafka(p.error) if p.leader >= 0 else _E[ErrorCode.LEADER_NOT_AVAILABLE],
                    "partition_index": p.partition, "leader_id": p.leader,
                    "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                    "isr_nodes": list(p.isr), "offline_replicas": list(p.offline_replicas)}
                    for p in t["partitions"]],
            } for t in head["topics"]],
        }

    def _known_brokers(self) -> list:
        """The brokers of this node's metadata, or (none known yet) this node alone."""
        rows = self._brokers(self.broker.brokers())
        if rows:
            return rows
        host, port = self.kafka_address(self.config.node_id, *self.config.advertised)
        return [{"node_id": self.config.node_id, "host": host, "port": port,
                 "rack": self.config.broker_rack}]

    async def describe_cluster(self, v: int, body: dict, ctx: Context) -> dict:
        head, _ = self.broker.describe_cluster(_req(Api.DESCRIBE_CLUSTER, ctx, {}))
        return {"error_code": 0, "cluster_id": head["cluster_id"],
                "controller_id": head["controller_id"], "endpoint_type": 1,
                "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "rack": b["rack"]} for b in self._brokers(head["brokers"])],
                "cluster_authorized_operations": (
                    authorized_operations(ctx.acl, CLUSTER, CLUSTER_NAME)
                    if body["include_cluster_authorized_operations"] else NOT_ASKED)}

    # ------------------------------------------------------------------ produce

    async def produce(self, v: int, body: dict, ctx: Context) -> dict | None:
        converted = await self.produce_convert(v, body, ctx)
        await self.produce_verify(body, converted)
        answer, wait = self.produce_begin(v, body, ctx, converted)
        if wait is None:
            return answer
        failed = await self.replicas.await_replicated(wait.state[3], wait.deadline)
        self.replicas.mark_failed(wait.state[1], failed)
        return _produce_body(wait.state[0], wait.state[1], wait.state[2])

    @staticmethod
    def produce_is_heavy(body: dict) -> bool:
        """Would converting this produce's batches hold the event loop for long (many
        bytes, or compressed ones that may expand to the batch limit)? Then the listener
        converts them in a worker thread first (:meth:`produce_convert`)."""
        total, compressed, batches = 0, False, 0
        for t in body["topic_data"]:
            for p in t["partition_data"]:
                records = p["records"] or b""
                total += len(records)
                pos = 0
                while pos + kb_ATTRIBUTES + 2 <= len(records) and not compressed:
                    batches += 1
                    if batches > PRODUCE_INLINE_BATCHES_MAX:
                        return True
                    compressed = records[pos + kb_ATTRIBUTES + 1] & 0x07 != 0
                    pos += kafka_batch.LOG_OVERHEAD + max(
                        int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True), 1)
        return total > PRODUCE_INLINE_BYTES_MAX or (
            compressed and total > PRODUCE_INLINE_COMPRESSED_BYTES_MAX)

    async def produce_convert(self, v: int, body: dict, ctx: Context) -> tuple:
        """The produce's batches checked, decompressed (bounded) and converted, for
        :meth:`produce_begin`: in a worker thread when :meth:`produce_is_heavy` (the
        codecs release the GIL; the per-record walk yields it every few ms), at most
        CONVERT_THREADS_MAX at once. Authorized first: a refused produce converts
        nothing."""
        denied = self._produce_denied(body, ctx)
        if denied is not None or not self.produce_is_heavy(body):
            return _convert_produce(body, denied)
        return await trio.to_thread.run_sync(_convert_produce, body, denied,
                                             limiter=self._convert_limiter)

    async def produce_verify(self, body: dict, converted: tuple) -> None:
        """A transactional produce (KIP-890): the producer's transaction coordinator
        confirms that each transactional batch's partition is in its ongoing
        transaction, as on the native listener (TxnHost.verify_produce); a partition
        not confirmed is refused by the append (INVALID_TXN_STATE, nothing written)."""
        tid = body["transactional_id"]
        _order, _errors, parts, bodies = converted
        if tid is None or not parts or self.broker.txn is None:
            return
        await self.broker.txn.verify_produce(tid, parts, bodies)

    def produce_begin(self, v: int, body: dict, ctx: Context, converted: tuple | None = None):
        """Append every partition's batches now, in request order, as the native server
        does (converting them here unless ``converted``: :meth:`produce_convert`'s).
        Returns ``(body, None)`` when the answer is known (body None: acks=0, no
        answer), or ``(None, wait)`` for acks=all still waiting for the ISR
        (:meth:`produce_check`). The listener appends the next requests of the
        connection while an acks=all one waits (one replication round for several
        requests in flight), answering in request order."""
        if converted is None:
            converted = _convert_produce(body, self._produce_denied(body, ctx))
        order, errors, parts, bodies = converted
        acks = body["acks"]
        rows: list = []
        if parts:
            data = bodies[0] if len(bodies) == 1 else b"".join(bodies)  # (no copy of one)
            try:
                req = _req(Api.PRODUCE, ctx, {"acks": acks,
                                              "timeout_ms": max(body["timeout_ms"], 0),
                                              "transactional_id": body["transactional_id"],
                                              "parts": parts,
                                              # (to_raftlog checked every record)
                                              "records_checked": True}, data)
            except ApiError as e:  # denied: nothing appended
                errors.update({(t, p): (e.code, e.message) for t, p, _ in parts})
                parts = []
        if parts:
            if acks == -1 or (acks == 1 and self.replicas.any_durable(parts)):
                rows, waits, deadline = self.replicas.produce_acks_all_append(req)
                if waits:
                    return None, Wait("produce", req, [w[0] for w in waits], deadline,
                                      (order, rows, errors, waits))
            elif acks in (0, 1):
                rows = self.broker.produce(req)[0]["parts"]
            else:
                for t, p, _ in parts:
                    errors[(t, p)] = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}")
        if acks == 0:
            return None, None
        return _produce_body(order, rows, errors), None

    @staticmethod
    def _produce_denied(body: dict, ctx: Context) -> tuple | None:
        """(code, message) when the ACLs refuse the produce (every partition gets it),
        checked on the topic names alone: a batch is decompressed or converted only
        for a principal allowed to write it. None: allowed."""
        if ctx.acl is None:
            return None
        topics = {t["name"] for t in body["topic_data"]}
        try:
            _authorize(Api.PRODUCE, ctx, {"transactional_id": body["transactional_id"],
                                          "parts": [(t, 0, 0) for t in topics]})
        except ApiError as e:
            return e.code, e.message
        return None

    def produce_check(self, wait: Wait, expired: bool) -> dict | None:
        """The answer of a waiting acks=all produce once every batch is replicated or
        failed (``expired``: its timeout passed); None while it still waits (and
        ``wait.parts`` says what to watch)."""
        order, rows, errors, waits = wait.state
        waits, failed = self.replicas.check_high_watermarks(waits, expired)
        if failed:
            self.replicas.mark_failed(rows, failed)
        if waits:
            wait.state, wait.parts = (order, rows, errors, waits), [w[0] for w in waits]
            return None
        return _produce_body(order, rows, errors)

    # ------------------------------------------------------------------ fetch

    async def fetch(self, v: int, body: dict, ctx: Context) -> dict:
        answer, wait = self.fetch_begin(v, body, ctx)
        while wait is not None:
            ev = trio.Event()
            registered = [p for p in wait.parts if p.add_waiter(ev)]
            try:
                with trio.move_on_at(wait.deadline):
                    await ev.wait()
            finally:
                for p in registered:
                    p.remove_waiter(ev)
            answer = self.fetch_check(wait, trio.current_time() >= wait.deadline
                                      or len(registered) < len(wait.parts))
            wait = None if answer is not None else wait
        return answer

    @staticmethod
    def fetch_is_large(body: dict) -> bool:
        """Does this fetch name more partitions than one event-loop step should read
        (:data:`FETCH_PARTITIONS_PER_STEP`)? Then the listener calls :meth:`fetch_large`."""
        return sum(len(t["partitions"]) for t in body["topics"]) > FETCH_PARTITIONS_PER_STEP

    async def fetch_large(self, v: int, body: dict, ctx: Context) -> dict:
        """A fetch of many partitions, read FETCH_PARTITIONS_PER_STEP at a time with a
        checkpoint between the slices (each partition once, in request order, the byte
        budget shared). Its long poll is coarse: when the first pass finds less than
        min_bytes and no error, it sleeps max_wait once and reads again."""
        flat, seen = [], set()
        for t in body["topics"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition"])
                if key not in seen:
                    seen.add(key)
                    flat.append((t["topic"], p))
        try:  # the whole request is allowed or refused, as a small one
            _authorize(Api.FETCH, ctx, {"replica_id": -1, "parts": [(t, 0) for t in
                                                                    {t for t, _ in flat}]})
        except ApiError as e:
            order = [((t, p["partition"]), p["fetch_offset"]) for t, p in flat]
            return self._fetch_body([], [], order, {key: e.code for key, _ in order})
        max_wait_ms = min(max(body["max_wait_ms"], 0), FETCH_MAX_WAIT_MS)
        deadline = trio.current_time() + max_wait_ms / 1000
        answer, total, error = await self._fetch_slices(v, body, ctx, flat)
        if not error and total < max(body["min_bytes"], 0) and max_wait_ms:
            await trio.sleep_until(deadline)
            answer, _total, _error = await self._fetch_slices(v, body, ctx, flat)
        return answer

    async def _fetch_slices(self, v: int, body: dict, ctx: Context, flat: list) -> tuple:
        """(merged answer, record bytes, any error) of ``flat`` read slice by slice."""
        budget = body["max_bytes"] if v >= 3 and body["max_bytes"] > 0 else FETCH_MAX_BYTES_MAX
        budget = min(budget, FETCH_MAX_BYTES_MAX)
        by_topic: dict = {}
        total, error = 0, False
        for i in range(0, len(flat), FETCH_PARTITIONS_PER_STEP):
            if i:
                await trio.lowlevel.checkpoint()  # let other clients and heartbeats run
            topics: dict = {}
            for t, p in flat[i : i + FETCH_PARTITIONS_PER_STEP]:
                topics.setdefault(t, []).append(p)
            sub = {**body, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max(budget - total, 1),
                   "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
            answer, wait = self.fetch_begin(max(v, 3), sub, ctx, min_one=not total)
            assert wait is None  # (max_wait_ms 0: answered at once)
            for row in answer["responses"]:
                by_topic.setdefault(row["topic"], []).extend(row["partitions"])
                for part in row["partitions"]:
                    total += len(part["records"] or b"")
                    error = error or part["error_code"] != 0
        return ({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                 "responses": [{"topic": n, "partitions": rows} for n, rows in by_topic.items()]},
                total, error)

    def fetch_in_session(self, v: int, body: dict) -> bool:
        """Does this fetch open, use or close a fetch session (KIP-227, v7+)? Then
        the listener calls :meth:`fetch_session`; else the sessionless paths."""
        return (v >= 7 and body["replica_id"] < 0 and self.sessions.slots > 0
                and (body["session_id"] != 0 or body["session_epoch"] != FINAL_EPOCH))

    async def fetch_session(self, v: int, body: dict, ctx: Context) -> dict:
        """A consumer's fetch in a session (node/consumer_fetch_session.py): opens one
        (epoch 0), closes one (epoch -1: answered as a full fetch without a session)
        or uses one: its partitions updated by what the fetch names and forgets, the
        marked ones read, and only the rows with news answered. Its long poll waits
        for a mark (a high watermark or role move of a session partition) or
        ``max_wait_ms``."""
        session, code = self.sessions.begin(body["session_id"], body["session_epoch"],
                                            node_ms(), ctx.conn)
        if code:
            return {"throttle_time_ms": 0, "error_code": code, "session_id": 0,
                    "responses": []}
        if session is None:  # (epoch -1, or every slot busy: a full fetch without one)
            return await self._fetch_sessionless(v, body, ctx)
        named = [(t["topic"], p["partition"], p["fetch_offset"],
                  min(max(p["partition_max_bytes"], 1), FETCH_MAX_BYTES_MAX),
                  p["current_leader_epoch"])
                 for t in body["topics"] for p in t["partitions"]]
        forgotten = [(f["topic"], p) for f in body["forgotten_topics_data"] or ()
                     for p in f["partitions"]]
        # the whole request is allowed or refused, as a sessionless one -- on every topic
        # the session will hold, the ones kept from earlier fetches too (an ACL removed
        # since applies to them at once, as on the native listener)
        # (without ACLs there is nothing to check: a session's fetch stays O(news))
        try:
            if ctx.acl is not None:
                gone = set(forgotten)
                held = [(t, p) for t, p in session.parts if (t, p) not in gone]
                _authorize(Api.FETCH, ctx, {"replica_id": -1, "parts": [
                    (t, 0) for t in {x[0] for x in named} | {t for t, _p in held}]})
        except ApiError as e:
            self.sessions.close(session.session_id)
            rows = {(x[0], x[1]) for x in named} | set(held)
            return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
                {"topic": t, "partitions": [_error_row(p, _E[e.code]) for _t, p in parts]}
                for t, parts in _by_topic(sorted(rows)).items()]}
        session.apply([x for x in named if x[1] >= 0], forgotten, self.replicas.partitions.get,
                      self.replicas.partitions_version)
        bad = [(t, p) for t, p, *_ in named if p < 0]
        max_wait_ms = min(max(body["max_wait_ms"], 0), FETCH_MAX_WAIT_MS)
        deadline = trio.current_time() + max_wait_ms / 1000
        min_bytes = max(body["min_bytes"], 0)
        rows: dict = {}  # {key: answer row}, news only; a later read of a key replaces it
        for t, p in bad:
            rows[(t, p)] = _error_row(p, _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
        while True:
            keys = [k for k in session.take_dirty() if k in session.parts]
            flat = [(k[0], {"partition": k[1], "fetch_offset": session.parts[k].offset,
                            "partition_max_bytes": session.parts[k].max_bytes,
                            "current_leader_epoch": session.parts[k].epoch})
                    for k in keys]
            again = []  # data there but left out (the byte budget): read next time
            if flat:
                answer, _total, _error = await self._fetch_slices(v, body, ctx, flat)
                for t in answer["responses"]:
                    for row in t["partitions"]:
                        key = (t["topic"], row["partition_index"])
                        if key not in session.parts:  # (forgotten meanwhile)
                            continue
                        if (not row["records"] and row["error_code"] == 0
                                and session.unread(key, row["last_stable_offset"])):
                            again.append(key)
                        if session.news(key, row):
                            rows[key] = row
            total = sum(len(r["records"] or b"") for r in rows.values())
            done = ((rows and (total >= min_bytes or any(r["error_code"] for r in rows.values())))
                    or trio.current_time() >= deadline or session.closed)
            if not done and not session.dirty:  # (no mark came in while reading)
                ev = trio.Event()
                session.waiter = ev
                try:
                    with trio.move_on_at(deadline):
                        await ev.wait()
                finally:
                    session.waiter = None
            session.dirty.update(again)
            if done:
                break
        by_topic: dict = {}
        for (t, _p), row in rows.items():
            by_topic.setdefault(t, []).append(row)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": session.session_id,
                "responses": [{"topic": t, "partitions": rs} for t, rs in by_topic.items()]}

    async def _fetch_sessionless(self, v: int, body: dict, ctx: Context) -> dict:
        if self.fetch_is_large(body):
            return await self.fetch_large(v, body, ctx)
        return await self.fetch(v, body, ctx)

    def fetch_begin(self, v: int, body: dict, ctx: Context, min_one: bool = True):
        """``(body, None)`` when the fetch can be answered now, else ``(None, wait)``:
        until min_bytes are there, an error shows or max_wait passes
        (:meth:`fetch_check`; the native ParkedFetch's rule). The answer keeps within
        ``max_bytes`` and each ``partition_max_bytes`` but for one oversized batch
        (ReplicaManager.fetch_once; none when not ``min_one``)."""
        parts, order, bad, seen = [], [], {}, set()
        max_bytes = body["max_bytes"] if v >= 3 and body["max_bytes"] > 0 else FETCH_MAX_BYTES_MAX
        for t in body["topics"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition"])
                if key in seen:  # a partition named twice is fetched and answered once
                    continue
                seen.add(key)
                order.append((key, p["fetch_offset"]))
                if p["partition"] < 0:
                    bad[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                part_max = min(max(p["partition_max_bytes"], 1), FETCH_MAX_BYTES_MAX)
                parts.append((key[0], key[1], p["fetch_offset"], part_max,
                              p["current_leader_epoch"]))
        max_wait_ms = min(max(body["max_wait_ms"], 0), FETCH_MAX_WAIT_MS)
        try:
            isolation = 1 if v >= 4 and body.get("isolation_level") == 1 else 0
            req = _req(Api.FETCH, ctx, {"replica_id": -1, "max_wait_ms": max_wait_ms,
                                        "isolation_level": isolation,
                                        "min_bytes": max(body["min_bytes"], 0),
                                        "max_bytes": min(max_bytes, FETCH_MAX_BYTES_MAX),
                                        "parts": parts, "min_one": min_one})
        except ApiError as e:  # denied: every partition says so
            bad.update({(t, p): e.code for t, p, *_ in parts})
            parts = []
        if not parts:
            return self._fetch_body([], [], order, bad), None
        wait = Wait("fetch", req, [], trio.current_time() + max_wait_ms / 1000, (order, bad))
        answer = self.fetch_check(wait, max_wait_ms == 0)
        return (answer, None) if answer is not None else (None, wait)

    def fetch_check(self, wait: Wait, expired: bool) -> dict | None:
        """The fetch's answer if min_bytes are there, an error shows, a partition is
        gone or ``expired``; else None (``wait.parts``: the partitions to watch)."""
        replicas, req = self.replicas, wait.req
        heads, pieces, total, error = replicas.fetch_once(req)
        order, bad = wait.state
        if not (error or total >= req.fields["min_bytes"] or expired):
            parts = [replicas.partitions.get((t, p)) for t, p, *_ in req.fields["parts"]]
            if all(p is not None for p in parts):
                wait.parts = parts
                return None
        return self._fetch_body(heads, pieces, order, bad)

    def _fetch_body(self, heads: list, pieces: list, order: list, bad: dict) -> dict:
        got: dict = {}
        it = iter(pieces)
        for h in heads:
            data = b""
            if h.length:
                piece = next(it)
                data = piece if isinstance(piece, bytes) else piece.read_bytes()
            got[(h.topic, h.partition)] = (h, data)
        by_topic: dict = {}
        for key, offset in order:
            entry = got.get(key)
            if entry is None:
                row = {"partition_index": key[1], "error_code": _E[bad.get(key, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
                       "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                       "aborted_transactions": None, "preferred_read_replica": -1, "records": None}
            else:
                h, data = entry
                code = h.error
                try:  # (verify=False: the log checked every batch it served)
                    records = (RawPieces(kafka_batch.from_raftlog_pieces(
                        data, start_offset=offset, verify=False)) if data else b"")
                except CorruptRecordError:
                    code, records = int(ErrorCode.KAFKA_STORAGE_ERROR), b""
                committed = h.last_stable_offset >= 0  # (isolation_level 1)
                row = {"partition_index": key[1], "error_code": to_kafka(code),
                       "high_watermark": h.high_watermark,
                       "last_stable_offset": (h.last_stable_offset if committed
                                              else h.high_watermark),
                       "log_start_offset": h.log_start_offset,
                       "aborted_transactions": ([{"producer_id": pid, "first_offset": first}
                                                 for pid, first in h.aborted]
                                                if committed else None),
                       "preferred_read_replica": -1, "records": records}
            by_topic.setdefault(key[0], []).append(row)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": n, "partitions": rows} for n, rows in by_topic.items()]}

    async def list_offsets(self, v: int, body: dict, ctx: Context) -> dict:
        """ListOffsets v1-v11. A special (negative) timestamp needs the version that
        brought it (else UNSUPPORTED_VERSION for its partition, as Kafka). raftlog keeps
        no tiered storage, so it answers the tiered ones as a Kafka broker without
        remote storage does: the earliest local offset (-4) is the log start offset,
        and the latest tiered offset (-5) and the earliest one pending upload (-6)
        are none (-1), once the partition's leadership is checked. ``timeout_ms`` (v10,
        for remote reads) has nothing to wait for."""
        parts, order, none_of, refused = [], [], set(), {}
        for t in body["topics"]:
            for p in t["partitions"]:
                key, ts = (t["name"], p["partition_index"]), p["timestamp"]
                order.append(key)
                if ts < 0 and v < LIST_OFFSETS_SINCE.get(ts, 0x8000):
                    refused[key] = _E[ErrorCode.UNSUPPORTED_VERSION]
                elif p["partition_index"] >= 0:
                    if ts in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
                        none_of.add(key)
                    if ts in _AS_EARLIEST:
                        ts = EARLIEST_TIMESTAMP
                    parts.append((t["name"], p["partition_index"], ts))
        rows, missing = {}, _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        if parts:
            try:
                head, _ = self.broker.list_offsets(_req(Api.LIST_OFFSETS, ctx, {
                    "parts": parts,  # (read_committed, v2+: latest is the last stable offset)
                    "isolation_level": 1 if v >= 2 and body.get("isolation_level") == 1 else 0}))
                rows = {(r.topic, r.partition): r for r in head["parts"]}
            except ApiError as e:
                if e.code is not ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise
                missing = _E[e.code]
        by_topic: dict = {}
        for key in order:
            r = rows.get(key)
            if r is not None and key not in refused:
                row = {"partition_index": key[1], "error_code": to_kafka(r.error),
                       "timestamp": r.timestamp, "offset": r.offset,
                       "leader_epoch": self._epoch(key)}
                if key in none_of and r.error == 0:
                    row.update(timestamp=-1, offset=-1, leader_epoch=-1)
            else:
                row = {"partition_index": key[1], "error_code": refused.get(key, missing),
                       "timestamp": -1, "offset": -1, "leader_epoch": -1}
            by_topic.setdefault(key[0], []).append(row)
        return {"throttle_time_ms": 0,
                "topics": [{"name": n, "partitions": rows} for n, rows in by_topic.items()]}

    def _epoch(self, key) -> int:
        part = self.replicas.partitions.get(key)
        return part.leader_epoch if part is not None else -1

    # ------------------------------------------------------------------ topics admin

    async def create_topics(self, v: int, body: dict, ctx: Context) -> dict:
        from .admin_handlers import manual_assignments

        wanted, early = [], {}
        for t in body["topics"]:
            n = t["num_partitions"] if t["num_partitions"] != -1 else self.config.num_partitions
            rf = (t["replication_factor"] if t["replication_factor"] != -1
                  else self.config.default_replication_factor)
            try:  # manual replica assignments: they give the count and the factor
                assignments = manual_assignments(t)
            except ApiError as e:
                early[t["name"]] = (e.code, e.message)
                continue
            if assignments is not None:
                n, rf = len(assignments), len(assignments[0])
            wanted.append({"name": t["name"], "partitions": n, "replication_factor": rf,
                           "config": {c["name"]: c["value"] for c in t["configs"]
                                      if c["value"] is not None},
                           "assignments": assignments})
        results = {}
        if wanted:
            try:
                req = _req(Api.CREATE_TOPICS, ctx, {
                    "topics": wanted, "timeout_ms": max(body["timeout_ms"], 0),
                    "validate_only": body["validate_only"]})
            except ApiError as e:  # denied: nothing created
                early.update({w["name"]: (e.code, e.message) for w in wanted})
                wanted = []
        if wanted:
            head, _ = await self._quorum(self.broker.create_topics, req)
            results = {r.name: r for r in head["results"]}
        sizes = {w["name"]: w for w in wanted}
        out = []
        for t in body["topics"]:
            r, w = results.get(t["name"]), sizes.get(t["name"])
            if r is None:
                code, msg = early.get(t["name"], (ErrorCode.INVALID_REQUEST, "duplicate topic"))
                out.append({"name": t["name"], "error_code": _E[code], "error_message": msg,
                            "num_partitions": -1, "replication_factor": -1, "configs": None})
                continue
            info = self.broker.store.topics.get(t["name"]) if r.error == 0 else None
            out.append({"name": t["name"], "error_code": to_kafka(r.error),
                        "error_message": r.message or None,
                        "topic_id": _topic_id_bytes(info.topic_id) if info else bytes(16),
                        "num_partitions": w["partitions"] if r.error == 0 else -1,
                        "replication_factor": w["replication_factor"] if r.error == 0 else -1,
                        "configs": None})
        return {"throttle_time_ms": 0, "topics": out}

    async def delete_topics(self, v: int, body: dict, ctx: Context) -> dict:
        try:
            req = _req(Api.DELETE_TOPICS, ctx, {"names": list(body["topic_names"]),
                                               "timeout_ms": max(body["timeout_ms"], 0)})
        except ApiError as e:  # denied: nothing deleted
            return {"throttle_time_ms": 0, "responses": [
                {"name": n, "error_code": _E[e.code], "error_message": e.message}
                for n in body["topic_names"]]}
        head, _ = await self._quorum(self.broker.delete_topics, req)
        return {"throttle_time_ms": 0, "responses": [
            {"name": r.name, "error_code": to_kafka(r.error), "error_message": r.message or None}
            for r in head["results"]]}

    async def describe_configs(self, v: int, body: dict, ctx: Context) -> dict:
        from ..topics import validate_topic_config

        out = []
        for res in body["resources"]:
            keys = res["configuration_keys"]
            row = {"error_code": 0, "error_message": None, "resource_type": res["resource_type"],
                   "resource_name": res["resource_name"], "configs": []}
            denied = ctx.acl is not None and not (
                ctx.acl.allowed(DESCRIBE, TOPIC, res["resource_name"])
                if res["resource_type"] == RESOURCE_TOPIC
                else ctx.acl.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME))
            if denied:  # (describing a topic's configs needs DESCRIBE, as its metadata)
                code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if res["resource_type"] == RESOURCE_TOPIC
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                row["error_code"], row["error_message"] = _E[code], "not authorized"
            elif res["resource_type"] == RESOURCE_TOPIC:
                info = self.broker.store.topics.get(res["resource_name"])
                if info is None:
                    row["error_code"] = _E[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
                    row["error_message"] = f"unknown topic {res['resource_name']!r}"
                else:
                    cfg = (self.replicas.log_configs.get(info.name)
                           or validate_topic_config(info.config, self.config.log_defaults))
                    for name, value in sorted(cfg.to_dict().items()):
                        if keys is not None and name not in keys:
                            continue
                        source = CONFIG_SOURCE_TOPIC if name in info.config else CONFIG_SOURCE_DEFAULT
                        row["configs"].append(_config_entry(name, value, source, False))
            elif res["resource_type"] != RESOURCE_BROKER:
                row["error_code"] = _E[ErrorCode.INVALID_REQUEST]
                row["error_message"] = f"resource type {res['resource_type']} is not supported"
            elif res["resource_name"] not in ("", str(self.config.node_id)):
                row["error_code"] = _E[ErrorCode.INVALID_REQUEST]
                row["error_message"] = (f"this is broker {self.config.node_id}: ask broker "
                                        f"{res['resource_name']} for its configs")
            else:
                advertised = self.kafka_address(self.config.node_id, *self.config.advertised)
                for name, value in sorted(kafka_configs.broker_configs(
                        self.config, advertised).items()):
                    if keys is None or name in keys:
                        row["configs"].append(_config_entry(
                            name, value, kafka_configs.SOURCE_STATIC_BROKER, True))
            out.append(row)
        return {"throttle_time_ms": 0, "results": out}

    async def init_producer_id(self, v: int, body: dict, ctx: Context) -> dict:
        """An idempotent producer's id, or (a transactional id) the transaction
        coordinator's: a producer id and an epoch that fences every earlier instance
        (v3+ name the caller's current ones, KIP-360). ACLs: WRITE on the
        transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or for an idempotent
        producer WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED), as Kafka."""
        from .txn_handlers import kafka_code, txn_host

        tid = body["transactional_id"]
        try:
            if tid is not None:
                fields = {"transactional_id": tid,
                          "transaction_timeout_ms": body["transaction_timeout_ms"],
                          "producer_id": body.get("producer_id", -1) if v >= 3 else -1,
                          "producer_epoch": body.get("producer_epoch", -1) if v >= 3 else -1}
                _authorize(Api.INIT_PRODUCER_ID, ctx, fields)
                got = await txn_host(self.broker).init_producer_id(fields)
            else:
                _authorize(Api.INIT_PRODUCER_ID, ctx, {})
                got = await self.broker.producer_ids.init_producer_id({"timeout_ms": 30_000})
            return {"throttle_time_ms": 0, "error_code": 0, "producer_id": got["producer_id"],
                    "producer_epoch": got["producer_epoch"]}
        except ApiError as e:
            return {"throttle_time_ms": 0, "error_code": kafka_code(e.code, v, 4),
                    "producer_id": -1, "producer_epoch": -1}

    # ------------------------------------------------------------------ groups

    async def _group(self, api: Api, fields: dict, ctx: Context) -> dict:
        _authorize(api, ctx, fields)
        if self.broker.groups is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the node is starting")
        return await self.broker.groups.service.handle(api, fields)

    async def find_coordinator(self, v: int, body: dict, ctx: Context) -> dict:
        keys = body["coordinator_keys"] if v >= 4 else [body["key"]]
        rows = []
        for key in keys:
            try:
                if body["key_type"] == 1:  # a transactional id's coordinator
                    from .txn_handlers import txn_host

                    # (DESCRIBE on the transactional id)
                    _authorize(Api.FIND_COORDINATOR, ctx, {"key": key, "key_type": 1})
                    got = txn_host(self.broker).locate(key)
                elif body["key_type"] != 0:
                    raise ApiError(ErrorCode.INVALID_REQUEST,
                                   f"key type {body['key_type']}: 0 (group) or 1 (transaction)")
                else:
                    got = await self._group(Api.FIND_COORDINATOR, {"key": key}, ctx)
                host, port = self.kafka_address(got["node_id"], got["host"], got["port"])
                rows.append({"key": key, "node_id": got["node_id"], "host": host, "port": port,
                             "error_code": 0, "error_message": None})
            except ApiError as e:
                rows.append({"key": key, "node_id": -1, "host": "", "port": -1,
                             "error_code": _E[e.code], "error_message": e.message})
        if v >= 4:
            return {"throttle_time_ms": 0, "coordinators": rows}
        return {"throttle_time_ms": 0, **{k: rows[0][k] for k in
                                          ("node_id", "host", "port", "error_code", "error_message")}}

    async def join_group(self, v: int, body: dict, ctx: Context) -> dict:
        fields = {"group": body["group_id"], "member_id": body["member_id"],
                  "group_instance_id": body["group_instance_id"],
                  "session_timeout_ms": body["session_timeout_ms"],
                  "rebalance_timeout_ms": (body["rebalance_timeout_ms"] if v >= 1
                                           else body["session_timeout_ms"]),
                  "protocols": [(p["name"], cp.subscription_to_raftlog(p["metadata"])
                                 if body["protocol_type"] == CONSUMER else p["metadata"])
                                for p in body["protocols"]],
                  "protocol_type": body["protocol_type"], "client_id": ctx.client_id,
                  "client_host": ctx.client_host}
        try:
            got = await self._group(Api.JOIN_GROUP, fields, ctx)
        except ApiError as e:
            return {"error_code": _E[e.code], "generation_id": -1, "protocol_type": None,
                    "protocol_name": None if v >= 7 else "", "leader": "",
                    "member_id": body["member_id"], "members": []}
        protocol = got["protocol"]
        return {"error_code": 0, "generation_id": got["generation"],
                "protocol_type": got.get("protocol_type"),
                "protocol_name": protocol if protocol is not None or v >= 7 else "",
                "leader": got["leader"] or "", "member_id": got["member_id"],
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "metadata": _subscription_bytes(body["protocol_type"], m.metadata)}
                            for m in got.get("members") or []]}

    async def sync_group(self, v: int, body: dict, ctx: Context) -> dict:
        consumer = self._protocol_type(body["group_id"]) == CONSUMER
        fields = {"group": body["group_id"], "generation": body["generation_id"],
                  "member_id": body["member_id"],
                  "group_instance_id": body.get("group_instance_id"),
                  "assignments": [(a["member_id"], cp.assignment_to_raftlog(a["assignment"])
                                   if consumer else a["assignment"])
                                  for a in body["assignments"]]}
        try:
            got = await self._group(Api.SYNC_GROUP, fields, ctx)
        except ApiError as e:
            return {"error_code": _E[e.code], "assignment": b""}
        ptype = got.get("protocol_type")
        return {"error_code": 0, "protocol_type": ptype, "protocol_name": got.get("protocol"),
                "assignment": _assignment_bytes(ptype, got["assignment"])}

    def _protocol_type(self, group_id: str) -> str | None:
        """The group's protocol type as the coordinator has it (None: unknown group)."""
        groups = self.broker.groups
        g = groups.service.coordinator.groups.get(group_id) if groups is not None else None
        return g.protocol_type if g is not None else None

    async def heartbeat(self, v: int, body: dict, ctx: Context) -> dict:
        try:
            await self._group(Api.HEARTBEAT, {"group": body["group_id"],
                                              "generation": body["generation_id"],
                                              "member_id": body["member_id"],
                                              "group_instance_id": body.get("group_instance_id")},
                              ctx)
            return {"error_code": 0}
        except ApiError as e:
            return {"error_code": _E[e.code]}

    async def leave_group(self, v: int, body: dict, ctx: Context) -> dict:
        members = body["members"] if v >= 3 else [{"member_id": body["member_id"],
                                                    "group_instance_id": None}]
        rows, first = [], 0
        for m in members:
            try:
                await self._group(Api.LEAVE_GROUP, {"group": body["group_id"],
                                                    "member_id": m["member_id"],
                                                    "group_instance_id": m["group_instance_id"]},
                                  ctx)
                code = 0
            except ApiError as e:
                code = _E[e.code]
            first = first or code
            rows.append({**m, "error_code": code})
        return {"error_code": first if v < 3 else 0, "members": rows}

    async def offset_commit(self, v: int, body: dict, ctx: Context) -> dict:
        offsets, bad = commit_offsets(body)
        fields = {"group": body["group_id"], "generation": body["generation_id_or_member_epoch"],
                  "member_id": body["member_id"],
                  "group_instance_id": body.get("group_instance_id"), "offsets": offsets}
        codes: dict = {}
        try:
            got = await self._group(Api.OFFSET_COMMIT, fields, ctx) if offsets else {"parts": []}
            codes = {(r.topic, r.partition): to_kafka(r.error) for r in got["parts"]}
            whole = None
        except ApiError as e:
            whole = _E[e.code]
        return commit_answer(body, bad, whole, codes)

    async def offset_fetch(self, v: int, body: dict, ctx: Context) -> dict:
        topics = body["topics"]
        parts = None if topics is None else [(t["name"], i) for t in topics
                                             for i in t["partition_indexes"] if i >= 0]
        try:
            got = await self._group(Api.OFFSET_FETCH, {"group": body["group_id"], "parts": parts},
                                    ctx)
        except ApiError as e:
            code = _E[e.code]
            return {"error_code": code, "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": i, "committed_offset": -1, "metadata": None,
                     "error_code": code} for i in t["partition_indexes"]]}
                for t in topics or []]}
        if ctx.acl is not None:  # topics the principal may not describe: left out
            got = ctx.acl.filter_response(Api.OFFSET_FETCH, dict(got))
        by_topic: dict = {}
        for r in got["parts"]:
            by_topic.setdefault(r.topic, []).append(
                {"partition_index": r.partition, "committed_offset": r.offset,
                 "committed_leader_epoch": r.leader_epoch, "metadata": r.metadata or "",
                 "error_code": 0})
        return {"error_code": 0, "topics": [{"name": n, "partitions": rows}
                                            for n, rows in by_topic.items()]}

    async def list_groups(self, v: int, body: dict, ctx: Context) -> dict:
        try:
            got = await self._group(Api.LIST_GROUPS, {}, ctx)
        except ApiError as e:
            return {"error_code": _E[e.code], "groups": []}
        if ctx.acl is not None:  # groups the principal may not describe: left out
            got = ctx.acl.filter_response(Api.LIST_GROUPS, dict(got))
        wanted = {s.lower() for s in body["states_filter"]} if v >= 4 else set()
        return {"error_code": 0, "groups": [
            {"group_id": g.group, "protocol_type": g.protocol_type, "group_state": g.state}
            for g in got["groups"] if not wanted or g.state.lower() in wanted]}

    async def describe_groups(self, v: int, body: dict, ctx: Context) -> dict:
        try:
            got = await self._group(Api.DESCRIBE_GROUPS, {"groups": list(body["groups"])}, ctx)
        except ApiError as e:
            return {"groups": [{"error_code": _E[e.code], "group_id": g, "group_state": "",
                                "protocol_type": "", "protocol_data": "", "members": []}
                               for g in body["groups"]]}
        return {"groups": [{
            "error_code": to_kafka(g["error"]), "group_id": g["group"], "group_state": g["state"],
            "protocol_type": g["protocol_type"], "protocol_data": g["protocol"],
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": _subscription_bytes(g["protocol_type"], m.metadata),
                         "member_assignment": _assignment_bytes(g["protocol_type"], m.assignment)}
                        for m in g["members"]],
        } for g in got["groups"]]}


CONSUMER = "consumer"


def _convert_produce(body: dict, denied: tuple | None) -> tuple:
    """(order, errors, parts, bodies) of a Kafka produce: each partition's batches as
    raftlog batches, or its error. Pure (no node state): may run in a worker thread."""
    errors, parts, bodies, order = {}, [], [], []
    for t in body["topic_data"]:
        for p in t["partition_data"]:
            key = (t["name"], p["index"])
            order.append(key)
            if denied is not None:  # refused before a byte is decompressed
                errors[key] = denied
            elif p["index"] < 0:
                errors[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {p['index']}")
            else:
                try:
                    # (transactional batches only in a transactional produce: each is
                    # verified with the coordinator before the append, KIP-890)
                    data, _n = kafka_batch.to_raftlog(
                        p["records"] or b"",
                        allow_transactional=body["transactional_id"] is not None)
                except CorruptRecordError as e:
                    errors[key] = (ErrorCode.CORRUPT_MESSAGE, str(e))
                    continue
                if not data:
                    errors[key] = (ErrorCode.CORRUPT_MESSAGE, "no records")
                    continue
                parts.append((key[0], key[1], len(data)))
                bodies.append(data)
    return order, errors, parts, bodies


def _produce_body(order: list, rows: list, errors: dict) -> dict:
    """Produce response: a row per partition of the request, grouped by topic in
    request order; ``rows`` are the broker's results, ``errors`` the edge's own."""
    results = {(r.topic, r.partition): r for r in rows}
    by_topic: dict = {}
    for key in order:
        r = results.get(key)
        if r is not None:
            row = {"index": key[1], "error_code": to_kafka(r.error), "base_offset": r.base_offset,
                   "log_append_time_ms": r.log_append_time_ms, "log_start_offset": -1,
                   "error_message": r.message or None}
        else:
            code, msg = errors[key]
            row = {"index": key[1], "error_code": _E[code], "base_offset": -1,
                   "log_append_time_ms": -1, "log_start_offset": -1, "error_message": msg}
        by_topic.setdefault(key[0], []).append(row)
    return {"responses": [{"name": n, "partition_responses": rows}
                          for n, rows in by_topic.items()], "throttle_time_ms": 0}


def _subscription_bytes(protocol_type, metadata) -> bytes:
    if protocol_type == CONSUMER:
        return cp.subscription_to_kafka(metadata)
    return _as_bytes(metadata)


def _assignment_bytes(protocol_type, assignment) -> bytes:
    if protocol_type == CONSUMER:
        return cp.assignment_to_kafka(assignment)
    return _as_bytes(assignment)


def _as_bytes(x) -> bytes:
    """Group metadata and assignments are opaque bytes to Kafka clients; a raftlog
    client's may be other CBOR values, which a Kafka client cannot read anyway."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if x is None:
        return b""
    import cbor2

    return cbor2.dumps(x)


def _error_row(partition: int, code: int) -> dict:
    return {"partition_index": partition, "error_code": code, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": None}


def _by_topic(named: list) -> dict:
    out: dict = {}
    for x in named:
        out.setdefault(x[0], []).append(x)
    return out


def commit_offsets(body: dict) -> tuple[list, set]:
    """(offsets as the native OFFSET_COMMIT / TXN_OFFSET_COMMIT take them, the
    (topic, partition) pairs refused: a negative partition or offset) of a Kafka
    OffsetCommit or TxnOffsetCommit body."""
    offsets, bad = [], set()
    for t in body["topics"]:
        for p in t["partitions"]:
            if p["partition_index"] < 0 or p["committed_offset"] < 0:
                bad.add((t["name"], p["partition_index"]))
            else:
                offsets.append((t["name"], p["partition_index"], p["committed_offset"],
                                p["committed_metadata"], p.get("committed_leader_epoch", -1)))
    return offsets, bad


def commit_answer(body: dict, bad: set, whole: int | None, codes: dict) -> dict:
    """A Kafka OffsetCommit / TxnOffsetCommit answer: per partition of the request,
    INVALID_REQUEST for the ``bad`` ones, else the whole request's error ``whole``, else
    its code in ``codes`` (0 when absent)."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": (_E[ErrorCode.INVALID_REQUEST]
                            if (t["name"], p["partition_index"]) in bad
                            else whole if whole is not None
                            else codes.get((t["name"], p["partition_index"]), 0))}
            for p in t["partitions"]]} for t in body["topics"]]}
