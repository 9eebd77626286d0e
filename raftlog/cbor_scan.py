"""Count the entries of a CBOR item before decoding it: the native codec's request
limit, checked while reading (raftlog/limits.py).

``cbor2.loads`` builds every list a header holds before anything can look at it: an
11 MB header of a million fetch partitions takes over a second of the event loop.
:func:`check_entries` walks the encoding instead and stops as soon as the array and map
lengths it has read add up to more than the budget -- a million-entry array is refused
from its length prefix. It reads lengths only, never builds a value; the caller then
decodes with cbor2 as before. Pure: no I/O.
"""

from __future__ import annotations

import struct

_U = {24: struct.Struct(">B"), 25: struct.Struct(">H"), 26: struct.Struct(">I"),
      27: struct.Struct(">Q")}


class TooManyEntries(ValueError):
    """More array and map entries than the budget (or a shape the walk refuses)."""


def check_entries(data, entries_max: int) -> None:
    """Raise :class:`TooManyEntries` if the CBOR item in ``data`` holds more than
    ``entries_max`` array elements and map pairs in all, or uses indefinite-length
    items (cbor2, our clients' encoder, never writes them). Malformed bytes are left
    for the decoder to name (the walk just stops)."""
    data = bytes(data)
    pos, end, pending, seen = 0, len(data), 1, 0
    u = _U
    try:
        while pending and pos < end:
            pending -= 1
            b = data[pos]
            pos += 1
            if b < 0x18 or 0x20 <= b < 0x38:  # small integers: the common case
                continue
            if 0x60 <= b < 0x78:  # short text: skip it
                pos += b - 0x60
                continue
            info = b & 0x1F
            if info < 24:
                n = info
            elif info < 28:
                st = u[info]
                (n,) = st.unpack_from(data, pos)
                pos += st.size
            elif info == 31:
                raise TooManyEntries("indefinite-length items are not accepted here")
            else:
                return  # malformed: cbor2 names it
            major = b >> 5
            if major == 4:
                seen += n
                pending += n
            elif major == 5:
                seen += n
                pending += 2 * n
            elif major in (2, 3):
                pos += n
                continue
            elif major == 6:
                pending += 1  # the tagged item follows
                continue
            else:  # (majors 0, 1 and 7: the integer or float was read as ``n``)
                continue
            if seen > entries_max:
                raise TooManyEntries(f"more than {entries_max} entries (an array or map "
                                     f"of {n} at byte {pos}): split the request")
    except (struct.error, IndexError):
        return  # cut short: cbor2 names it
