"""The raftlog wire protocol, sans-IO (h11 style): bytes in, events out; events in, bytes out.

Frame layout (little-endian)::

    u32 frame_length     bytes after this field
    u32 header_length    bytes of the CBOR header that follows
    CBOR header          a map; requests {"api", "v", "id", ...fields}; responses {"id", "error", ...}
    raw body             frame_length - 4 - header_length bytes (record batches, never CBOR-wrapped)

One decoder serves the trio node, the blocking client, the tests and the fuzzer:
``receive_data(bytes)`` then ``next_frame()`` until it returns ``None`` (need more
data). Requests are validated against per-API field tables (:data:`REQUEST_SCHEMAS`);
a request that parses as a frame but has bad fields raises :class:`BadRequest`,
which carries the correlation id so the node answers with an error instead of
closing. Framing errors raise :class:`RemoteProtocolError`: the connection is
closed, since there is no way to find the next frame.
"""

from __future__ import annotations

import collections
import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import cbor2

from raftlog import limits as L
from raftlog.cbor_scan import TooManyEntries, check_entries
from raftlog.errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from raftlog.framing import FrameBuffer

PREFIX = struct.Struct("<II")
PREFIX_SIZE = PREFIX.size
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
MAX_HEADER_BYTES = 16 * 1024 * 1024


