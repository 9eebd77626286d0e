"""Transcribe Kafka's JSON message definitions into raftlog/kafka/messages.py.

Usage::

    python tools/gen_kafka_messages.py /path/to/apache-kafka > raftlog/kafka/messages.py

Reads ``clients/src/main/resources/common/message/<Name>{Request,Response}.json`` for
the APIs and version ranges in :data:`ADVERTISED` and writes their field layouts as
Python literals for the schema engine in raftlog/kafka/wire.py. Only fields present
in the advertised range are kept. The generated module is committed; this script is
run again only to change the advertised ranges.
"""

from __future__ import annotations

import json
import pprint
import re
import sys
from pathlib import Path

#: api name -> (api key, min version, max version) this listener serves. Chosen to
#: cover what confluent-kafka 2.x, kafka-python 2.x/3.x and aiokafka 0.1x negotiate,
#: stopping before versions that batch several groups in one request (OffsetFetch 8+).
#: Produce, Fetch and ListOffsets go to Kafka 4.2's newest (kafka-python infers the
#: broker's version from them); their topic ids are translated at the listener's edge
#: (node/kafka/topic_ids.py). Kafka 4.2's JSON definitions are the ones kafka-python
#: 3.0.12 vendors (kafka/protocol/schemas/resources): a directory laid out as Kafka's
#: (clients/src/main/resources/common/message -> that one) is a valid argument.
ADVERTISED = {
    "Produce": (0, 3, 13),
    "Fetch": (1, 4, 17),
    "ListOffsets": (2, 1, 11),
    "Metadata": (3, 0, 12),
    "OffsetCommit": (8, 0, 8),
    "OffsetFetch": (9, 0, 7),
    "FindCoordinator": (10, 0, 4),
    "JoinGroup": (11, 0, 7),
    "Heartbeat": (12, 0, 4),
    "LeaveGroup": (13, 0, 4),
    "SyncGroup": (14, 0, 5),
    "DescribeGroups": (15, 0, 5),
    "ListGroups": (16, 0, 4),
    "SaslHandshake": (17, 0, 1),
    "ApiVersions": (18, 0, 3),
    "CreateTopics": (19, 0, 7),
    "DeleteTopics": (20, 0, 5),
    "InitProducerId": (22, 0, 4),
    # transactions (#33): transaction version 1 only (EndTxn 5+ is KIP-890's version 2);
    # AddPartitionsToTxn 4 is the brokers' batched, verify-only form
    "AddPartitionsToTxn": (24, 0, 4),
    "AddOffsetsToTxn": (25, 0, 4),
    "EndTxn": (26, 0, 4),
    "TxnOffsetCommit": (28, 0, 4),
    "DescribeConfigs": (32, 0, 4),
    "SaslAuthenticate": (36, 0, 2),
    "DescribeCluster": (60, 0, 1),
    # the metadata quorum (kafka-metadata-quorum.sh describe; pysyncobj Raft, not KRaft)
    "DescribeQuorum": (55, 0, 2),
    # admin APIs (#37)
    "CreatePartitions": (37, 0, 3),
    "AlterConfigs": (33, 0, 2),
    "IncrementalAlterConfigs": (44, 0, 1),
    "DeleteGroups": (42, 0, 2),
    "OffsetDelete": (47, 0, 0),
    "DescribeAcls": (29, 0, 3),
    "CreateAcls": (30, 0, 3),
    "DeleteAcls": (31, 0, 3),
    "DeleteRecords": (21, 0, 2),
    "DescribeUserScramCredentials": (50, 0, 0),
    "AlterUserScramCredentials": (51, 0, 0),
    # operating a cluster with Kafka's admin tooling (#37)
    "DescribeLogDirs": (35, 1, 4),
    "AlterReplicaLogDirs": (34, 1, 2),
    "ElectLeaders": (43, 0, 2),
    "AlterPartitionReassignments": (45, 0, 0),
    "ListPartitionReassignments": (46, 0, 0),
    "ListConfigResources": (74, 0, 1),
    "DescribeTopicPartitions": (75, 0, 0),
    # operating transactions (#33, KIP-664)
    "DescribeProducers": (61, 0, 0),
    "DescribeTransactions": (65, 0, 0),
    "ListTransactions": (66, 0, 1),
}

