"""Kafka's binary protocol, sans-IO: primitive types, headers, framing, a schema engine.

Everything here is pure: bytes in, dicts out, and back. The trio listener
(node/kafka/server.py), the tests and the fuzzer drive the same code.

Frames are ``int32 size | payload`` (big-endian, as every Kafka integer). A request
payload is a request header then the request body; a response payload is a response
header then the body::

    request header v1   int16 api_key, int16 api_version, int32 correlation_id,
                        nullable string client_id (always int16-length, never compact)
    request header v2   v1 + tagged fields
    response header v0  int32 correlation_id
    response header v1  v0 + tagged fields

Flexible versions (KIP-482) use header v2/v1 and, in the body, compact strings,
bytes and arrays (unsigned varint length + 1, 0 meaning null) and a tagged-field
section after every struct. ApiVersions responses always use response header v0 so
that a client that asked with a version we do not know can still read the answer.

Bodies are described by the data in raftlog/kafka/messages.py (transcribed from
Kafka's JSON message definitions). A message value is a dict of snake_case field
names; a struct array is a list of dicts. :func:`decode_body` fills fields absent in
the version with their default, so handlers read every version the same way.

Decoding untrusted bytes raises :class:`KafkaDecodeError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from raftlog.errors import LocalProtocolError, RemoteProtocolError
from raftlog.framing import FrameBuffer
from raftlog.kafka.messages import ADVERTISED, DATA_VERSIONS, SCHEMAS
from raftlog.limits import ENTRIES_PER_REQUEST_MAX

#: Largest frame the codec accepts by default (Kafka's socket.request.max.bytes).
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
#: Deepest struct nesting in the schemas is 4; anything past this is a schema bug.
_MAX_DEPTH = 8
_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id

API_VERSIONS_KEY = 18


class KafkaDecodeError(RemoteProtocolError):
    """Bytes from a Kafka client do not follow Kafka's protocol (short, lying lengths,
    bad varints, invalid UTF-8, unknown layout). The only error decoding raises."""


class RequestTooLarge(KafkaDecodeError):
    """A request with more array entries than ``limits.ENTRIES_PER_REQUEST_MAX``,
    refused while decoding, before any entry is read. The listener closes the
    connection, as a Kafka broker does with a request it cannot parse."""


class UnsupportedRequest(RemoteProtocolError):
    """A well-framed request of an API or version this listener does not serve: answer
    UNSUPPORTED_VERSION with ``correlation_id``, keep the connection."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"api {api_key} version {api_version} is not supported here")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class KafkaRequest(NamedTuple):
    header: RequestHeader
    body: dict


# --------------------------------------------------------------------------- primitives


