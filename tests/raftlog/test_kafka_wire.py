"""The Kafka codec: round trips per API/version, kafka-python as an independent
encoder/decoder, and garbage that must raise only KafkaDecodeError."""

from __future__ import annotations

import base64
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.errors import ProtocolError
from raftlog.kafka import wire as kw
from raftlog.kafka.messages import ADVERTISED, SCHEMAS
from raftlog.kafka.wire import _fill_defaults

from .kafka_strategies import body_of

try:
    import kafka.protocol  # noqa: F401  (kafka-python: the independent codec of the cross-checks)

    HAVE_KAFKA_PYTHON = True
except ImportError:
    HAVE_KAFKA_PYTHON = False

CASES = [(key, kind, v) for key, lo, hi in ADVERTISED.values() for v in range(lo, hi + 1)
         for kind in ("request", "response")]
_SETTINGS = settings(max_examples=15, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _ids(case):
    key, kind, v = case
    return f"{kw.API_NAMES[key]}-{kind}-v{v}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
@_SETTINGS
@given(data=st.data())
def test_round_trip_every_api_and_version(case, data):
    key, kind, v = case
    value = data.draw(body_of(key, kind, v))
    encoded = kw.encode_body(key, v, kind, value)
    decoded = kw.decode_body(key, v, kind, encoded)
    expected = _fill_defaults(value, SCHEMAS[(key, kind)]["fields"], v)
    assert _only_version(decoded, key, kind, v) == expected


def _only_version(d, key, kind, v):
    """Drop the defaults decode adds for fields outside this version (nested too)."""
    return _strip(d, SCHEMAS[(key, kind)]["fields"], v)


def _strip(d, fields, v):
    out = {}
    for name, ftype, lo, hi, *_rest, sub in fields:
        if not lo <= v <= hi:
            continue
        x = d[name]
        if ftype == "[]struct" and x is not None:
            x = [_strip(e, sub, v) for e in x]
        elif ftype == "struct" and x is not None:
            x = _strip(x, sub, v)
        out[name] = x
    return out


# --------------------------------------------------------------------------- kafka-python


def _kp_class(key, kind):
    import kafka.protocol  # noqa: F401  (registers every message class)
    from kafka.protocol.api_message import ApiMessage

    want = SCHEMAS[(key, kind)]["name"]
    todo = list(ApiMessage.__subclasses__())
    while todo:
        c = todo.pop()
        todo.extend(c.__subclasses__())
        if c.__dict__.get("_json") is not None and c._json["name"] == want:
            return c
    pytest.skip(f"kafka-python has no {want}")


def _to_kp(container_cls, value, fields, v):
    """One of our dicts as kafka-python's DataContainer of that struct."""
    kwargs = {}
    kfields = container_cls._struct.fields
    for name, ftype, lo, hi, *_rest, sub in fields:
        if not lo <= v <= hi or name not in value or _kp_differs(name, ftype):
            continue
        x = value[name]
        if x is not None and ftype in ("[]struct", "struct"):
            dc = kfields[name].data_class
            x = ([_to_kp(dc, e, sub, v) for e in x] if ftype == "[]struct"
                 else _to_kp(dc, x, sub, v))
        elif x is not None and ftype == "uuid":
            x = uuid.UUID(bytes=bytes(x))
        kwargs[name] = x
    return container_cls(version=v, **kwargs)


def _from_kp(obj, fields, v):
    """kafka-python's decoded container as one of our dicts (attributes, not its
    to_dict(), which turns bytes into text)."""
    out = {}
    for name, ftype, lo, hi, *_rest, sub in fields:
        if not lo <= v <= hi:
            continue
        if _kp_differs(name, ftype):
            continue
        x = getattr(obj, name)
        if x is None and ftype == "uuid":
            x = bytes(16)  # kafka-python reads the zero uuid as None
        if x is not None and ftype == "[]struct":
            x = [_from_kp(e, sub, v) for e in x]
        elif x is not None and ftype == "struct":
            x = _from_kp(x, sub, v)
        elif x is not None and ftype == "uuid":
            x = x if isinstance(x, bytes) else x.bytes if isinstance(x, uuid.UUID) else _uuid_text(str(x))
        elif ftype in ("bytes", "records") and x is not None:
            x = bytes(x)
        out[name] = x
    return out


@pytest.mark.skipif(not HAVE_KAFKA_PYTHON, reason="kafka-python is not installed")
@pytest.mark.parametrize("case", CASES, ids=_ids)
@_SETTINGS
@given(data=st.data())
def test_kafka_python_reads_what_we_write_and_back(case, data):
    key, kind, v = case
    cls = _kp_class(key, kind)
    if v > cls.max_version:
        pytest.skip("kafka-python does not know this version")
    fields = SCHEMAS[(key, kind)]["fields"]
    value = _fill_defaults(data.draw(body_of(key, kind, v)), fields, v)
    if key == 18 and kind == "response":
        value["error_code"] = 0  # kafka-python reads an ApiVersions error as v0 (as it should)
    ours = kw.encode_body(key, v, kind, value)
    theirs = cls.decode(ours, version=v)
    assert _from_kp(theirs, fields, v) == _comparable(value, fields, v)
    back = _to_kp(cls, value, fields, v).encode(version=v)
    assert _from_kp(cls.decode(back, version=v), fields, v) == _comparable(value, fields, v)
    assert _comparable(kw.decode_body(key, v, kind, back), fields, v) == _comparable(value, fields, v)


def _kp_differs(name: str, ftype: str) -> bool:
    """kafka-python turns the authorized-operations bit fields into sets of names."""
    return ftype == "int32" and name.endswith("authorized_operations")


def _uuid_text(t: str) -> bytes:
    """A uuid as text: hex, or Kafka's url-safe base64 (Uuid.toString)."""
    try:
        return uuid.UUID(t).bytes
    except ValueError:
        return base64.urlsafe_b64decode(t + "==")


def _comparable(value, fields, v):
    """Our value without the fields kafka-python represents differently."""
    out = {}
    for name, ftype, lo, hi, *_rest, sub in fields:
        if not lo <= v <= hi or _kp_differs(name, ftype):
            continue
        x = value[name]
        if x is not None and ftype == "[]struct":
            x = [_comparable(e, sub, v) for e in x]
        elif x is not None and ftype == "struct":
            x = _comparable(x, sub, v)
        out[name] = x
    return out


# --------------------------------------------------------------------------- headers, frames


def test_request_header_and_frame_round_trip():
    frame = kw.encode_request(3, 12, 77, {"topics": None}, client_id="me")
    dec = kw.FrameDecoder()
    dec.receive_data(frame[:3])
    assert dec.next_frame() is None
    dec.receive_data(frame[3:])
    req = kw.decode_request(dec.next_frame())
    assert req.header == kw.RequestHeader(3, 12, 77, "me")
    assert req.body["topics"] is None


def test_api_versions_response_uses_header_v0_even_when_flexible():
    frame = kw.encode_response(18, 3, 5, {"error_code": 0, "api_keys": []})
    assert kw.response_header_version(18, 3) == 0
    assert struct.unpack_from(">i", frame, 4)[0] == 5
    assert kw.decode_response(18, 3, frame[4:]) == (5, kw.decode_body(18, 3, "response", frame[8:]))


def test_unsupported_api_or_version_carries_the_correlation_id():
    payload = struct.pack(">hhi", 9999, 0, 42) + b"\xff\xff"
    with pytest.raises(kw.UnsupportedRequest) as e:
        kw.decode_request(payload)
    assert e.value.correlation_id == 42
    payload = struct.pack(">hhi", 0, 99, 43) + b"\xff\xff"
    with pytest.raises(kw.UnsupportedRequest):
        kw.decode_request(payload)


def test_oversized_and_negative_frames_are_refused():
    dec = kw.FrameDecoder(max_frame_bytes=100)
    dec.receive_data(struct.pack(">i", 101))
    with pytest.raises(kw.KafkaDecodeError, match="max.frame.bytes"):
        dec.next_frame()
    dec = kw.FrameDecoder()
    dec.receive_data(struct.pack(">i", -5))
    with pytest.raises(kw.KafkaDecodeError):
        dec.next_frame()


@pytest.mark.parametrize("n,encoded", [(0, b"\x00"), (1, b"\x02"), (-1, b"\x01"),
                                       (300, b"\xd8\x04"), (-(2**31), b"\xff\xff\xff\xff\x0f")])
def test_varint_known_encodings(n, encoded):
    assert kw.varint(n) == encoded
    assert kw.Reader(encoded).varint() == n


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n):
    assert kw.Reader(kw.varlong(n)).varlong() == n