#: data schemas (no api key) -> (min version, max version): the consumer protocol's
#: subscription and assignment, which group members exchange as opaque bytes
DATA = {
    "ConsumerProtocolSubscription": (0, 3),
    "ConsumerProtocolAssignment": (0, 3),
}

MAX_VERSION = 0x7FFF
_PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "int64", "float64",
               "string", "bytes", "records", "uuid"}


def versions(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def load(path: Path) -> dict:
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    return json.loads(text)


def overlaps(v: tuple[int, int] | None, lo: int, hi: int) -> bool:
    return v is not None and v[0] <= hi and v[1] >= lo


def default_of(f: dict, ftype: str):
    d = f.get("default")
    if ftype.startswith("[]"):
        return None if d == "null" else ()
    if d == "null":
        return None
    if ftype == "bool":
        return d in (True, "true")
    if ftype in ("int8", "int16", "uint16", "int32", "int64"):
        return int(d, 0) if isinstance(d, str) else int(d or 0)
    if ftype == "float64":
        return float(d or 0)
    if ftype == "string":
        return d or ""
    if ftype in ("bytes", "records"):
        return b""
    if ftype == "uuid":
        return b"\0" * 16
    return None  # a struct: built from its fields' defaults by the engine


def fields_of(fields: list, common: dict, lo: int, hi: int) -> tuple:
    out = []
    for f in fields:
        v = versions(f.get("versions"))
        if not overlaps(v, lo, hi):
            continue
        ftype = f["type"]
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        sub = None
        if elem not in _PRIMITIVES:
            sub_fields = f.get("fields") or common[elem]
            sub = fields_of(sub_fields, common, lo, hi)
            kind = "[]struct" if ftype.startswith("[]") else "struct"
        else:
            kind = ftype
        nv = versions(f.get("nullableVersions"))
        tv = versions(f.get("taggedVersions")) if "tag" in f else None
        out.append((snake(f["name"]), kind, v[0], min(v[1], MAX_VERSION),
                    nv, f.get("tag"), tv, default_of(f, ftype), sub))
    return tuple(out)


def message(path: Path, lo: int, hi: int) -> dict:
    j = load(path)
    common = {c["name"]: c["fields"] for c in j.get("commonStructs", [])}
    flex = versions(j.get("flexibleVersions"))
    return {"name": j["name"], "flexible_from": flex[0] if flex else None,
            "fields": fields_of(j["fields"], common, lo, hi)}


def main(root: str) -> None:
    base = Path(root) / "clients/src/main/resources/common/message"
    w = sys.stdout.write
    w('"""Kafka request/response layouts for the versions raftlog serves.\n\n'
      "GENERATED by tools/gen_kafka_messages.py from apache/kafka's\n"
      "clients/src/main/resources/common/message/*.json: do not edit by hand.\n\n"
      "A field is ``(name, type, min version, max version, nullable versions, tag,\n"
      "tagged versions, default, sub-fields)``; see raftlog/kafka/wire.py.\n"
      '"""\n\n# ruff: noqa: E501\n\n')
    w("#: api name -> (api key, min version, max version) served\n")
    w(f"ADVERTISED = {ADVERTISED!r}\n\n")
    w("#: (api key, 'request' | 'response') or (name, 'data') -> {'name', 'flexible_from', 'fields'}\n")
    schemas = {}
    for name, (key, lo, hi) in ADVERTISED.items():
        for kind in ("Request", "Response"):
            schemas[(key, kind.lower())] = message(base / f"{name}{kind}.json", lo, hi)
    for name, (lo, hi) in DATA.items():
        schemas[(name, "data")] = message(base / f"{name}.json", lo, hi)
    w("#: data schema name -> (min version, max version)\n")
    w(f"DATA_VERSIONS = {DATA!r}\n\n")
    w("SCHEMAS = " + pprint.pformat(schemas, width=100, compact=True, sort_dicts=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
