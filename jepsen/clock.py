"""Node wall clocks the ``clock`` nemesis moves, and what a run checks about time.

Each node runs under libfaketime (Debian's ``faketime`` package) in its multithreaded
flavour, LD_PRELOADed with

- ``FAKETIME_TIMESTAMP_FILE=<node home>/faketime.rc``: the offset, e.g. ``+300`` or
  ``-90`` seconds, relative to the real clock. The nemesis rewrites the file; each
  process re-reads it at most ``FAKETIME_CACHE_DURATION`` (1 s) later, so a jump lands
  within about two seconds of the nemesis's ``start``;
- ``FAKETIME_DONT_FAKE_MONOTONIC=1``: only CLOCK_REALTIME moves. ``time.time()``
  moves everywhere in the node -- its ``wall_ms`` (retention, flush.ms, LogAppendTime),
  group offset expiry, log lines, and inside pysyncobj -- while the monotonic clock,
  which trio (``node_ms``: ISR lag, broker sessions, fencing, request timeouts) and
  pysyncobj's election and heartbeat timers use, does not. The harness and its
  clients (CreateTime stamps, the SDK's timeouts) keep the real clock.

libfaketime 0.9.10 makes ``clock_nanosleep`` fail with EINVAL when the monotonic clock
is not faked, and Python's ``time.sleep`` uses it (pysyncobj's tick thread sleeps): the
node is therefore started through :data:`BOOT`, which replaces ``time.sleep`` with a
``select`` timeout (unaffected) before it runs ``raftlog.node``.

Checks (:func:`check_timestamps`, after the run, clocks back to real time): in every
workload partition, ListOffsets by timestamp returns, for every probed timestamp, the
first offset whose record timestamp is at or after it -- computed from the records
themselves, whose LogAppendTime timestamps go back and forth with the clocks of the
leaders that stamped them. Retention (``retention.ms`` of the run's topic, 30 min,
checked every second) must delete no segment while every jump is shorter: a deleted
one shows up as lost acknowledged sends. That is all Kafka promises too: it deletes a
segment once ``now - (largest timestamp in it) > retention.ms`` by the broker's wall
clock, so a forward jump of J deletes every closed segment older than
``retention.ms - J``, and a leader's clock ahead by J keeps its segments J longer.

Consumer-group sessions and rebalance deadlines ran on the wall clock (one ``now_ms``
for member heartbeats and for the persisted commit and state timestamps alike): a
forward jump on a group coordinator expired every member's session at its next tick, a
backward one held expiry off for as long as the jump. The coordinator's clock is now a
``SteadyWallClock`` (node/clock.py): the wall clock at start, advancing with the
monotonic clock. (Kafka's classic coordinator stamps heartbeats with the wall clock.)
"""

from __future__ import annotations

import glob
import os
import random
import time

from raftlog.errors import ApiError

#: Where Debian's faketime package puts the library (multithreaded flavour first).
LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
RC_FILE = "faketime.rc"
#: Seconds a process caches the offset file.
CACHE_S = 1
#: Offsets the nemesis applies: minutes, either way.
OFFSET_S = (60, 600)
#: Topic config of a clock run's workload topic (see the module docstring).
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime", "retention.ms": 30 * 60_000}
#: Node config of a clock run: retention checked every second, not every 5 minutes.
NODE_CONFIG = {"log.retention.check.interval.ms": 1000}
#: Timestamps probed per partition by check_timestamps.
PROBES = 150
#: How long one lookup retries a retriable error (no leader yet after the restart).
LOOKUP_RETRY_S = 30

BOOT = (
    "import select, sys, time, runpy\n"
    "def _sleep(s):\n"
    "    if s > 0:\n"
    "        select.select([], [], [], s)\n"
    "time.sleep = _sleep\n"
    "runpy.run_module('raftlog.node', run_name='__main__', alter_sys=True)\n"
)


def find_libfaketime() -> str | None:
    for pattern in LIBFAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


class Clocks:
    """Each node's wall-clock offset (seconds), through its faketime.rc file."""

    def __init__(self, homes: dict[int, str]):
        """``homes``: {node id: home dir}. RuntimeError when libfaketime is missing."""
        self.lib = find_libfaketime()
        if self.lib is None:
            raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
        self.files = {i: os.path.join(h, RC_FILE) for i, h in homes.items()}
        self.offsets = {i: 0 for i in homes}
        #: every change: (node id, offset s)
        self.changes: list[tuple[int, int]] = []
        for i in homes:
            os.makedirs(homes[i], exist_ok=True)
            self._write(i, 0)

    def wrap(self, node_id: int, argv: list[str]) -> list[str]:
        """``argv`` of ``python -m raftlog.node ...`` run under libfaketime."""
        assert argv[1:3] == ["-m", "raftlog.node"], argv
        return ["env", f"LD_PRELOAD={self.lib}",
                f"FAKETIME_TIMESTAMP_FILE={self.files[node_id]}",
                "FAKETIME_DONT_FAKE_MONOTONIC=1", f"FAKETIME_CACHE_DURATION={CACHE_S}",
                argv[0], "-c", BOOT, *argv[3:]]

    def set(self, node_id: int, offset_s: int) -> None:
        self._write(node_id, offset_s)
        self.offsets[node_id] = offset_s
        self.changes.append((node_id, offset_s))

    def reset(self) -> None:
        for i, off in self.offsets.items():
            if off:
                self.set(i, 0)

    def _write(self, node_id: int, offset_s: int) -> None:
        path = self.files[node_id]
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{offset_s:+d}\n")
        os.replace(tmp, path)  # a process never reads half a file

    def stats(self) -> dict:
        jumps = [off for _i, off in self.changes]
        return {"jumps": len(jumps), "max_offset_s": max((abs(o) for o in jumps), default=0),
                "changes": self.changes[:50]}