def test_lying_array_length_fails_before_allocating():
    body = struct.pack(">i", 2**31 - 1)  # Metadata v1 topics array of 2^31-1 entries
    with pytest.raises(kw.KafkaDecodeError, match="elements"):
        kw.decode_body(3, 1, "request", body)


def test_invalid_utf8_is_a_decode_error():
    body = struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe"
    with pytest.raises(kw.KafkaDecodeError, match="UTF-8"):
        kw.decode_body(3, 1, "request", body)


def test_trailing_bytes_are_a_decode_error():
    body = kw.encode_body(3, 1, "request", {"topics": []}) + b"x"
    with pytest.raises(kw.KafkaDecodeError, match="trailing"):
        kw.decode_body(3, 1, "request", body)


def test_a_request_with_trailing_bytes_is_read_as_a_broker_reads_it():
    """librdkafka 2.16's all-topics Metadata v12 (captured): three bytes after the last
    field, which a Kafka broker ignores; so do we."""
    payload = bytes.fromhex("0003000c0000000300077264 6b61666b6100000000000100 00".replace(" ", ""))
    req = kw.decode_request(payload)
    assert req.header.correlation_id == 3 and req.header.client_id == "rdkafka"
    assert req.body["topics"] is None and req.body["allow_auto_topic_creation"] is False


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "request"], ids=_ids)
@settings(max_examples=40, deadline=None)
@given(garbage=st.binary(max_size=200))
def test_garbage_raises_only_the_typed_error(case, garbage):
    key, _kind, v = case
    try:
        kw.decode_body(key, v, "request", garbage)
    except kw.KafkaDecodeError as e:
        assert isinstance(e, ProtocolError)


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=300))
def test_garbage_requests_raise_only_protocol_errors(garbage):
    try:
        kw.decode_request(garbage)
    except (kw.KafkaDecodeError, kw.UnsupportedRequest):
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_valid_requests_raise_only_the_typed_error(data):
    key, _kind, v = data.draw(st.sampled_from([c for c in CASES if c[1] == "request"]))
    frame = bytearray(kw.encode_request(key, v, 1, data.draw(body_of(key, "request", v))))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(4, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(frame)))
    try:
        kw.decode_request(bytes(frame[4:cut]))
    except (kw.KafkaDecodeError, kw.UnsupportedRequest):
        pass


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_fetch_response_in_pieces_is_the_joined_frame_and_keeps_large_values(version):
    big = memoryview(bytes(range(256)) * 512)  # 128 KiB: above PIECE_KEEP_BYTES
    small = b"tiny records"
    rows = [{"partition_index": i, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": rec} for i, rec in enumerate(
                 [kw.RawPieces([b"head", big, small]), small, b"", big])]
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "t", "partitions": rows}]}
    pieces = kw.encode_response_pieces(1, version, 77, body)
    joined = b"".join(pieces)
    assert joined == kw.encode_response(1, version, 77, body)
    # the large value went out as the very object given (no copy); small ones were joined
    assert sum(1 for p in pieces if p is big) == 2
    assert all(len(p) >= kw.PIECE_KEEP_BYTES for p in pieces if p is not pieces[0]
               and isinstance(p, memoryview))
    cid, back = kw.decode_response(1, version, joined[4:])
    got = [p["records"] for p in back["responses"][0]["partitions"]]
    assert cid == 77 and got == [b"head" + bytes(big) + small, small, b"", bytes(big)]


