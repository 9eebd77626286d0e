"""What a producer accepts as a record's key, value and headers, checked where the
caller passes them (``send``/``send_many``), before anything is queued.

Keys and values are bytes (or None); a ``str`` is taken as its UTF-8 bytes and
``bytearray``/``memoryview`` as bytes, as confluent-kafka takes them. Headers are a list
of ``(name, value)`` pairs or a dict (confluent-kafka takes both), names ``str``, values
bytes, ``str`` (UTF-8) or None. Anything else is a TypeError that says what to pass: a
record the node stores is one every consumer can decode (a dict of headers used to be
stored as its keys alone, which no consumer could read back). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

_HINT = "serialize it first, e.g. json.dumps(obj).encode()"


def as_bytes(x, what: str):
    """``x`` (not None, not bytes: the caller's fast path checked) as bytes."""
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes, str or None, not {type(x).__name__}: {_HINT}")


def as_bytes_list(items: list, what: str, every: bool = False) -> list:
    """``items`` with each str (or bytes-like) item as bytes, when its first or last item
    is not bytes or None (a list of str, the usual mistake); otherwise the same list,
    unlooked at (the bulk path's cost stays O(1): a stray item further in fails its
    batch's future when the batch is encoded, see producer.py ``_encode_or_fail``).
    ``every``: look at every item."""
    if not items or (not every and (type(items[0]) is bytes or items[0] is None)
                     and (type(items[-1]) is bytes or items[-1] is None)):
        return items
    return [x if type(x) is bytes or x is None else as_bytes(x, f"{what}[{i}]")
            for i, x in enumerate(items)]


def headers(h, what: str = "headers") -> list | None:
    """One record's headers as ``[(str, bytes | None), ...]`` (None when empty)."""
    if not h:
        return None
    if isinstance(h, (str, bytes)):
        raise TypeError(f"{what} must be a list of (name, value) pairs or a dict, "
                        f"not {type(h).__name__}")
    pairs = h.items() if isinstance(h, Mapping) else h
    out = []
    for kv in pairs:
        if isinstance(kv, (str, bytes)) or not hasattr(kv, "__len__") or len(kv) != 2:
            raise TypeError(f"{what}: each header is a (name, value) pair, not {kv!r}")
        k, v = kv
        if not isinstance(k, str):
            raise TypeError(f"{what}: a header name must be str, not {type(k).__name__} "
                            f"({k!r})")
        if v is not None and type(v) is not bytes:
            v = as_bytes(v, f"{what}: the value of header {k!r}")
        out.append((k, v))
    return out