def random_offset(rnd: random.Random) -> int:
    return rnd.choice((-1, 1)) * rnd.randint(*OFFSET_S)


# ----------------------------------------------------------------------------- checks


def read_timestamps(cluster, key: str) -> list[tuple[int, int]]:
    """[(offset, timestamp)] of one partition, from its log start to its HW."""
    from raftlog.client import Consumer, TopicPartition

    from .workloads import split_key

    tp = TopicPartition(*split_key(key))
    c = Consumer(cluster.bootstrap, auto_offset_reset="earliest", request_timeout_ms=5000,
                 fetch_max_wait_ms=100, **cluster.client_options)
    out: list[tuple[int, int]] = []
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        c.seek_to_beginning(tp)
        idle = 0
        while c.position(tp) < end and idle < 50:
            recs = c.poll(timeout_ms=300, max_records=10_000)
            idle = 0 if recs else idle + 1
            out += [(r.offset, r.timestamp) for r in recs]
    finally:
        c.close()
    return out


def expected_offset(recs: list[tuple[int, int]], target: int) -> int | None:
    """The first offset whose timestamp is >= ``target`` (records in offset order)."""
    for o, ts in recs:
        if ts >= target:
            return o
    return None


def probe_targets(recs: list[tuple[int, int]], rnd: random.Random) -> list[int]:
    """Timestamps to look up: records' own, one past some, and both ends beyond."""
    tss = sorted({ts for _o, ts in recs})
    targets = set(rnd.sample(tss, min(PROBES, len(tss))))
    targets |= {t + 1 for t in rnd.sample(tss, min(PROBES // 3, len(tss)))}
    targets |= {tss[0] - 60_000, tss[0], tss[-1], tss[-1] + 1}
    return sorted(targets)


def wrong_lookups(key: str, recs: list[tuple[int, int]], targets: list[int],
                  lookup) -> list[dict]:
    """``lookup(t) -> (offset, timestamp) | None`` against :func:`expected_offset`."""
    out = []
    for t in targets:
        got = lookup(t)
        want = expected_offset(recs, t)
        if (got[0] if got else None) != want:
            out.append({"key": key, "timestamp": t, "returned": got[0] if got else None,
                        "returned_timestamp": got[1] if got else None, "expected": want})
    return out


def check_timestamps(cluster, keys: list[str], rnd: random.Random) -> tuple[dict, dict]:
    """(anomalies, stats): ListOffsets by timestamp against the records themselves.

    Anomaly ``timestamp-lookup``: the offset the cluster returned for a timestamp is
    not the first one at or after it (the time index lied, or a lookup skipped a
    segment whose timestamps went backwards)."""
    from raftlog.client import Consumer, TopicPartition

    from .workloads import split_key

    anomalies: dict = {}
    st = {"records_with_timestamps": 0, "timestamp_lookups": 0, "timestamp_regressions": 0,
          "timestamp_span_s": {}}
    for key in keys:
        recs = read_timestamps(cluster, key)
        st["records_with_timestamps"] += len(recs)
        if not recs:
            continue
        st["timestamp_regressions"] += sum(1 for a, b in zip(recs, recs[1:]) if b[1] < a[1])
        stamps = [ts for _o, ts in recs]
        st["timestamp_span_s"][key] = round((max(stamps) - min(stamps)) / 1000, 1)
        targets = probe_targets(recs, rnd)
        tp = TopicPartition(*split_key(key))
        c = Consumer(cluster.bootstrap, request_timeout_ms=5000, **cluster.client_options)

        def lookup(t, c=c, tp=tp):
            deadline = time.monotonic() + LOOKUP_RETRY_S
            while True:  # (a leader elected after the final restart: retriable)
                try:
                    got = c.offsets_for_times({tp: t})[tp]
                    return (got.offset, got.timestamp) if got else None
                except ApiError as e:
                    if not e.retriable or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)

        try:
            bad = wrong_lookups(key, recs, targets, lookup)
        finally:
            c.close()
        st["timestamp_lookups"] += len(targets)
        if bad:
            anomalies.setdefault("timestamp-lookup", []).extend(bad)
    return anomalies, st