def test_a_file_slice_in_raw_pieces_cannot_be_joined_into_bytes():
    class Slice:
        length = 10

    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": kw.RawPieces([Slice()])}]}]}
    pieces = kw.encode_response_pieces(1, 11, 1, body)
    assert any(isinstance(p, Slice) for p in pieces)
    with pytest.raises(kw.LocalProtocolError):
        kw.encode_response(1, 11, 1, body)


def test_nullable_struct_round_trips_with_its_marker():
    """DescribeTopicPartitions' cursor: a nullable struct is an int8 (-1 null, 1 set)
    before its fields (kafka-python's suite sent one)."""
    from raftlog.kafka import wire as W

    for cursor, marker in ((None, b"\xff"), ({"topic_name": "t", "partition_index": 3}, b"\x01")):
        frame = W.encode_request(75, 0, 7, {"topics": [{"name": "t"}],
                                            "response_partition_limit": 5, "cursor": cursor})
        assert frame[-2 if cursor is None else -9:][:1] == marker
        assert W.decode_request(frame[4:]).body["cursor"] == cursor


# --------------------------------------------------------------------------- Kafka 4.2's
# Produce v10-13, Fetch v13-17, ListOffsets v8-11: each version's new fields, by value,
# read back by us and by kafka-python


def _both_read(key: int, kind: str, v: int, value: dict):
    """(our decoding, kafka-python's) of ``value`` as we encode it."""
    data = kw.encode_body(key, v, kind, value)
    return kw.decode_body(key, v, kind, data), _kp_class(key, kind).decode(data, version=v)


