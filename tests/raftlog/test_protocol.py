"""The sans-IO wire codec: round trips, validation, and fuzzing with arbitrary bytes."""

from __future__ import annotations

import struct

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from raftlog.protocol import (
    CLIENT_ID_MAX_CHARS,
    Api,
    BadRequest,
    ClientConnection,
    FrameDecoder,
    encode_frame,
    encode_request,
    parse_request,
    split_body,
)


def _frames(data: bytes, max_frame: int = 1 << 20):
    d = FrameDecoder(max_frame)
    d.receive_data(data)
    out = []
    while (f := d.next_frame()) is not None:
        out.append(f)
    return out, d


def test_request_round_trip_byte_by_byte():
    raw = encode_request(Api.PRODUCE, 7, {"acks": -1, "parts": [["t", 0, 3]]}, b"abc")
    d = FrameDecoder()
    frames = []
    for i in range(len(raw)):
        d.receive_data(raw[i : i + 1])
        f = d.next_frame()
        if f is not None:
            frames.append(f)
    assert len(frames) == 1 and frames[0].body == b"abc"
    req = parse_request(frames[0])
    assert req.api is Api.PRODUCE and req.id == 7
    assert req.fields["acks"] == -1 and req.fields["parts"] == [("t", 0, 3)]
    assert req.fields["timeout_ms"] == 30_000  # default filled in


def test_pipelined_frames_decode_in_order():
    raw = b"".join(encode_request(Api.API_VERSIONS, i, {}) for i in range(1, 50))
    frames, d = _frames(raw)
    assert [parse_request(f).id for f in frames] == list(range(1, 50))
    assert d.buffered == 0


def test_oversize_frame_is_a_remote_protocol_error():
    d = FrameDecoder(max_frame_bytes=1024)
    d.receive_data(struct.pack("<I", 1025))
    with pytest.raises(RemoteProtocolError, match="exceeds the maximum"):
        d.next_frame()


def test_header_not_a_map():
    h = cbor2.dumps([1, 2])
    raw = struct.pack("<II", 4 + len(h), len(h)) + h
    with pytest.raises(RemoteProtocolError, match="not a map"):
        _frames(raw)


@pytest.mark.parametrize(
    "header, code",
    [
        ({"id": 1, "api": 999}, ErrorCode.UNKNOWN_API),
        ({"id": 1, "api": "x"}, ErrorCode.INVALID_REQUEST),
        ({"id": 1, "api": int(Api.METADATA), "v": 9}, ErrorCode.UNSUPPORTED_VERSION),
        ({"id": 1, "api": int(Api.PRODUCE)}, ErrorCode.INVALID_REQUEST),  # parts missing
        ({"id": 1, "api": int(Api.PRODUCE), "parts": [["t", -1, 0]]}, ErrorCode.INVALID_REQUEST),
        ({"id": 1, "api": int(Api.FETCH), "parts": "nope"}, ErrorCode.INVALID_REQUEST),
        ({"id": 1, "api": int(Api.FETCH), "parts": [["t", 0, 0, 10]]}, ErrorCode.INVALID_REQUEST),
        ({"id": 1, "api": int(Api.METADATA), "topics": [1]}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_bad_requests_carry_id_and_code(header, code):
    (frame,), _ = _frames(encode_frame(header))
    with pytest.raises(BadRequest) as ei:
        parse_request(frame)
    assert ei.value.request_id == 1 and ei.value.code == code
    assert ei.value.message  # a clear message, not just a code


def test_missing_id_is_fatal_for_the_connection():
    (frame,), _ = _frames(encode_frame({"api": 0}))
    with pytest.raises(RemoteProtocolError):
        parse_request(frame)


def test_field_errors_name_the_field():
    (frame,), _ = _frames(encode_frame({"id": 3, "api": int(Api.FETCH), "parts": [], "min_bytes": -5}))
    with pytest.raises(BadRequest, match="min_bytes"):
        parse_request(frame)


def test_join_group_carries_a_bounded_client_id():
    def join(**extra):
        header = {"id": 4, "api": int(Api.JOIN_GROUP), "group": "g",
                  "protocols": [["range", {}]], **extra}
        (frame,), _ = _frames(encode_frame(header))
        return parse_request(frame).fields

    assert join()["client_id"] == ""  # an older client sends none
    assert join(client_id="billing-7")["client_id"] == "billing-7"
    for bad, why in ((7, "must be a string"), ("x" * (CLIENT_ID_MAX_CHARS + 1), "longer than")):
        with pytest.raises(BadRequest, match=f"client_id.*{why}") as ei:
            join(client_id=bad)
        assert ei.value.code == ErrorCode.INVALID_REQUEST


def test_fetch_session_fields_are_checked():
    """A fetch session mode outside none/full/incremental, or a forgotten entry that is
    not [topic, partition]: BadRequest naming the field."""
    for bad, name in (({"session": 7}, "session"), ({"session": "1"}, "session"),
                      ({"forgotten": [["t"]]}, "forgotten"), ({"forgotten": "t"}, "forgotten")):
        (frame,), _ = _frames(encode_frame({"id": 3, "api": int(Api.FETCH), "parts": [], **bad}))
        with pytest.raises(BadRequest, match=name):
            parse_request(frame)
    (frame,), _ = _frames(encode_frame({"id": 3, "api": int(Api.FETCH), "parts": [],
                                        "session": 2, "forgotten": [["t", 0]]}))
    req = parse_request(frame)
    assert req.fields["session"] == 2 and req.fields["forgotten"] == [("t", 0)]


def test_encode_request_rejects_our_own_bad_fields():
    with pytest.raises(LocalProtocolError):
        encode_request(Api.PRODUCE, 1, {"parts": [["t", "zero", 1]]})


def test_client_connection_matches_responses_in_order():
    c = ClientConnection()
    r1, _ = c.send_request(Api.API_VERSIONS, {})
    r2, _ = c.send_request(Api.API_VERSIONS, {})
    c.receive_data(encode_frame({"id": r1, "error": 0}) + encode_frame({"id": r2, "error": 0}))
    assert c.next_response().header["id"] == r1
    assert c.next_response().header["id"] == r2
    assert c.next_response() is None


def test_client_connection_rejects_out_of_order_response():
    c = ClientConnection()
    c.send_request(Api.API_VERSIONS, {})
    c.receive_data(encode_frame({"id": 999, "error": 0}))
    with pytest.raises(RemoteProtocolError):
        c.next_response()


def test_split_body():
    assert [bytes(x) for x in split_body(b"aabbb", [2, 3])] == [b"aa", b"bbb"]
    with pytest.raises(ValueError):
        split_body(b"aabbb", [2, 2])


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512), st.integers(min_value=1, max_value=64))
def test_fuzz_any_bytes_give_frames_or_protocol_errors(data, chunk):
    """Arbitrary bytes, fed in arbitrary chunks: only frames or RemoteProtocolError."""
    d = FrameDecoder(max_frame_bytes=4096)
    try:
        for i in range(0, len(data), chunk):
            d.receive_data(data[i : i + chunk])
            while (f := d.next_frame()) is not None:
                try:
                    parse_request(f)
                except BadRequest:
                    pass
    except RemoteProtocolError:
        pass


_cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([int(a) for a in Api] + [99, -1]),
    st.dictionaries(
        st.sampled_from(["parts", "acks", "topics", "names", "max_wait_ms", "group", "offsets", "v"]),
        _cbor_values,
        max_size=4,
    ),
)
def test_fuzz_well_framed_garbage_fields_give_bad_request(api, fields):
    """Well-framed headers with wrong field types: BadRequest with a code, never a crash."""
    header = {**fields, "id": 5, "api": api}
    (frame,), _ = _frames(encode_frame(header))
    try:
        req = parse_request(frame)
    except BadRequest as e:
        assert e.request_id == 5 and isinstance(e.code, ErrorCode)
    else:
        assert req.id == 5