class Api(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    CREATE_TOPICS = 4
    DELETE_TOPICS = 5
    API_VERSIONS = 6
    DESCRIBE_CLUSTER = 7
    CREATE_PARTITIONS = 8
    ALTER_CONFIGS = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    SYNC_GROUP = 12
    HEARTBEAT = 13
    LEAVE_GROUP = 14
    OFFSET_COMMIT = 15
    OFFSET_FETCH = 16
    LIST_GROUPS = 17
    DESCRIBE_GROUPS = 18
    DELETE_GROUPS = 19
    INIT_PRODUCER_ID = 20
    OFFSETS_FOR_LEADER_EPOCH = 21
    ELECT_LEADERS = 22
    ALTER_PARTITION = 23
    BROKER_HEARTBEAT = 24
    ALTER_PARTITION_REASSIGNMENTS = 30
    LIST_PARTITION_REASSIGNMENTS = 31
    UNREGISTER_BROKER = 32
    DESCRIBE_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35  # (Kafka's key)
    DESCRIBE_QUORUM = 55  # (Kafka's key): the metadata quorum as this voter sees it
    # Security (issue 19): SASL before any other API on a SASL listener, then admin.
    SASL_HANDSHAKE = 40
    SASL_AUTHENTICATE = 41
    DESCRIBE_USER_SCRAM_CREDENTIALS = 42
    ALTER_USER_SCRAM_CREDENTIALS = 43
    DESCRIBE_ACLS = 44
    CREATE_ACLS = 45
    DELETE_ACLS = 46
    # Admin (issue 37)
    OFFSET_DELETE = 47  # (Kafka's key)
    DELETE_RECORDS = 48
    # Transactions (issue 33); Kafka's keys 24-27 and 29 are taken natively
    ADD_PARTITIONS_TO_TXN = 25
    ADD_OFFSETS_TO_TXN = 26
    END_TXN = 27
    WRITE_TXN_MARKERS = 28
    TXN_OFFSET_COMMIT = 29
    # Operating transactions (issue #33; Kafka's keys, KIP-664)
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# Special timestamps of ListOffsets, as Kafka.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
#: the record with the largest timestamp (KIP-734)
MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame: the header map and the raw body."""

    header: dict
    body: bytes


@dataclass(frozen=True, slots=True)
class Request:
    api: Api
    version: int
    id: int
    fields: dict
    body: bytes


class BadRequest(Exception):
    """A well-framed request with bad contents: answer with ``code``, keep the connection."""

    def __init__(self, request_id: int, code: ErrorCode, message: str, api: int | None = None):
        super().__init__(f"{code.name}: {message}")
        self.request_id = request_id
        self.code = code
        self.message = message
        self.api = api


# --------------------------------------------------------------------------- framing


def encode_frame(header: dict, body: bytes = b"") -> bytes:
    """A whole frame as one bytes object."""
    h = cbor2.dumps(header)
    return PREFIX.pack(4 + len(h) + len(body), len(h)) + h + body


def encode_frame_head(header: dict, body_length: int) -> bytes:
    """The frame up to (not including) a body of ``body_length`` bytes sent separately
    (for example with ``os.sendfile``)."""
    h = cbor2.dumps(header)
    return PREFIX.pack(4 + len(h) + body_length, len(h)) + h


#: A request header's CBOR may hold this many array elements and map pairs in all
#: (limits.py): checked while reading it, before cbor2 builds anything.
REQUEST_HEADER_ENTRIES_MAX = L.ENTRIES_PER_REQUEST_MAX * L.CBOR_ITEMS_PER_ENTRY_MAX
#: Headers up to this size are decoded without that walk (cbor2 takes well under a
#: millisecond for them, and they cannot hold many entries).
SCAN_HEADER_BYTES_MIN = 64 * 1024


class FrameDecoder(FrameBuffer):
    """Incremental frame decoder. Never raises anything but RemoteProtocolError.

    ``entries_max`` (the server's: REQUEST_HEADER_ENTRIES_MAX; None for responses): a
    header over SCAN_HEADER_BYTES_MIN holding more CBOR entries is refused before it is
    decoded."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 entries_max: int | None = None):
        assert max_frame_bytes > PREFIX_SIZE
        super().__init__(max_frame_bytes)
        self.entries_max = entries_max
        self._framed = False  # a frame was decoded (errors after it carry no guess)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None when more data is needed."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        (length,) = struct.unpack_from("<I", buf, pos)
        if length > self.max_frame_bytes:
            raise RemoteProtocolError(
                f"frame of {length} bytes exceeds the maximum of {self.max_frame_bytes} "
                f"({self.limit_name}){self._hint()}"
            )
        if length < 4:
            raise RemoteProtocolError(f"frame length {length} is shorter than its header "
                                      f"length field{self._hint()}")
        end = pos + 4 + length
        if len(buf) < end:
            return None
        (hlen,) = struct.unpack_from("<I", buf, pos + 4)
        if hlen > length - 4 or hlen > MAX_HEADER_BYTES or hlen == 0:
            raise RemoteProtocolError(f"header length {hlen} does not fit frame of {length} "
                                      f"bytes{self._hint()}")
        hstart = pos + PREFIX_SIZE
        if self.entries_max is not None and hlen > SCAN_HEADER_BYTES_MIN:
            try:
                with memoryview(buf) as view:
                    check_entries(view[hstart : hstart + hlen], self.entries_max)
            except TooManyEntries as e:
                raise RemoteProtocolError(f"request header: {e}") from None
        try:
            with memoryview(buf) as view:
                header = cbor2.loads(view[hstart : hstart + hlen])
        except Exception as e:  # cbor2 raises several types on garbage
            raise RemoteProtocolError(f"frame header is not valid CBOR: {e}") from None
        if not isinstance(header, dict):
            raise RemoteProtocolError(f"frame header is a {type(header).__name__}, not a map")
        with memoryview(buf) as view:
            body = bytes(view[hstart + hlen : end])
        self._consumed(end)
        self._framed = True
        return Frame(header, body)

    def _hint(self) -> str:
        """For an error in the connection's first frame: what the peer speaks instead,
        when its first bytes say (a client pointed at the Raft port or an HTTP server)."""
        if self._framed:
            return ""
        from .wire_sniff import foreign_hint

        hint = foreign_hint(self.head(16))
        return f": {hint}" if hint else ""


# --------------------------------------------------------------------------- field tables
# A validator takes a value and returns it (possibly normalised) or raises ValueError.


def _int(v):
    if type(v) is not int:
        raise ValueError("must be an integer")
    return v


def _nonneg(v):
    if type(v) is not int or v < 0:
        raise ValueError("must be a non-negative integer")
    return v


def _str(v):
    if type(v) is not str:
        raise ValueError("must be a string")
    return v


def _bool(v):
    if type(v) is not bool:
        raise ValueError("must be a boolean")
    return v


def _one_of(*allowed):
    def check(v):
        if type(v) is not int or v not in allowed:
            raise ValueError(f"must be one of {list(allowed)}")
        return v

    return check


#: FETCH ``session`` values
FETCH_SESSION_FULL = 1
FETCH_SESSION_INCREMENTAL = 2


def _opt(f):
    def check(v):
        return None if v is None else f(v)

    return check


def _list(f, max_len: int = L.ENTRIES_PER_REQUEST_MAX):
    def check(v):
        if type(v) is not list:
            raise ValueError("must be a list")
        if len(v) > max_len:
            raise ValueError(f"has more than {max_len} entries")
        return [f(x) for x in v]

    return check


def _tuple(*fs):
    n = len(fs)

    def bad():
        return ValueError(f"must be a list of {n} fields")

    if n == 3:  # the hot shapes (produce and fetch partitions) unrolled: no generator
        f0, f1, f2 = fs

        def check3(v):
            if type(v) is not list or len(v) != 3:
                raise bad()
            return (f0(v[0]), f1(v[1]), f2(v[2]))

        return check3
    if n == 5:
        f0, f1, f2, f3, f4 = fs

        def check5(v):
            if type(v) is not list or len(v) != 5:
                raise bad()
            return (f0(v[0]), f1(v[1]), f2(v[2]), f3(v[3]), f4(v[4]))

        return check5

    def check(v):
        if type(v) is not list or len(v) != n:
            raise bad()
        return tuple([f(x) for f, x in zip(fs, v)])

    return check


def _str_map(v):
    if type(v) is not dict:
        raise ValueError("must be a map of string to string")
    out = {}
    for k, x in v.items():
        if type(k) is not str or not (x is None or type(x) in (str, int, float, bool)):
            raise ValueError("must be a map of string to string")
        out[k] = None if x is None else str(x)
    return out


def _any(v):
    return v


def _bytes(v):
    if type(v) is not bytes:
        raise ValueError("must be bytes")
    return v


def _record(**fields):
    """A map with the given fields (each a (validator, default) pair; default ... = required)."""

    def check(v):
        if type(v) is not dict:
            raise ValueError("must be a map")
        return _apply_fields(fields, v, "")

    return check


REQUIRED = ...


def _apply_fields(table: dict, given: dict, prefix: str) -> dict:
    out = {}
    for name, (check, default) in table.items():
        if name in given:
            try:
                out[name] = check(given[name])
            except ValueError as e:
                raise ValueError(f"field {prefix}{name!r} {e}") from None
        elif default is REQUIRED:
            raise ValueError(f"field {prefix}{name!r} is required")
        else:
            out[name] = default
    return out


_TOPIC = _str
#: A client id longer than this is refused (it is part of member ids, kept per member).
CLIENT_ID_MAX_CHARS = 1024


def _client_id(v):
    if type(v) is not str:
        raise ValueError("must be a string")
    if len(v) > CLIENT_ID_MAX_CHARS:
        raise ValueError(f"is longer than {CLIENT_ID_MAX_CHARS} characters")
    return v


_SASL_BYTES_MAX = 64 * 1024
# An ACL binding: [principal, resource type, name, pattern type, operation, permission]
_ACL = _tuple(_str, _str, _str, _str, _str, _str)
_ACL_FILTER = {
    "principal": (_opt(_str), None),
    "resource_type": (_opt(_str), None),
    "resource_name": (_opt(_str), None),
    "pattern_type": (_opt(_str), None),
    "operation": (_opt(_str), None),
    "permission": (_opt(_str), None),
}


def _sasl_bytes(v):
    if type(v) is not bytes or len(v) > _SASL_BYTES_MAX:
        raise ValueError(f"must be at most {_SASL_BYTES_MAX} bytes")
    return v
# Produce partitions: [topic, partition, body_length]
_PRODUCE_PART = _tuple(_TOPIC, _nonneg, _nonneg)
# Fetch partitions: [topic, partition, fetch_offset, partition_max_bytes, current_leader_epoch]
_FETCH_PART = _tuple(_TOPIC, _nonneg, _int, _nonneg, _int)
# ListOffsets partitions: [topic, partition, timestamp (-1 latest, -2 earliest)]
_LIST_PART = _tuple(_TOPIC, _nonneg, _int)

REQUEST_SCHEMAS: dict[Api, dict[str, tuple[Callable[[Any], Any], Any]]] = {
    Api.API_VERSIONS: {},
    Api.PRODUCE: {
        # a transactional producer's: its batches' partitions are verified to be in
        # its ongoing transaction before they are appended (KIP-890)
        "transactional_id": (_opt(_str), None),
        "acks": (_int, 1),
        "timeout_ms": (_nonneg, 30_000),
        "parts": (_list(_PRODUCE_PART, L.PARTITIONS_PER_PRODUCE_MAX), REQUIRED),
    },
    Api.FETCH: {
        "replica_id": (_int, -1),
        "max_wait_ms": (_nonneg, 500),
        "min_bytes": (_nonneg, 1),
        "max_bytes": (_nonneg, 50 * 1024 * 1024),
        "parts": (_list(_FETCH_PART, L.PARTITIONS_PER_FETCH_MAX), REQUIRED),
        # A follower's fetch session (KIP-227's idea, one per connection): 0 none,
        # FETCH_SESSION_FULL starts one with ``parts``, FETCH_SESSION_INCREMENTAL
        # names only what changed (``parts`` upserted, ``forgotten`` dropped) and the
        # answer holds only partitions with news. See node/fetch_session.py.
        "session": (_one_of(0, FETCH_SESSION_FULL, FETCH_SESSION_INCREMENTAL), 0),
        # 0 read_uncommitted (up to the high watermark), 1 read_committed (up to the
        # last stable offset, with the aborted transactions of the range)
        "isolation_level": (_one_of(0, 1), 0),
        "forgotten": (_list(_tuple(_TOPIC, _nonneg), L.PARTITIONS_PER_FETCH_MAX), []),
        # A follower's flushed offsets (#34, durable acknowledgement): [topic, partition,
        # flushed offset] of every partition named in ``parts`` and of any other whose
        # flushed offset moved since it last told. Absent (None) from a node older than
        # #34 (and ignored by one): its fetch offsets then stand for what it has on disk.
        "flushed": (_opt(_list(_tuple(_TOPIC, _nonneg, _int), L.PARTITIONS_PER_FETCH_MAX)),
                    None),
        # A consumer's fetch session (KIP-227's, as on the Kafka listener and on the
        # same code, node/consumer_fetch_session.py): ``session_epoch`` 0 opens one
        # (closing ``session_id`` if any) with ``parts``; later fetches send the id the
        # answer header gave (``session_id``) and the next epoch, name only partitions
        # whose offset or limits changed, drop some with ``forgotten``, and get only
        # rows with news. The defaults (0, -1) -- an older client's -- fetch without one.
        "session_id": (_int, 0),
        "session_epoch": (_int, -1),
    },
    Api.LIST_OFFSETS: {
        "parts": (_list(_LIST_PART, L.ENTRIES_PER_REQUEST_MAX), REQUIRED),
        # 1 (read_committed): LATEST_TIMESTAMP answers the last stable offset instead
        # of the high watermark (Kafka's ListOffsets v2+)
        "isolation_level": (_one_of(0, 1), 0),
    },
    Api.METADATA: {
        "topics": (_opt(_list(_TOPIC, L.TOPICS_PER_REQUEST_MAX)), None),
        "include_configs": (_bool, False),
        # (Kafka's: an unknown topic is created only when this and the node's
        # auto.create.topics.enable are true; the admin client sends false)
        "allow_auto_topic_creation": (_bool, True),
    },
    Api.CREATE_TOPICS: {
        "topics": (
            _list(
                _record(
                    name=(_str, REQUIRED),
                    partitions=(_int, 1),
                    replication_factor=(_int, 1),
                    config=(_str_map, {}),
                    # each partition's replica broker ids (then partitions and
                    # replication_factor follow from them); None: placed by the node
                    assignments=(_opt(_list(_list(_int, 64), 10_000)), None),
                ),
                1000,
            ),
            REQUIRED,
        ),
        "timeout_ms": (_nonneg, 30_000),
        "validate_only": (_bool, False),
    },
    Api.DELETE_TOPICS: {"names": (_list(_str, 1000), REQUIRED), "timeout_ms": (_nonneg, 30_000)},
    Api.DESCRIBE_CLUSTER: {},
    Api.CREATE_PARTITIONS: {
        "topic": (_str, REQUIRED),
        "count": (_int, REQUIRED),
        "timeout_ms": (_nonneg, 30_000),
        # the replicas of each new partition (None: placed by the controller)
        "assignments": (_opt(_list(_list(_int, 64), 10_000)), None),
        "validate_only": (_bool, False),
    },
    Api.ALTER_CONFIGS: {
        "topic": (_str, REQUIRED),
        # key -> value to set, or None to remove
        "config": (_str_map, REQUIRED),
        "timeout_ms": (_nonneg, 30_000),
        # True: keys left out of ``config`` are removed (Kafka's AlterConfigs)
        "replace": (_bool, False),
        # [key, op, value]: op "set", "delete", "append" or "subtract" (Kafka's
        # IncrementalAlterConfigs), applied after ``config``
        "ops": (_list(_tuple(_str, _str, _opt(_str)), 1000), []),
        "validate_only": (_bool, False),
    },
    # topic: that topic's configs; None: the answering node's (its topic defaults)
    Api.DESCRIBE_CONFIGS: {"topic": (_opt(_str), None)},
    Api.OFFSETS_FOR_LEADER_EPOCH: {
        "replica_id": (_int, -1),
        # [topic, partition, leader_epoch]
        "parts": (_list(_tuple(_TOPIC, _nonneg, _int), L.ENTRIES_PER_REQUEST_MAX), REQUIRED),
    },
    Api.ELECT_LEADERS: {"parts": (_opt(_list(_tuple(_TOPIC, _nonneg))), None)},
    # parts: [topic, partition, target replicas] ([] cancels); throttle: bytes/s, 0 = none
    Api.ALTER_PARTITION_REASSIGNMENTS: {
        "parts": (_list(_tuple(_TOPIC, _nonneg, _list(_nonneg, 100)), 100_000), REQUIRED),
        "throttle": (_nonneg, 0),
        "timeout_ms": (_nonneg, 30_000),
    },
    Api.LIST_PARTITION_REASSIGNMENTS: {"parts": (_opt(_list(_tuple(_TOPIC, _nonneg))), None)},
    Api.UNREGISTER_BROKER: {"broker_id": (_nonneg, REQUIRED), "timeout_ms": (_nonneg, 30_000)},
    # topics: only these (None: every partition the node hosts)
    Api.DESCRIBE_LOG_DIRS: {"topics": (_opt(_list(_TOPIC, L.ENTRIES_PER_REQUEST_MAX)), None)},
    Api.DESCRIBE_QUORUM: {},
    Api.INIT_PRODUCER_ID: {
        "timeout_ms": (_nonneg, 30_000),
        # a transactional producer's id and transaction.timeout.ms; producer_id/epoch
        # its current ones (KIP-360), -1 for a new instance
        "transactional_id": (_opt(_str), None),
        "transaction_timeout_ms": (_int, 60_000),
        "producer_id": (_int, -1),
        "producer_epoch": (_int, -1),
    },
    # key_type 0: a group, 1: a transactional id
    Api.FIND_COORDINATOR: {"key": (_str, REQUIRED), "key_type": (_one_of(0, 1), 0)},
    Api.ADD_PARTITIONS_TO_TXN: {
        "transactional_id": (_str, REQUIRED),
        "producer_id": (_int, REQUIRED),
        "producer_epoch": (_int, REQUIRED),
        "parts": (_list(_tuple(_TOPIC, _nonneg), L.ENTRIES_PER_REQUEST_MAX), REQUIRED),
        # KIP-890: only check the partitions are in the ongoing transaction
        "verify_only": (_bool, False),
    },
    Api.ADD_OFFSETS_TO_TXN: {
        "transactional_id": (_str, REQUIRED),
        "producer_id": (_int, REQUIRED),
        "producer_epoch": (_int, REQUIRED),
        "group": (_str, REQUIRED),
    },
    Api.END_TXN: {
        "transactional_id": (_str, REQUIRED),
        "producer_id": (_int, REQUIRED),
        "producer_epoch": (_int, REQUIRED),
        "commit": (_bool, REQUIRED),
    },
    # markers: [producer id, producer epoch, coordinator epoch, commit, [[topic, p], ...]]
    Api.WRITE_TXN_MARKERS: {
        "markers": (_list(_tuple(_int, _int, _int, _bool,
                                 _list(_tuple(_TOPIC, _nonneg), L.ENTRIES_PER_REQUEST_MAX)),
                          1000), REQUIRED),
        "timeout_ms": (_nonneg, 30_000),
    },
    Api.TXN_OFFSET_COMMIT: {
        "transactional_id": (_str, REQUIRED),
        "producer_id": (_int, REQUIRED),
        "producer_epoch": (_int, REQUIRED),
        "group": (_str, REQUIRED),
        "generation": (_int, -1),
        "member_id": (_str, ""),
        "group_instance_id": (_opt(_str), None),
        # [topic, partition, offset, metadata]
        "offsets": (_list(_tuple(_TOPIC, _nonneg, _nonneg, _opt(_str)), 100_000), REQUIRED),
    },
    # the producers of each [topic, partition], at its leader (Kafka's DescribeProducers)
    Api.DESCRIBE_PRODUCERS: {
        "parts": (_list(_tuple(_TOPIC, _nonneg), L.ENTRIES_PER_REQUEST_MAX), REQUIRED),
    },
    # at each id's coordinator; an id it does not coordinate: NOT_COORDINATOR in its row
    Api.DESCRIBE_TRANSACTIONS: {"transactional_ids": (_list(_str, 1000), REQUIRED)},
    # the transactions of the ``__transaction_state`` partitions this node leads;
    # filters: states (Kafka's names), producer ids, open longer than duration_ms (-1 any)
    Api.LIST_TRANSACTIONS: {
        "states": (_list(_str, 16), []),
        "producer_ids": (_list(_int, L.ENTRIES_PER_REQUEST_MAX), []),
        "duration_ms": (_int, -1),
    },
    Api.JOIN_GROUP: {
        "group": (_str, REQUIRED),
        "member_id": (_str, ""),
        # shown by DescribeGroups (the node adds the member's host from the connection)
        "client_id": (_client_id, ""),
        "group_instance_id": (_opt(_str), None),
        "session_timeout_ms": (_nonneg, L.ENTRIES_PER_REQUEST_MAX),
        "rebalance_timeout_ms": (_nonneg, 300_000),
        "protocols": (_list(_tuple(_str, _any), 16), REQUIRED),
    },
    Api.SYNC_GROUP: {
        "group": (_str, REQUIRED),
        "generation": (_int, REQUIRED),
        "member_id": (_str, REQUIRED),
        # a static member's (KIP-345): a replaced one gets FENCED_INSTANCE_ID
        "group_instance_id": (_opt(_str), None),
        "assignments": (_list(_tuple(_str, _any), L.ENTRIES_PER_REQUEST_MAX), []),
    },
    Api.HEARTBEAT: {
        "group": (_str, REQUIRED),
        "generation": (_int, REQUIRED),
        "member_id": (_str, REQUIRED),
        "group_instance_id": (_opt(_str), None),
    },
    Api.LEAVE_GROUP: {"group": (_str, REQUIRED), "member_id": (_str, REQUIRED),
                      "group_instance_id": (_opt(_str), None)},
    Api.OFFSET_COMMIT: {
        "group": (_str, REQUIRED),
        "generation": (_int, -1),
        "member_id": (_str, ""),
        "group_instance_id": (_opt(_str), None),
        # [topic, partition, offset, metadata]
        "offsets": (_list(_tuple(_TOPIC, _nonneg, _nonneg, _opt(_str)), 100_000), REQUIRED),
    },
    Api.OFFSET_FETCH: {
        "group": (_str, REQUIRED),
        "parts": (_opt(_list(_tuple(_TOPIC, _nonneg))), None),
    },
    Api.LIST_GROUPS: {},
    Api.DESCRIBE_GROUPS: {"groups": (_list(_str, 1000), REQUIRED)},
    Api.DELETE_GROUPS: {"groups": (_list(_str, 1000), REQUIRED)},
    # the committed offsets of [topic, partition] to delete
    # [topic, partition, offset]: records before offset deleted (-1: the high watermark)
    Api.DELETE_RECORDS: {"parts": (_list(_tuple(_TOPIC, _nonneg, _int), 100_000), REQUIRED),
                         "timeout_ms": (_nonneg, 30_000)},
    Api.OFFSET_DELETE: {"group": (_str, REQUIRED),
                        "parts": (_list(_tuple(_TOPIC, _nonneg), 100_000), REQUIRED)},
    Api.ALTER_PARTITION: {"payload": (_any, REQUIRED)},
    Api.BROKER_HEARTBEAT: {"broker_id": (_nonneg, REQUIRED), "incarnation_id": (_str, REQUIRED)},
    Api.SASL_HANDSHAKE: {"mechanism": (_str, REQUIRED)},
    Api.SASL_AUTHENTICATE: {"auth": (_sasl_bytes, REQUIRED)},
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": (_opt(_list(_str, L.ENTRIES_PER_REQUEST_MAX)), None)},
    # upsertions: [user, mechanism, salt, iterations, stored key, server key] (the client
    # derives them: the password never leaves it); deletions: [user, mechanism]
    Api.ALTER_USER_SCRAM_CREDENTIALS: {
        "upsertions": (_list(_tuple(_str, _str, _bytes, _nonneg, _bytes, _bytes), 1000), []),
        "deletions": (_list(_tuple(_str, _str), 1000), []),
        "timeout_ms": (_nonneg, 30_000),
    },
    Api.DESCRIBE_ACLS: dict(_ACL_FILTER),
    Api.CREATE_ACLS: {"acls": (_list(_ACL, L.ENTRIES_PER_REQUEST_MAX), REQUIRED), "timeout_ms": (_nonneg, 30_000)},
    Api.DELETE_ACLS: {**_ACL_FILTER, "timeout_ms": (_nonneg, 30_000)},
}

#: (min, max) version of every API this codec knows.
API_VERSIONS: dict[Api, tuple[int, int]] = {api: (0, 0) for api in REQUEST_SCHEMAS}


# --------------------------------------------------------------------------- response parts
# The other direction. A response header is {"id", "error", "message", ...fields}; its
# repeated parts are positional arrays on the wire (as the request parts above). Each
# has one type here, built by the node and read by every peer by name: a NamedTuple is
# frozen, named and *is* its wire form (cbor2 writes it as an array), so building a
# response costs no conversion. ``ClientConnection`` turns the arrays of every
# response back into these types (:func:`parse_response`), checking their shape.


class ProducePartResult(NamedTuple):
    """PRODUCE ``parts``: one per partition of the request, in request order."""

    topic: str
    partition: int
    error: int
    base_offset: int  # -1 on error
    log_append_time_ms: int  # -1: the records keep their CreateTime
    message: str = ""


class FetchPartHeader(NamedTuple):
    """FETCH ``parts``: ``length`` bytes of record batches of this partition follow in
    the body, after the preceding parts' bytes."""

    topic: str
    partition: int
    error: int
    high_watermark: int  # -1 on error
    log_start_offset: int
    length: int
    message: str = ""
    #: read_committed (isolation_level 1): the last stable offset, and [producer id,
    #: first offset] of the aborted transactions the returned batches overlap
    last_stable_offset: int = -1
    aborted: list = []


class TxnMarkerResult(NamedTuple):
    """WRITE_TXN_MARKERS ``results``: one per (marker, partition)."""

    producer_id: int
    topic: str
    partition: int
    error: int
    message: str = ""


class ProducerRow(NamedTuple):
    """A DESCRIBE_PRODUCERS partition's ``producers``: one producer the leader tracks."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none retained
    last_timestamp: int  # ms, -1 unknown
    coordinator_epoch: int  # of the last marker, -1 none yet
    current_txn_start_offset: int  # first offset of its open transaction, -1 none


class ProducersPart(NamedTuple):
    """DESCRIBE_PRODUCERS ``parts``: one per partition asked, in request order."""

    topic: str
    partition: int
    error: int
    producers: list = []  # ProducerRow
    message: str = ""


class TxnDescriptionRow(NamedTuple):
    """DESCRIBE_TRANSACTIONS ``transactions``: one per id asked, in request order."""

    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = -1
    start_ms: int = -1  # when the open transaction began (coordinator clock), -1 none
    partitions: list = []  # [[topic, partition], ...]
    message: str = ""


class TxnListingRow(NamedTuple):
    """LIST_TRANSACTIONS ``transactions``."""

    transactional_id: str
    producer_id: int
    state: str
    start_ms: int = -1  # when the open transaction began (coordinator clock), -1 none


class ListOffsetsPartResult(NamedTuple):
    """LIST_OFFSETS ``parts``."""

    topic: str
    partition: int
    error: int
    offset: int
    timestamp: int


class EpochEndOffset(NamedTuple):
    """OFFSETS_FOR_LEADER_EPOCH ``parts``: the largest epoch <= the one asked and where
    it ends; (-1, -1) when no such epoch is known."""

    topic: str
    partition: int
    error: int
    leader_epoch: int
    end_offset: int


class ReassignmentRow(NamedTuple):
    """LIST_PARTITION_REASSIGNMENTS ``reassignments``: one partition being moved."""

    topic: str
    partition: int
    replicas: tuple  # during the move: target + the old replicas not in it
    adding: tuple
    removing: tuple
    isr: tuple
    leader: int
    throttle: int  # bytes/s for the replicas being added, 0 = none


class LogDirPartition(NamedTuple):
    """DESCRIBE_LOG_DIRS ``partitions``: one replica hosted by the answering node."""

    topic: str
    partition: int
    size_bytes: int  # the segments' bytes on disk
    segments: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader: int  # as this node knows it; == the node's id when it leads
    leader_epoch: int
    #: as leader: [[follower id, its log end offset as last fetched (-1: unknown)], ...]
    followers: list = []


class BrokerRow(NamedTuple):
    """METADATA and DESCRIBE_CLUSTER ``brokers``."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


class PartitionMetadata(NamedTuple):
    """A METADATA topic's ``partitions``."""

    partition: int
    error: int
    leader: int  # -1: offline
    leader_epoch: int
    replicas: list
    isr: list
    offline_replicas: list


class TopicMetadata(NamedTuple):
    """METADATA ``topics`` (a map on the wire; ``config`` only when asked for)."""

    name: str
    error: int
    message: str = ""
    topic_id: str = ""
    partitions: list = []
    config: dict | None = None

    def to_wire(self) -> dict:
        d = {"name": self.name, "error": self.error, "message": self.message,
             "topic_id": self.topic_id, "partitions": list(self.partitions)}
        if self.config is not None:
            d["config"] = self.config
        return d

    @classmethod
    def from_wire(cls, v) -> TopicMetadata:
        if type(v) is not dict or type(v.get("name")) is not str:
            raise RemoteProtocolError(f"METADATA topic entry {v!r:.100} is not a topic map")
        return cls(v["name"], v.get("error", 0), v.get("message", ""), v.get("topic_id", ""),
                   _parts(PartitionMetadata, v.get("partitions") or []), v.get("config"))


class ConfigEntry(NamedTuple):
    """DESCRIBE_CONFIGS ``configs``: ``source`` is "topic" (set on the topic), "static"
    (set in the node's server.properties) or "default" (the built-in default)."""

    name: str
    value: str
    source: str


class NamedResult(NamedTuple):
    """CREATE_TOPICS and DELETE_TOPICS ``results`` (topics), DELETE_GROUPS (groups)."""

    name: str
    error: int
    message: str = ""


class PartitionResult(NamedTuple):
    """ELECT_LEADERS ``results`` and OFFSET_COMMIT ``parts``."""

    topic: str
    partition: int
    error: int
    message: str = ""


class DeleteRecordsResult(NamedTuple):
    """DELETE_RECORDS ``parts``: the partition's log start offset after the delete."""

    topic: str
    partition: int
    error: int
    low_watermark: int
    message: str = ""


class CommittedOffsetRow(NamedTuple):
    """OFFSET_FETCH ``parts``: ``offset`` -1 when the group committed none."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    #: the committed leader epoch (KIP-320), -1 unknown
    leader_epoch: int = -1


class GroupListing(NamedTuple):
    """LIST_GROUPS ``groups``."""

    group: str
    protocol_type: str
    state: str


class JoinMember(NamedTuple):
    """JOIN_GROUP ``members`` (sent to the group leader only)."""

    member_id: str
    group_instance_id: str | None
    metadata: Any


class GroupMemberRow(NamedTuple):
    """A DESCRIBE_GROUPS group's ``members``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: Any
    assignment: Any


class ApiVersionRange(NamedTuple):
    """API_VERSIONS ``apis``."""

    api: int
    min_version: int
    max_version: int


def _parts(cls, rows) -> list:
    """Rows of a positional part type, shape-checked. A row may carry more fields than
    this codec knows (a newer peer appends at the end): the extra ones are ignored."""
    if type(rows) is not list:
        raise RemoteProtocolError(f"{cls.__name__} rows are a {type(rows).__name__}, not a list")
    n, need = len(cls._fields), len(cls._fields) - len(cls._field_defaults)
    make = cls._make
    out = []
    for row in rows:
        if type(row) is not list or len(row) < need:
            raise RemoteProtocolError(f"{cls.__name__} row {row!r:.100} does not have "
                                      f"the fields {', '.join(cls._fields[:need])}")
        out.append(make(row) if len(row) == n else cls(*row[:n]))
    return out


def _group_descriptions(rows) -> list:
    if type(rows) is not list or any(type(g) is not dict for g in rows):
        raise RemoteProtocolError("DESCRIBE_GROUPS groups are not a list of maps")
    return [{**g, "members": _parts(GroupMemberRow, g.get("members") or [])} for g in rows]


def _producer_parts(rows) -> list:
    return [p._replace(producers=_parts(ProducerRow, p.producers or []))
            for p in _parts(ProducersPart, rows)]


def _topic_rows(rows) -> list:
    if type(rows) is not list:
        raise RemoteProtocolError("METADATA topics are not a list")
    return [TopicMetadata.from_wire(t) for t in rows]


def _rows_of(cls):
    return lambda rows: _parts(cls, rows)


#: {api: {response field: reader}}: how :func:`parse_response` types a response.
RESPONSE_PARTS: dict[Api, dict[str, Callable[[Any], Any]]] = {
    Api.API_VERSIONS: {"apis": _rows_of(ApiVersionRange)},
    Api.PRODUCE: {"parts": _rows_of(ProducePartResult)},
    Api.FETCH: {"parts": _rows_of(FetchPartHeader)},
    Api.LIST_OFFSETS: {"parts": _rows_of(ListOffsetsPartResult)},
    Api.METADATA: {"brokers": _rows_of(BrokerRow), "topics": _topic_rows},
    Api.DESCRIBE_CLUSTER: {"brokers": _rows_of(BrokerRow)},
    Api.CREATE_TOPICS: {"results": _rows_of(NamedResult)},
    Api.DELETE_TOPICS: {"results": _rows_of(NamedResult)},
    Api.OFFSETS_FOR_LEADER_EPOCH: {"parts": _rows_of(EpochEndOffset)},
    Api.ELECT_LEADERS: {"results": _rows_of(PartitionResult)},
    Api.ALTER_PARTITION_REASSIGNMENTS: {"results": _rows_of(PartitionResult)},
    Api.LIST_PARTITION_REASSIGNMENTS: {"reassignments": _rows_of(ReassignmentRow)},
    Api.DESCRIBE_LOG_DIRS: {"partitions": _rows_of(LogDirPartition)},
    Api.DESCRIBE_CONFIGS: {"configs": _rows_of(ConfigEntry)},
    Api.JOIN_GROUP: {"members": _rows_of(JoinMember)},
    Api.OFFSET_COMMIT: {"parts": _rows_of(PartitionResult)},
    Api.TXN_OFFSET_COMMIT: {"parts": _rows_of(PartitionResult)},
    Api.ADD_PARTITIONS_TO_TXN: {"parts": _rows_of(PartitionResult)},
    Api.WRITE_TXN_MARKERS: {"results": _rows_of(TxnMarkerResult)},
    Api.DESCRIBE_PRODUCERS: {"parts": _producer_parts},
    Api.DESCRIBE_TRANSACTIONS: {"transactions": _rows_of(TxnDescriptionRow)},
    Api.LIST_TRANSACTIONS: {"transactions": _rows_of(TxnListingRow)},
    Api.OFFSET_FETCH: {"parts": _rows_of(CommittedOffsetRow)},
    Api.LIST_GROUPS: {"groups": _rows_of(GroupListing)},
    Api.DESCRIBE_GROUPS: {"groups": _group_descriptions},
    Api.DELETE_GROUPS: {"results": _rows_of(NamedResult)},
    Api.OFFSET_DELETE: {"parts": _rows_of(PartitionResult)},
    Api.DELETE_RECORDS: {"parts": _rows_of(DeleteRecordsResult)},
    Api.ALTER_USER_SCRAM_CREDENTIALS: {"results": _rows_of(NamedResult)},
}


def parse_response(api: Api, header: dict) -> dict:
    """The response header of ``api`` with its parts typed (in place; returned).

    Raises:
        RemoteProtocolError: a part does not have its type's shape.
    """
    if header.get("error"):
        return header  # a whole-request error carries no parts
    for name, read in RESPONSE_PARTS.get(api, {}).items():
        rows = header.get(name)
        if rows is not None:
            header[name] = read(rows)
    return header


def encode_request(api: Api, request_id: int, fields: dict, body: bytes = b"", version: int = 0) -> bytes:
    """Encode a request frame. Raises LocalProtocolError for a bad field (our bug)."""
    try:
        checked = _apply_fields(REQUEST_SCHEMAS[api], fields, "")
    except (ValueError, KeyError) as e:
        raise LocalProtocolError(f"{Api(api).name} request: {e}") from None
    checked["api"] = int(api)
    checked["v"] = version
    checked["id"] = request_id
    return encode_frame(checked, body)


_API_BY_NUMBER: dict[int, Api] = {int(a): a for a in Api}


def parse_request(frame: Frame, supported: dict[Api, tuple[int, int]] | None = None) -> Request:
    """Validate a request frame against its field table.

    Raises:
        RemoteProtocolError: no usable correlation id: the caller must close.
        BadRequest: well-framed but unusable; answer with its code.
    """
    h = frame.header
    rid = h.get("id")
    if type(rid) is not int:
        raise RemoteProtocolError("request header has no integer 'id'")
    api_no, version = h.get("api"), h.get("v", 0)
    if type(api_no) is not int:
        raise BadRequest(rid, ErrorCode.INVALID_REQUEST, "request header has no integer 'api'")
    api = _API_BY_NUMBER.get(api_no)
    if api is None:
        raise BadRequest(rid, ErrorCode.UNKNOWN_API, f"unknown api {api_no}", api_no)
    versions = (supported or API_VERSIONS).get(api)
    if versions is None:
        raise BadRequest(rid, ErrorCode.UNKNOWN_API, f"api {api.name} is not served here", api_no)
    if type(version) is not int or not versions[0] <= version <= versions[1]:
        raise BadRequest(
            rid,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{api.name} version {version!r} not in supported range {versions}",
            api_no,
        )
    try:
        fields = _apply_fields(REQUEST_SCHEMAS[api], h, "")
    except ValueError as e:
        raise BadRequest(rid, ErrorCode.INVALID_REQUEST, f"{api.name}: {e}", api_no) from None
    return Request(api, version, rid, fields, frame.body)


def error_response(request_id: int, code: ErrorCode, message: str = "") -> dict:
    """The header of a whole-request error response."""
    return {"id": request_id, "error": int(code), "message": message}


def split_body(body: bytes, lengths: list[int]) -> list[bytes]:
    """Split a body into the per-partition slices its header announces.

    Raises ValueError when the lengths do not add up to the body.
    """
    if sum(lengths) != len(body):
        raise ValueError(f"partition lengths add up to {sum(lengths)}, body has {len(body)} bytes")
    out, pos = [], 0
    mv = memoryview(body)
    for n in lengths:
        out.append(mv[pos : pos + n])
        pos += n
    return out


class ClientConnection:
    """Client half: assigns correlation ids, pairs responses with requests in order.

    ``send_request`` returns the bytes to write and the id; feed received bytes to
    ``receive_data`` and take ``(request_id, header, body)`` from ``next_response``.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, max_in_flight: int = 1024):
        self._decoder = FrameDecoder(max_frame_bytes)
        self._next_id = 1
        self._in_flight: collections.deque[tuple[int, Api]] = collections.deque()
        self.max_in_flight = max_in_flight

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def send_request(self, api: Api, fields: dict, body: bytes = b"",
                     expect_response: bool = True) -> tuple[int, bytes]:
        """Encode a request; ``expect_response=False`` for PRODUCE with acks=0."""
        if len(self._in_flight) >= self.max_in_flight:
            raise LocalProtocolError(f"more than {self.max_in_flight} requests in flight")
        rid = self._next_id
        self._next_id = (rid + 1) & 0x7FFFFFFF or 1
        data = encode_request(api, rid, fields, body)
        if expect_response:
            self._in_flight.append((rid, api))
        return rid, data

    def receive_data(self, data: bytes) -> None:
        self._decoder.receive_data(data)

    def next_response(self) -> Frame | None:
        """The next response, its parts typed (:func:`parse_response`), or None."""
        frame = self._decoder.next_frame()
        if frame is None:
            return None
        rid = frame.header.get("id")
        if not self._in_flight or rid != self._in_flight[0][0]:
            raise RemoteProtocolError(
                f"response id {rid!r} does not match the oldest request in flight "
                f"{self._in_flight[0][0] if self._in_flight else None}"
            )
        _, api = self._in_flight.popleft()
        parse_response(api, frame.header)
        return frame