TID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


@pytest.mark.skipif(not HAVE_KAFKA_PYTHON, reason="kafka-python is not installed")
def test_produce_v13_names_topics_by_id_and_v10_hints_the_leader():
    req = {"transactional_id": None, "acks": -1, "timeout_ms": 5,
           "topic_data": [{"topic_id": TID.bytes, "partition_data": [{"index": 2, "records": b"r"}]}]}
    ours, theirs = _both_read(0, "request", 13, req)
    assert ours["topic_data"][0]["topic_id"] == TID.bytes and ours["topic_data"][0]["name"] == ""
    assert theirs.topic_data[0].topic_id == TID
    hinted = {"responses": [{"name": "t", "topic_id": TID.bytes, "partition_responses": [
        {"index": 0, "error_code": 6, "current_leader": {"leader_id": 3, "leader_epoch": 9}}]}],
        "node_endpoints": [{"node_id": 3, "host": "h", "port": 9092, "rack": None}]}
    for v in (10, 11, 12, 13):
        ours, theirs = _both_read(0, "response", v, hinted)
        assert ours["responses"][0]["partition_responses"][0]["current_leader"] == {
            "leader_id": 3, "leader_epoch": 9}
        assert ours["node_endpoints"] == hinted["node_endpoints"]
        assert theirs.node_endpoints[0].port == 9092
        assert (ours["responses"][0]["topic_id"], ours["responses"][0]["name"]) == (
            (TID.bytes, "") if v >= 13 else (bytes(16), "t"))
    ours = kw.decode_body(0, 9, "response", kw.encode_body(0, 9, "response", hinted))
    assert ours["node_endpoints"] == [] and ours["responses"][0]["partition_responses"][0][
        "current_leader"] is None  # (not in v9: nothing sent)


@pytest.mark.skipif(not HAVE_KAFKA_PYTHON, reason="kafka-python is not installed")
def test_fetch_v13_to_v17_new_fields():
    req = {"max_wait_ms": 1, "min_bytes": 1, "replica_state": {"replica_id": 4, "replica_epoch": 8},
           "topics": [{"topic_id": TID.bytes, "partitions": [
               {"partition": 1, "fetch_offset": 5, "partition_max_bytes": 10,
                "replica_directory_id": uuid.UUID(int=7).bytes}]}],
           "forgotten_topics_data": [{"topic_id": TID.bytes, "partitions": [3]}]}
    for v in (13, 14, 15, 16, 17):
        ours, theirs = _both_read(1, "request", v, req)
        assert ours["topics"][0]["topic_id"] == TID.bytes and theirs.topics[0].topic_id == TID
        assert ours["forgotten_topics_data"][0]["topic_id"] == TID.bytes
        assert ours["replica_state"] == (req["replica_state"] if v >= 15 else None)
        assert ours["replica_id"] == -1  # (v15+: only in replica_state)
        assert ours["topics"][0]["partitions"][0]["replica_directory_id"] == (
            uuid.UUID(int=7).bytes if v >= 17 else bytes(16))
    resp = {"responses": [{"topic_id": TID.bytes, "partitions": [
        {"partition_index": 1, "error_code": 6, "records": None,
         "current_leader": {"leader_id": 2, "leader_epoch": 4}}]}],
        "node_endpoints": [{"node_id": 2, "host": "h", "port": 1, "rack": "r"}]}
    for v in (13, 16, 17):
        ours, theirs = _both_read(1, "response", v, resp)
        assert ours["responses"][0]["topic_id"] == TID.bytes
        assert ours["responses"][0]["partitions"][0]["current_leader"]["leader_id"] == 2
        assert ours["node_endpoints"] == (resp["node_endpoints"] if v >= 16 else [])
        assert len(theirs.node_endpoints or []) == (1 if v >= 16 else 0)


@pytest.mark.skipif(not HAVE_KAFKA_PYTHON, reason="kafka-python is not installed")
def test_list_offsets_v10_carries_its_timeout():
    req = {"replica_id": -1, "isolation_level": 1, "timeout_ms": 1234, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -6}]}]}
    for v in (8, 9, 10, 11):
        ours, theirs = _both_read(2, "request", v, req)
        assert ours["timeout_ms"] == (1234 if v >= 10 else 0)
        assert theirs.topics[0].partitions[0].timestamp == -6