def test_responses_come_back_typed_and_shape_checked():
    from raftlog.protocol import (
        FetchPartHeader,
        PartitionMetadata,
        ProducePartResult,
        TopicMetadata,
        encode_frame,
    )

    c = ClientConnection()
    produce_id, _ = c.send_request(Api.PRODUCE, {"parts": [["t", 0, 0]]})
    meta_id, _ = c.send_request(Api.METADATA, {})
    fetch_id, _ = c.send_request(Api.FETCH, {"parts": [["t", 0, 0, 100, -1]]})
    # the node builds parts as these types; on the wire they are plain arrays
    c.receive_data(encode_frame({"id": produce_id, "error": 0,
                                 "parts": [ProducePartResult("t", 0, 0, 41, -1, "")]}))
    c.receive_data(encode_frame({"id": meta_id, "error": 0, "brokers": [[1, "h", 9, None, False]],
                                 "topics": [TopicMetadata("t", 0, "", "id", [
                                     PartitionMetadata(0, 0, 1, 4, [1], [1], [])]).to_wire()]}))
    # a newer peer may append fields: ignored
    c.receive_data(encode_frame({"id": fetch_id, "error": 0,
                                 "parts": [["t", 0, 0, 7, 0, 3, "", -1, [], "future"]]},
                                b"abc"))
    part = c.next_response().header["parts"][0]
    assert (part.topic, part.error, part.base_offset) == ("t", 0, 41)
    h = c.next_response().header
    assert h["brokers"][0].port == 9 and not h["brokers"][0].fenced
    assert h["topics"][0].partitions[0].leader_epoch == 4
    assert c.next_response().header["parts"] == [FetchPartHeader("t", 0, 0, 7, 0, 3, "")]
    # a row missing fields, or not a row, is the peer's protocol error
    for bad in ([["t", 0, 0]], [5], "x"):
        rid, _ = c.send_request(Api.PRODUCE, {"parts": [["t", 0, 0]]})
        c.receive_data(encode_frame({"id": rid, "error": 0, "parts": bad}))
        with pytest.raises(RemoteProtocolError, match="ProducePartResult"):
            c.next_response()
    # a whole-request error carries no parts: nothing to type
    rid, _ = c.send_request(Api.PRODUCE, {"parts": [["t", 0, 0]]})
    c.receive_data(encode_frame({"id": rid, "error": 42, "message": "no"}))
    assert c.next_response().header == {"id": rid, "error": 42, "message": "no"}


# A client pointed at another port gets told what answers there, not only a frame size.
def test_first_frame_error_names_a_raft_port():
    from raftlog.metadata import raft_hello

    d = FrameDecoder()
    d.receive_data(raft_hello.challenge(b"n" * raft_hello.NONCE_BYTES))
    with pytest.raises(RemoteProtocolError, match="raftlog Raft port .* use the node's port"):
        d.next_frame()


def test_first_frame_error_names_an_http_server():
    d = FrameDecoder()
    d.receive_data(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(RemoteProtocolError, match="speaks HTTP"):
        d.next_frame()


def test_later_frame_errors_carry_no_guess():
    d = FrameDecoder()
    d.receive_data(encode_request(Api.METADATA, 1, {}) + b"RLRAFT\x00\x01" + b"x" * 32)
    assert d.next_frame() is not None
    with pytest.raises(RemoteProtocolError) as e:
        d.next_frame()
    assert "Raft port" not in str(e.value)
