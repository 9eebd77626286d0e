"""Hypothesis strategies for Kafka message bodies, built from raftlog.kafka.messages."""

from __future__ import annotations

from hypothesis import strategies as st

from raftlog.kafka.messages import SCHEMAS

_INTS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _in(rng, v):
    return rng is not None and rng[0] <= v <= rng[1]


def value_of(field, version: int):
    name, kind, _lo, _hi, nullable, _tag, _tv, _d, sub = field
    if kind == "[]struct":
        s = st.lists(struct_of(sub, version), max_size=3)
    elif kind == "struct":
        s = struct_of(sub, version)
    elif kind.startswith("[]"):
        s = st.lists(value_of((name, kind[2:], 0, 0x7FFF, None, None, None, None, None),
                              version), max_size=4)
    elif kind in _INTS:
        b = _INTS[kind]
        s = st.integers(-(2**b), 2**b - 1)
    elif kind == "uint16":
        s = st.integers(0, 2**16 - 1)
    elif kind == "float64":
        s = st.floats(allow_nan=False)
    elif kind == "bool":
        s = st.booleans()
    elif kind == "string":
        s = st.text(max_size=12)
    elif kind in ("bytes", "records"):
        s = st.binary(max_size=20)
    elif kind == "uuid":
        s = st.binary(min_size=16, max_size=16)
    else:
        raise AssertionError(kind)
    if _in(nullable, version):
        s = st.none() | s
    return s


def struct_of(fields, version: int):
    return st.fixed_dictionaries({
        f[0]: value_of(f, version) for f in fields if f[2] <= version <= f[3]})


def body_of(api_key: int, kind: str, version: int):
    return struct_of(SCHEMAS[(api_key, kind)]["fields"], version)