class Reader:
    """A cursor over untrusted bytes. Every read checks bounds first.

    ``entries_left``: array elements still allowed (None: no limit, for responses);
    every array read takes its length from it before reading an element."""

    __slots__ = ("buf", "pos", "end", "entries_left")

    def __init__(self, buf, pos: int = 0, end: int | None = None,
                 entries_left: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.entries_left = entries_left

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise KafkaDecodeError(f"need {n} bytes at position {p}, {self.end - p} left")
        self.pos = p + n
        return p

    def _fixed(self, s: struct.Struct):
        return s.unpack_from(self.buf, self._take(s.size))[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def int16(self) -> int:
        return self._fixed(_I16)

    def uint16(self) -> int:
        return self._fixed(_U16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def float64(self) -> float:
        return self._fixed(_F64)

    def bool(self) -> bool:
        return self.buf[self._take(1)] != 0

    def uuid(self) -> bytes:
        p = self._take(16)
        return bytes(self.buf[p : p + 16])

    def uvarint(self, max_bytes: int = 5) -> int:
        """Unsigned LEB128 varint of at most ``max_bytes`` bytes (5 for 32 bits)."""
        buf, p, end = self.buf, self.pos, self.end
        value = shift = 0
        for i in range(max_bytes):
            if p + i >= end:
                raise KafkaDecodeError(f"varint runs past the end at position {p}")
            b = buf[p + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = p + i + 1
                return value
            shift += 7
        raise KafkaDecodeError(f"varint longer than {max_bytes} bytes at position {p}")

    def varint(self) -> int:
        v = self.uvarint(5)
        if v >> 32:
            raise KafkaDecodeError(f"varint {v} does not fit 32 bits")
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        v = self.uvarint(10)
        if v >> 64:
            raise KafkaDecodeError(f"varlong {v} does not fit 64 bits")
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> bytes:
        p = self._take(n)
        return bytes(self.buf[p : p + n])

    def _text(self, n: int) -> str:
        p = self._take(n)
        try:
            return str(self.buf[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise KafkaDecodeError(f"string at position {p} is not UTF-8: {e.reason}") from None

    def string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else self._checked_text(n)

    def _checked_text(self, n: int) -> str:
        if n < 0:
            raise KafkaDecodeError(f"negative string length {n} at position {self.pos}")
        return self._text(n)

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        if n < 0:
            raise KafkaDecodeError(f"negative bytes length {n} at position {self.pos}")
        return self.raw(n)

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self.raw(n - 1)

    def array_len(self, flexible: bool) -> int:
        """Element count (-1 for null). Each element takes at least one byte, so a
        count above the bytes left is a lie caught before any allocation."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < -1:
            raise KafkaDecodeError(f"negative array length {n} at position {self.pos}")
        if n > self.end - self.pos:
            raise KafkaDecodeError(f"array of {n} elements in {self.end - self.pos} bytes")
        if self.entries_left is not None and n > 0:
            self.entries_left -= n
            if self.entries_left < 0:
                raise RequestTooLarge(
                    f"request has more than {ENTRIES_PER_REQUEST_MAX} array entries "
                    f"(an array of {n} at position {self.pos}; raftlog/limits.py): "
                    "split it into several requests")
        return n

    def _tag_count(self) -> int:
        n = self.uvarint()
        if n > self.end - self.pos:
            raise KafkaDecodeError(f"{n} tagged fields in {self.end - self.pos} bytes")
        return n


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_U32 = struct.Struct(">I")


def uvarint(n: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative int."""
    if n < 0:
        raise LocalProtocolError(f"unsigned varint of negative {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    """Zigzag varint of a 32-bit signed int."""
    return uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def varlong(n: int) -> bytes:
    """Zigzag varint of a 64-bit signed int."""
    return uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _len_prefix(n: int | None, flexible: bool, wide: bool) -> bytes:
    """Length (or count) prefix; None is null."""
    if flexible:
        return uvarint(0 if n is None else n + 1)
    if n is None:
        n = -1
    return _I32.pack(n) if wide else _I16.pack(n)


def encode_string(s: str | None, flexible: bool = False) -> bytes:
    if s is None:
        return _len_prefix(None, flexible, False)
    b = s.encode()
    if not flexible and len(b) > 0x7FFF:
        raise LocalProtocolError(f"string of {len(b)} bytes exceeds the int16 length")
    return _len_prefix(len(b), flexible, False) + b


def encode_bytes(b: bytes | None, flexible: bool = False) -> bytes:
    if b is None:
        return _len_prefix(None, flexible, True)
    return _len_prefix(len(b), flexible, True) + bytes(b)


class RawPieces:
    """A bytes (or records) field's value given as pieces -- bytes-like objects and
    file slices (anything with ``length``) -- so a large value is never copied into the
    encoded body: :func:`encode_response_pieces` keeps them as they are."""

    __slots__ = ("items", "length")

    def __init__(self, items: list) -> None:
        self.items = items
        self.length = sum(len(p) if isinstance(p, (bytes, bytearray, memoryview)) else p.length
                          for p in items)

    def __len__(self) -> int:
        return self.length


#: Bytes-like pieces at least this big stay pieces of their own in an encoded
#: response (sent as they are); smaller ones are joined with their neighbours.
PIECE_KEEP_BYTES = 32 * 1024


# --------------------------------------------------------------------------- schema engine
# A field tuple (see messages.py): name, type, vmin, vmax, nullable (lo, hi) | None,
# tag | None, tagged (lo, hi) | None, default, sub-fields | None.

_FIXED = {"int8": _I8, "int16": _I16, "uint16": _U16, "int32": _I32, "int64": _I64,
          "float64": _F64}
_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
           "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _in(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


class _Plan(NamedTuple):
    """One struct at one version: its regular fields in order, its tagged fields by
    tag, and the defaults of fields it does not carry."""

    regular: tuple  # ((name, read, write), ...)
    tagged: dict  # {tag: (name, read, write, default)}
    absent: tuple  # ((name, default), ...)
    flexible: bool


def _default(field) -> Any:
    name, kind, *_rest, default, sub = field
    if kind == "struct" and default is None:
        return None
    if isinstance(default, tuple):
        return []
    return default


def _codec(field, version: int, flexible: bool, depth: int) -> tuple[Callable, Callable]:
    """(read(reader), write(value, out: list)) of one field at one version."""
    name, kind, _lo, _hi, nullable, _tag, _tv, _default_v, sub = field
    null_ok = _in(nullable, version)
    if kind in _FIXED:
        s = _FIXED[kind]
        lo, hi = _RANGES.get(kind, (None, None))

        def read_fixed(r, s=s):
            return r._fixed(s)

        def write_fixed(v, out, s=s):
            if type(v) is not int and kind != "float64":
                raise LocalProtocolError(f"field {name!r} must be an int, not {v!r:.50}")
            if lo is not None and not lo <= v <= hi:
                raise LocalProtocolError(f"field {name!r} value {v} does not fit {kind}")
            out.append(s.pack(v))

        return read_fixed, write_fixed
    if kind == "bool":
        return Reader.bool, lambda v, out: out.append(b"\x01" if v else b"\x00")
    if kind == "uuid":

        def write_uuid(v, out):
            if not isinstance(v, (bytes, bytearray)) or len(v) != 16:
                raise LocalProtocolError(f"field {name!r} must be 16 bytes (a uuid)")
            out.append(bytes(v))

        return Reader.uuid, write_uuid
    if kind == "string":
        raw = Reader.compact_string if flexible else Reader.string

        def read_str(r):
            v = raw(r)
            if v is None and not null_ok:
                raise KafkaDecodeError(f"field {name!r} is null but not nullable in v{version}")
            return v

        def write_str(v, out):
            if v is None and not null_ok:
                raise LocalProtocolError(f"field {name!r} is not nullable in v{version}")
            if v is not None and type(v) is not str:
                raise LocalProtocolError(f"field {name!r} must be a str, not {v!r:.50}")
            out.append(encode_string(v, flexible))

        return read_str, write_str
    if kind in ("bytes", "records"):
        raw_b = Reader.compact_bytes if flexible else Reader.bytes_

        def read_bytes(r):
            v = raw_b(r)
            if v is None and not null_ok:
                raise KafkaDecodeError(f"field {name!r} is null but not nullable in v{version}")
            return v

        def write_bytes(v, out):
            if v is None and not null_ok:
                raise LocalProtocolError(f"field {name!r} is not nullable in v{version}")
            if type(v) is RawPieces:
                out.append(_len_prefix(v.length, flexible, True))
                out.extend(v.items)
            elif v is not None and len(v) >= PIECE_KEEP_BYTES:
                out.append(_len_prefix(len(v), flexible, True))
                out.append(v)
            else:
                out.append(encode_bytes(v, flexible))

        return read_bytes, write_bytes
    if kind == "struct":
        plan = _plan(sub, version, flexible, depth + 1)

        if null_ok:  # (a nullable struct: an int8 marker, -1 null, 1 present)
            def read_nullable_struct(r):
                return None if r._fixed(_I8) < 0 else _read_struct(r, plan)

            def write_nullable_struct(v, out):
                out.append(_I8.pack(-1 if v is None else 1))
                if v is not None:
                    _write_struct(v, plan, out)

            return read_nullable_struct, write_nullable_struct

        def read_struct(r):
            return _read_struct(r, plan)

        def write_struct(v, out):
            _write_struct(v if v is not None else {}, plan, out)

        return read_struct, write_struct
    if kind.startswith("[]"):
        if kind == "[]struct":
            plan = _plan(sub, version, flexible, depth + 1)

            def read_elem(r):
                return _read_struct(r, plan)

            def write_elem(v, out):
                _write_struct(v, plan, out)
        else:
            elem = (name, kind[2:], 0, 0x7FFF, None, None, None, None, None)
            read_elem, write_elem = _codec(elem, version, flexible, depth)

        def read_array(r):
            n = r.array_len(flexible)
            if n == -1:
                if not null_ok:
                    raise KafkaDecodeError(f"array {name!r} is null but not nullable in v{version}")
                return None
            return [read_elem(r) for _ in range(n)]

        def write_array(v, out):
            if v is None:
                if not null_ok:
                    raise LocalProtocolError(f"array {name!r} is not nullable in v{version}")
                out.append(_len_prefix(None, flexible, True))
                return
            out.append(_len_prefix(len(v), flexible, True))
            for x in v:
                write_elem(x, out)

        return read_array, write_array
    raise AssertionError(f"unknown field type {kind!r} of {name!r}")


_PLANS: dict = {}


def _plan(fields: tuple, version: int, flexible: bool, depth: int = 0) -> _Plan:
    assert depth <= _MAX_DEPTH, "schema nested deeper than _MAX_DEPTH"
    key = (id(fields), version, flexible)
    cached = _PLANS.get(key)
    if cached is not None:
        return cached[0]
    regular, tagged, absent = [], {}, []
    for f in fields:
        name, _kind, lo, hi, _n, tag, tagged_v, _d, _sub = f
        if not lo <= version <= hi:
            absent.append((name, _default(f)))
            continue
        read, write = _codec(f, version, flexible, depth)
        if tag is not None and flexible and _in(tagged_v, version):
            tagged[tag] = (name, read, write, _default(f))
        else:
            regular.append((name, read, write))
    plan = _Plan(tuple(regular), tagged, tuple(absent), flexible)
    _PLANS[key] = (plan, fields)  # keep `fields` alive: its id is the key
    return plan


def _plan_of(key: int, kind: str, version: int) -> _Plan:
    schema = SCHEMAS[(key, kind)]
    flex = schema["flexible_from"]
    return _plan(schema["fields"], version, flex is not None and version >= flex)


def _read_struct(r: Reader, plan: _Plan) -> dict:
    out = {name: read(r) for name, read, _w in plan.regular}
    for name, default in plan.absent:
        out[name] = list(default) if type(default) is list else default
    if plan.flexible:
        tagged = plan.tagged
        for name, _r, _w, default in tagged.values():
            out[name] = list(default) if type(default) is list else default
        count = r._tag_count()
        last = -1
        for _ in range(count):
            tag = r.uvarint()
            if tag <= last:
                raise KafkaDecodeError(f"tagged fields out of order ({tag} after {last})")
            last = tag
            size = r.uvarint()
            end = r.pos + size
            if end > r.end:
                raise KafkaDecodeError(f"tagged field {tag} of {size} bytes runs past the end")
            known = tagged.get(tag)
            if known is None:
                r.pos = end  # a tag we do not know: skip it, as Kafka does
                continue
            sub = Reader(r.buf, r.pos, end, r.entries_left)
            out[known[0]] = known[1](sub)
            r.entries_left = sub.entries_left
            if sub.pos != end:
                raise KafkaDecodeError(f"tagged field {tag} has {end - sub.pos} bytes left over")
            r.pos = end
    return out


def _write_struct(value: dict, plan: _Plan, out: list) -> None:
    if type(value) is not dict:
        raise LocalProtocolError(f"struct value must be a dict, not {type(value).__name__}")
    get = value.get
    for name, _r, write in plan.regular:
        v = get(name, _MISSING)
        if v is _MISSING:
            raise LocalProtocolError(f"field {name!r} is required")
        write(v, out)
    if plan.flexible:
        present = []
        for tag in sorted(plan.tagged):
            name, _r, write, default = plan.tagged[tag]
            v = get(name, default)
            if v is None or v == default:
                continue
            buf: list = []
            write(v, buf)
            data = b"".join(buf)
            present.append(uvarint(tag) + uvarint(len(data)) + data)
        out.append(uvarint(len(present)))
        out.extend(present)


_MISSING = object()


def _fill_defaults(value: dict, fields: tuple, version: int) -> dict:
    """``value`` with every field of this version that it lacks set to its default
    (recursively for structs given as dicts), so callers may omit what they do not use."""
    out = dict(value)
    for f in fields:
        name, kind, lo, hi, _n, _tag, _tv, _d, sub = f
        if not lo <= version <= hi:
            continue
        if name not in out:
            d = _default(f)
            out[name] = _fill_defaults({}, sub, version) if kind == "struct" and d is None else d
        elif kind == "[]struct" and out[name] is not None:
            out[name] = [_fill_defaults(x, sub, version) for x in out[name]]
        elif kind == "struct" and isinstance(out[name], dict):
            out[name] = _fill_defaults(out[name], sub, version)
    return out


# --------------------------------------------------------------------------- versions


#: {api key: (min, max)} of every API this codec serves.
SUPPORTED: dict[int, tuple[int, int]] = {k: (lo, hi) for k, lo, hi in ADVERTISED.values()}
API_NAMES: dict[int, str] = {k: name for name, (k, _lo, _hi) in ADVERTISED.items()}


def is_flexible(api_key: int, version: int, kind: str = "request") -> bool:
    flex = SCHEMAS[(api_key, kind)]["flexible_from"]
    return flex is not None and version >= flex


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0  # always, so that any client can read it (KIP-511)
    return 1 if is_flexible(api_key, version, "response") else 0


def _check_served(api_key: int, version: int) -> None:
    rng = SUPPORTED.get(api_key)
    if rng is None or not rng[0] <= version <= rng[1]:
        raise LocalProtocolError(f"api {api_key} v{version} is not in the schemas")


# --------------------------------------------------------------------------- bodies


def decode_body(api_key: int, version: int, kind: str, buf, pos: int = 0, *,
                allow_trailing: bool = False) -> dict:
    """Decode a whole request or response body (``buf[pos:]``), every byte of it
    (``allow_trailing``: bytes after the last field are ignored).

    Raises:
        KafkaDecodeError: the bytes do not follow the layout (and nothing else).
    """
    _check_served(api_key, version)
    plan = _plan_of(api_key, kind, version)
    # (a request's arrays share one entry budget; responses are ours or a broker's)
    r = Reader(buf, pos, entries_left=ENTRIES_PER_REQUEST_MAX if kind == "request" else None)
    try:
        out = _read_struct(r, plan)
    except KafkaDecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, RecursionError) as e:
        raise KafkaDecodeError(f"{API_NAMES[api_key]} v{version} {kind}: {e}") from None
    if r.pos != r.end and not allow_trailing:
        raise KafkaDecodeError(
            f"{API_NAMES[api_key]} v{version} {kind} has {r.end - r.pos} trailing bytes")
    return out


def encode_body(api_key: int, version: int, kind: str, value: dict) -> bytes:
    """Encode a body; fields the caller omits take their defaults.

    Raises:
        LocalProtocolError: a value does not fit its field (our caller's bug), or a
            RawPieces holds a file slice (only :func:`encode_response_pieces` sends those).
    """
    out = _body_pieces(api_key, version, kind, value)
    try:
        return b"".join(out)
    except TypeError:
        raise LocalProtocolError("a file slice cannot be joined into bytes; "
                                 "use encode_response_pieces") from None


def _body_pieces(api_key: int, version: int, kind: str, value: dict) -> list:
    _check_served(api_key, version)
    schema = SCHEMAS[(api_key, kind)]
    value = _fill_defaults(value, schema["fields"], version)
    out: list = []
    _write_struct(value, _plan_of(api_key, kind, version), out)
    return out


def _is_small_bytes(p) -> bool:
    return isinstance(p, (bytes, bytearray, memoryview)) and len(p) < PIECE_KEEP_BYTES


def encode_response_pieces(api_key: int, version: int, correlation_id: int,
                           body: dict) -> list:
    """A whole response frame as pieces: runs of small bytes joined; large bytes-like
    values and file slices of RawPieces fields kept as they are (no copy). Their
    concatenation is :func:`encode_response`'s frame."""
    head = _I32.pack(correlation_id)
    if response_header_version(api_key, version) >= 1:
        head += b"\x00"
    body_pieces = _body_pieces(api_key, version, "response", body)
    size = len(head) + sum(len(p) if isinstance(p, (bytes, bytearray, memoryview)) else p.length
                           for p in body_pieces)
    out: list = []
    run: list = [_SIZE.pack(size), head]
    for p in body_pieces:
        if _is_small_bytes(p):
            run.append(p)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(p)
    if run:
        out.append(b"".join(run))
    return out


# --------------------------------------------------------------------------- versioned data


def decode_data(name: str, buf) -> tuple[int, dict]:
    """(version, value) of an ``int16 version | struct`` blob such as the consumer
    protocol's subscription and assignment. A version newer than we know is read as the
    newest we know, its extra trailing fields ignored (as Kafka's ConsumerProtocol does).

    Raises:
        KafkaDecodeError: not such a blob.
    """
    lo, hi = DATA_VERSIONS[name]
    r = Reader(buf)
    try:
        version = r.int16()
        if version < lo:
            raise KafkaDecodeError(f"{name} version {version} is below {lo}")
        read_as = min(version, hi)
        plan = _plan(SCHEMAS[(name, "data")]["fields"], read_as, False)
        value = _read_struct(r, plan)
    except KafkaDecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise KafkaDecodeError(f"{name}: {e}") from None
    if r.pos != r.end and version <= hi:
        raise KafkaDecodeError(f"{name} v{version} has {r.end - r.pos} trailing bytes")
    return version, value


def encode_data(name: str, version: int, value: dict) -> bytes:
    """``int16 version | struct`` of ``value`` (omitted fields take their defaults)."""
    lo, hi = DATA_VERSIONS[name]
    if not lo <= version <= hi:
        raise LocalProtocolError(f"{name} v{version} is not in {lo}..{hi}")
    fields = SCHEMAS[(name, "data")]["fields"]
    out: list = [_I16.pack(version)]
    _write_struct(_fill_defaults(value, fields, version), _plan(fields, version, False), out)
    return b"".join(out)


# --------------------------------------------------------------------------- headers + frames


def decode_request(payload) -> KafkaRequest:
    """Decode one request frame's payload (after the size prefix).

    Raises:
        KafkaDecodeError: not a request (the connection must close).
        UnsupportedRequest: an API or version not served; carries the correlation id.
    """
    if len(payload) < _HEADER_FIXED.size:
        raise KafkaDecodeError(f"request of {len(payload)} bytes is shorter than its header")
    api_key, version, cid = _HEADER_FIXED.unpack_from(payload, 0)
    rng = SUPPORTED.get(api_key)
    if rng is None or not rng[0] <= version <= rng[1]:
        raise UnsupportedRequest(api_key, version, cid)
    r = Reader(payload, _HEADER_FIXED.size)
    client_id = r.string()
    if request_header_version(api_key, version) >= 2:
        _skip_tags(r)
    header = RequestHeader(api_key, version, cid, client_id)
    # Bytes after a request's last field are ignored, as a Kafka broker does (its parser
    # reads the fields it knows and no more): librdkafka 2.16 sends an all-topics
    # Metadata v12 with three extra bytes.
    return KafkaRequest(header, decode_body(api_key, version, "request", payload, r.pos,
                                            allow_trailing=True))


def _skip_tags(r: Reader) -> None:
    for _ in range(r._tag_count()):
        r.uvarint()
        r._take(r.uvarint())


def peek_header(payload) -> tuple[int, int, int] | None:
    """(api_key, api_version, correlation_id) of a payload, or None if too short."""
    if len(payload) < _HEADER_FIXED.size:
        return None
    return _HEADER_FIXED.unpack_from(payload, 0)


def encode_request(api_key: int, version: int, correlation_id: int, body: dict,
                   client_id: str | None = "raftlog") -> bytes:
    """A whole request frame (size prefix included)."""
    head = _HEADER_FIXED.pack(api_key, version, correlation_id) + encode_string(client_id)
    if request_header_version(api_key, version) >= 2:
        head += b"\x00"
    data = head + encode_body(api_key, version, "request", body)
    return _SIZE.pack(len(data)) + data


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """A whole response frame (size prefix included)."""
    pieces = encode_response_pieces(api_key, version, correlation_id, body)
    try:
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
    except TypeError:
        raise LocalProtocolError("a file slice cannot be joined into bytes; "
                                 "use encode_response_pieces") from None


def response_frame(api_key: int, version: int, correlation_id: int, body_bytes: bytes) -> bytes:
    """Frame an already encoded response body (e.g. one built in pieces)."""
    head = _I32.pack(correlation_id)
    if response_header_version(api_key, version) >= 1:
        head += b"\x00"
    return _SIZE.pack(len(head) + len(body_bytes)) + head + body_bytes


def decode_response(api_key: int, version: int, payload) -> tuple[int, dict]:
    """(correlation_id, body) of a response payload (after the size prefix)."""
    r = Reader(payload)
    try:
        cid = r.int32()
        if response_header_version(api_key, version) >= 1:
            _skip_tags(r)
    except (struct.error, IndexError) as e:
        raise KafkaDecodeError(f"response header: {e}") from None
    return cid, decode_body(api_key, version, "response", payload, r.pos)


class FrameDecoder(FrameBuffer):
    """Incremental ``int32 size | payload`` splitter (big-endian size, as Kafka).
    Raises only KafkaDecodeError."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        super().__init__(max_frame_bytes)

    def next_frame(self) -> bytes | None:
        """The next payload, or None when more data is needed."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 0:
            raise KafkaDecodeError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise KafkaDecodeError(
                f"frame of {size} bytes exceeds the maximum of {self.max_frame_bytes} "
                f"({self.limit_name})")
        end = pos + 4 + size
        if len(buf) < end:
            return None
        with memoryview(buf) as view:  # (one copy: a bytearray slice would be another)
            payload = bytes(view[pos + 4 : end])
        self._consumed(end)
        return payload


__all__ = [
    "KafkaDecodeError", "UnsupportedRequest", "RequestHeader", "KafkaRequest", "Reader",
    "SUPPORTED", "API_NAMES", "uvarint", "varint", "varlong", "encode_string", "encode_bytes",
    "decode_body", "encode_body", "decode_data", "encode_data", "decode_request", "encode_request", "encode_response",
    "encode_response_pieces", "RawPieces", "PIECE_KEEP_BYTES",
    "response_frame", "decode_response", "peek_header", "FrameDecoder", "is_flexible",
    "request_header_version", "response_header_version",
]
