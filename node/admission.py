"""Who may hold a connection, and what it may send before it has logged in. No I/O.

Both listeners (node/server.py, node/kafka/server.py) share one :class:`ConnectionQuota`
per node: connections per client address (``max.connections.per.ip`` and its
``max.connections.per.ip.overrides``, as Kafka), counted when a connection is accepted,
before its TLS handshake, so that connections which never send a TLS hello from one
address cannot fill a listener's slots. Each listener keeps its own global cap too.

:class:`LogLimiter` says whether a line about a key (an address) may be logged now: at
most one per key per interval, so refused connections and wrong-port clients cannot
flood the log. :class:`WrongProtocol` is raised by a listener's reader when the first
bytes of a connection are the other protocol's (raftlog/wire_sniff.py).
"""

from __future__ import annotations

import collections

#: Largest frame a connection of a SASL listener may send before it has authenticated
#: (SASL handshake frames are a few hundred bytes); ``max.frame.bytes`` after.
PRE_AUTH_MAX_FRAME_BYTES = 64 * 1024
#: A key is logged at most once per this long (refused connections, wrong-port hints).
LOG_INTERVAL_S = 60.0
#: Keys a LogLimiter remembers at most (the oldest is forgotten first).
MAX_LOGGED_KEYS = 10_000


class WrongProtocol(Exception):
    """A client of the other protocol connected: ``hint`` says where it belongs."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint


class ConnectionQuota:
    """Open connections per client address, refused past the address's limit.

    Memory is bounded by the connections open: an address is forgotten when its last
    connection closes.
    """

    def __init__(self, per_ip: int, overrides: dict[str, int] | None = None):
        assert per_ip >= 0
        self.per_ip = per_ip
        self.overrides = dict(overrides or {})
        assert all(n >= 0 for n in self.overrides.values())
        self._open: dict[str, int] = {}

    def limit(self, ip: str) -> int:
        return self.overrides.get(ip, self.per_ip)

    def count(self, ip: str) -> int:
        return self._open.get(ip, 0)

    def try_acquire(self, ip: str) -> bool:
        """Count one more connection of ``ip``; False (nothing counted): over its limit."""
        n = self._open.get(ip, 0)
        if n >= self.limit(ip):
            return False
        self._open[ip] = n + 1
        return True

    def release(self, ip: str) -> None:
        """One connection of ``ip`` (counted by try_acquire) closed."""
        n = self._open[ip]
        assert n >= 1
        if n == 1:
            del self._open[ip]
        else:
            self._open[ip] = n - 1

    @property
    def total(self) -> int:
        return sum(self._open.values())


class LogLimiter:
    """``allow(key, now)``: True at most once per ``interval_s`` per key."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, max_keys: int = MAX_LOGGED_KEYS):
        assert interval_s >= 0 and max_keys >= 1
        self.interval_s, self.max_keys = interval_s, max_keys
        self._last: collections.OrderedDict[object, float] = collections.OrderedDict()
        #: lines not logged per key since its last logged one (reported with the next)
        self.suppressed: dict[object, int] = {}

    def allow(self, key, now: float) -> bool:
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self.suppressed[key] = self.suppressed.get(key, 0) + 1
            return False
        self._last.pop(key, None)
        self._last[key] = now
        while len(self._last) > self.max_keys:
            old, _ = self._last.popitem(last=False)
            self.suppressed.pop(old, None)
        return True

    def take_suppressed(self, key) -> int:
        """Lines not logged for ``key`` since its last logged one (and reset)."""
        return self.suppressed.pop(key, 0)


def limit_frames_before_auth(decoder) -> None:
    """A connection's frame decoder (raftlog/framing.py) before SASL login."""
    decoder.max_frame_bytes = PRE_AUTH_MAX_FRAME_BYTES
    decoder.limit_name = "the limit before SASL authentication"


def lift_frame_limit(decoder, max_frame_bytes: int) -> None:
    """After login: ``max.frame.bytes``."""
    assert max_frame_bytes > 0
    decoder.max_frame_bytes = max_frame_bytes
    decoder.limit_name = "max.frame.bytes"


def bracket(host: str) -> str:
    """``host`` as in ``host:port`` (an IPv6 address bracketed)."""
    return f"[{host}]" if ":" in host else host


def kafka_on_native_hint(native: str, kafka: str | None) -> str:
    """The hint for a Kafka client on the native listener ``native`` (host:port)."""
    if kafka is None:
        return (f"a Kafka client connected to the native listener {native}; no Kafka "
                "listener is configured: set kafka.listener")
    return (f"a Kafka client connected to the native listener {native}; Kafka clients "
            f"use kafka.listener {kafka}")


def tls_on_plaintext_hint(address: str) -> str:
    """The hint for a TLS client on the plaintext listener ``address`` (host:port)."""
    return (f"a TLS client connected to the plaintext listener {address}: give the client "
            f"security_protocol PLAINTEXT (or SASL_PLAINTEXT), or connect it to a TLS "
            f"listener")


def native_on_kafka_hint(kafka: str, native: str) -> str:
    """The hint for a raftlog (native) client on the Kafka listener ``kafka``."""
    return (f"a raftlog client connected to the Kafka listener {kafka}; raftlog clients "
            f"use the native listener {native} (listeners)")
