"""Type checks for values read back from disk (CBOR snapshots, compacted-topic values):
each returns its value or raises ValueError, which the caller turns into its own
corruption error. Pure."""

from __future__ import annotations


def as_int(v) -> int:
    if type(v) is not int:
        raise ValueError(f"{v!r} is not an integer")
    return v


def as_nonneg(v) -> int:
    if as_int(v) < 0:
        raise ValueError(f"{v} is negative")
    return v


def as_bool(v) -> bool:
    if type(v) is not bool:
        raise ValueError(f"{v!r} is not a boolean")
    return v


def as_str(v) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a string")
    return v
