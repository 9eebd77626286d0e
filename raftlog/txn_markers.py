"""Transaction markers: the one record of a control batch (Kafka's layout). Pure.

A transaction coordinator ends a transaction by writing, to every partition the
transaction touched, a *control batch*: a batch whose attributes have both the
transactional (0x10) and the control (0x20) bit, whose producer id and epoch are the
transaction's, whose base sequence is -1, and which holds exactly one record. That
record is Kafka's, byte for byte (big-endian), so a Kafka consumer gets it unchanged::

    key    (ControlRecordType)   i16 version (0), i16 type (0 ABORT, 1 COMMIT)
    value  (EndTransactionMarker) i16 version (0), i32 coordinator_epoch

As in Kafka, a key or value of a *higher* version is read as version 0 (trailing bytes
ignored): a newer writer stays readable. Control types other than ABORT and COMMIT
(Kraft's LeaderChange, snapshot markers ...) have no meaning in a partition here and
are refused.

The same key and value bytes are stored in raftlog's native batch layout
(:func:`raftlog.records.encode_control_batch`) and in Kafka's
(:func:`raftlog.kafka.batch.encode_control_batch`); both carry the same marker.

Untrusted bytes raise :class:`~raftlog.errors.CorruptRecordError` and nothing else.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from raftlog.errors import CorruptRecordError

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
KEY_SIZE = _KEY.size  # 4
VALUE_SIZE = _VALUE.size  # 6


class ControlType(enum.IntEnum):
    """Kafka's ControlRecordType values a partition log may hold."""

    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    """What a commit or abort marker says."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


def marker_key(control_type: ControlType) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, ControlType(control_type))


def marker_value(coordinator_epoch: int) -> bytes:
    if not 0 <= coordinator_epoch <= 2**31 - 1:
        raise ValueError(f"coordinator epoch {coordinator_epoch} is not a non-negative i32")
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def encode_marker(marker: EndTxnMarker) -> tuple[bytes, bytes]:
    """(key, value) of the control record of ``marker``."""
    return marker_key(marker.control_type), marker_value(marker.coordinator_epoch)


def decode_marker(key, value) -> EndTxnMarker:
    """The marker of a control record's key and value.

    Raises:
        CorruptRecordError: null or short key/value, a negative version, an unknown
            control type, or a negative coordinator epoch.
    """
    if key is None or len(key) < KEY_SIZE:
        raise CorruptRecordError(
            f"control record key of {None if key is None else len(key)} bytes: "
            f"needs {KEY_SIZE} (i16 version, i16 type)")
    kv, ctype = _KEY.unpack_from(key, 0)
    if kv < 0:
        raise CorruptRecordError(f"control record key version {kv} is negative")
    if ctype not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptRecordError(
            f"control record type {ctype} is not a transaction marker (0 abort, 1 commit)")
    if value is None or len(value) < VALUE_SIZE:
        raise CorruptRecordError(
            f"transaction marker value of {None if value is None else len(value)} bytes: "
            f"needs {VALUE_SIZE} (i16 version, i32 coordinator epoch)")
    vv, epoch = _VALUE.unpack_from(value, 0)
    if vv < 0:
        raise CorruptRecordError(f"transaction marker version {vv} is negative")
    if epoch < 0:
        raise CorruptRecordError(f"transaction marker coordinator epoch {epoch} is negative")
    return EndTxnMarker(ControlType(ctype), epoch)


__all__ = ["ControlType", "EndTxnMarker", "encode_marker", "decode_marker", "marker_key",
           "marker_value"]
