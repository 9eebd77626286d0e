"""Topic (log) configuration with Kafka's key names.

``LogConfig.from_dict({"retention.ms": "604800000"})`` accepts strings or ints and
raises :class:`~raftlog.errors.ConfigError` naming the key for unknown keys and bad
values. Python keyword arguments use the same words in snake_case.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from raftlog.errors import ConfigError, did_you_mean

_DAY_MS = 24 * 3600 * 1000
_POLICIES = ("delete", "compact", "compact,delete")
#: topic compression.type values (Kafka's, without snappy)
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    #: fsync after this many messages; None = never by count (periodic flush + replication).
    flush_messages: int | None = None
    #: fsync when unflushed data is this old; None = never by time.
    flush_ms: int | None = None
    max_message_bytes: int = 1024 * 1024 + 12
    min_insync_replicas: int = 1
    message_timestamp_type: str = "CreateTime"
    unclean_leader_election_enable: bool = False
    #: the codec a leader stores batches in (Kafka's): "producer" keeps each batch as
    #: its producer compressed it (raftlog/recompress.py)
    compression_type: str = "producer"
    #: False (durable, the default): a write is acknowledged, and consumers see it,
    #: only once every in-sync replica has fsynced it (group commit). True: once they
    #: have it in the page cache, fsynced per flush.* and the node's periodic flush
    #: (Kafka's behaviour). Redpanda's name and meaning.
    write_caching: bool = False

    def __post_init__(self) -> None:
        _check_range("segment.bytes", self.segment_bytes, 1024, 2**31 - 1)
        _check_range("segment.ms", self.segment_ms, 1, 2**62)
        _check_range("index.interval.bytes", self.index_interval_bytes, 0, 2**31 - 1)
        _check_range("retention.ms", self.retention_ms, -1, 2**62)
        _check_range("retention.bytes", self.retention_bytes, -1, 2**62)
        _check_range("delete.retention.ms", self.delete_retention_ms, 0, 2**62)
        _check_range("min.compaction.lag.ms", self.min_compaction_lag_ms, 0, 2**62)
        _check_range("max.message.bytes", self.max_message_bytes, 64, 64 * 1024 * 1024)
        _check_range("min.insync.replicas", self.min_insync_replicas, 1, 1000)
        if self.flush_messages is not None:
            _check_range("flush.messages", self.flush_messages, 1, 2**62)
        if self.flush_ms is not None:
            _check_range("flush.ms", self.flush_ms, 0, 2**62)
        if self.cleanup_policy not in _POLICIES:
            raise ConfigError(f"cleanup.policy: {self.cleanup_policy!r} is not one of {_POLICIES}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ConfigError(f"compression.type: {self.compression_type!r} is not one of "
                              f"{', '.join(COMPRESSION_TYPES)} (snappy: not as a topic's "
                              "codec here; use lz4, zstd or gzip)")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(
                f"message.timestamp.type: {self.message_timestamp_type!r} is not CreateTime or LogAppendTime"
            )

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_dict(cls, conf: dict | None) -> LogConfig:
        """Build from Kafka-named keys (``retention.ms``) with str or int values."""
        kw = {}
        for key, value in (conf or {}).items():
            name = key.replace(".", "_")
            kind = _TYPES.get(name)
            if kind is None:
                raise ConfigError(f"unknown topic config {key!r}{did_you_mean(key, KEYS)}; "
                                  f"known: {', '.join(KEYS)}")
            kw[name] = _convert(key, value, kind)
        if "cleanup_policy" in kw:  # a list: "compact, delete" is "compact,delete"
            kw["cleanup_policy"] = ",".join(sorted({p.strip() for p in
                                                    kw["cleanup_policy"].split(",")}))
        return cls(**kw)

    def to_dict(self) -> dict[str, str]:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name.replace("_", ".")] = (
                "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
            )
        return out


def _check_range(key: str, v, lo: int, hi: int) -> None:
    if type(v) is not int or not lo <= v <= hi:
        raise ConfigError(f"{key}: {v!r} is not an integer in [{lo}, {hi}]")


def _convert(key: str, value, kind):
    if kind is str:
        return str(value)
    if kind is bool:
        s = str(value).strip().lower()
        if s in ("true", "false"):
            return s == "true"
        raise ConfigError(f"{key}: {value!r} is not true or false")
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if kind == "optint":
            return None
        raise ConfigError(f"{key}: a value is required")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not an integer") from None


_TYPES = {
    f.name: (
        str
        if f.type == "str"
        else bool
        if f.type == "bool"
        else "optint"
        if "None" in f.type
        else int
    )
    for f in fields(LogConfig)
}
#: Every topic config key.
KEYS = tuple(f.name.replace("_", ".") for f in fields(LogConfig))
