"""The node's metrics registry and its Prometheus text exposition (format 0.0.4).

Two kinds of numbers, split by cost:

- **Counters and histograms bumped while serving** live in :class:`NodeMetrics`:
  plain attributes and small lists, incremented a few times per *request* (never per
  record), on the trio thread. A request's latency is one ``bisect`` into fixed
  buckets. No locks, no label lookups on the hot path: a topic's counters are one
  :class:`TopicStats` object found with one dict lookup.
- **Gauges** (partition counts, under-replicated partitions, waiters, log sizes,
  consumer-group lag, controller state) are computed when Prometheus scrapes, from
  the node's own state (:func:`render`), so they cost nothing between scrapes.

prometheus-client is not used: it takes a lock per increment and a label lookup per
labelled child, and the text format is a few lines of code. Every metric this node
exports is declared once in :data:`METRICS` (name, type, help); the Grafana
dashboard in deploy/ is checked against that table.

Series are bounded: per-topic counters exist only for topics that exist (those of
deleted topics are dropped at the next scrape), per-partition gauges only for
partitions this node hosts, and consumer-group lag is capped at
:data:`MAX_LAG_SERIES` series per scrape.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time

from .loopwatch import LoopWatch

#: Request latency buckets, seconds (upper bounds; +Inf is implied).
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                     1.0, 2.5, 5.0, 10.0, 30.0)
#: Consumer-group lag series one scrape reports at most (group x topic x partition).
MAX_LAG_SERIES = 10_000
#: Of those, how many get a lag in seconds (one batch-header read each).
MAX_LAG_SECONDS_SERIES = 1_000

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

#: Every metric family a node exports: name -> (type, help).
METRICS: dict[str, tuple[str, str]] = {
    "raftlog_node_info": (GAUGE, "Always 1; labels: node id, roles, cluster id."),
    "raftlog_up_seconds": (GAUGE, "Seconds since the node started."),
    "raftlog_connections": (GAUGE, "Client connections open now."),
    "raftlog_request_duration_seconds": (
        HISTOGRAM, "Time from reading a request to its answer being ready, per API "
                   "(includes long-poll and acks=all waits)."),
    "raftlog_request_errors_total": (COUNTER, "Requests answered with a whole-request error."),
    "raftlog_topic_bytes_in_total": (COUNTER, "Record-batch bytes appended as leader (produce)."),
    "raftlog_topic_records_in_total": (COUNTER, "Records appended as leader (produce)."),
    "raftlog_topic_bytes_out_total": (COUNTER, "Record-batch bytes served to consumers."),
    "raftlog_topic_records_out_total": (
        COUNTER, "Offsets served to consumers (records, counting compaction gaps)."),
    "raftlog_replication_bytes_out_total": (COUNTER, "Record-batch bytes served to followers."),
    "raftlog_purgatory_waiters": (
        GAUGE, "Parked requests: kind=fetch (long-polls) or kind=produce (acks=all)."),
    "raftlog_partitions": (GAUGE, "Partition replicas hosted here, by role."),
    "raftlog_under_replicated_partitions": (
        GAUGE, "Partitions led here whose ISR is smaller than their replica set."),
    "raftlog_under_min_isr_partitions": (
        GAUGE, "Partitions led here whose ISR is below min.insync.replicas."),
    "raftlog_offline_partitions": (
        GAUGE, "Partitions without a leader (reported by the active controller only)."),
    "raftlog_isr_shrinks_total": (
        COUNTER, "ISR shrinks of partitions led here (by the leader or the controller)."),
    "raftlog_isr_expands_total": (COUNTER, "ISR expansions of partitions led here."),
    "raftlog_fetch_sessions_created_total": (
        COUNTER, "Followers' fetch sessions opened here (a full fetch naming every "
        "partition: one per follower connection)."),
    "raftlog_leader_elections_total": (
        COUNTER, "Times this node became the leader of a partition (new leader epoch)."),
    "raftlog_controller_active": (GAUGE, "1 on the active controller (Raft leader), else 0."),
    "raftlog_controller_epoch": (GAUGE, "Raft term of the metadata quorum as seen here."),
    "raftlog_controller_elections_total": (
        COUNTER, "Times this node became the active controller."),
    "raftlog_metadata_commit_seconds": (
        HISTOGRAM, "Time for a metadata write proposed here to commit through the quorum."),
    "raftlog_pysyncobj_critical_log_lines_total": (
        COUNTER, "CRITICAL lines pysyncobj logged in this process (0 when healthy)."),
    "raftlog_event_loop_step_max_seconds": (
        GAUGE, "Longest single event-loop task step (time one task held the node's trio "
               "loop) since the previous scrape."),
    "raftlog_event_loop_slow_steps_total": (
        COUNTER, "Event-loop task steps longer than 50 ms since the node started."),
    "raftlog_log_syncs_total": (
        COUNTER, "fdatasyncs of durable logs' group commits (write.caching=false), by "
                 "where they ran: mode=inline (on the event loop) or threaded."),
    "raftlog_log_sync_mean_seconds": (
        GAUGE, "Running mean of those syncs' durations (what decides inline or threaded)."),
    "raftlog_log_size_bytes": (GAUGE, "Bytes of a partition's log segments on disk."),
    "raftlog_log_segments": (GAUGE, "Segments of a partition's log."),
    "raftlog_log_end_offset": (GAUGE, "A partition's log end offset."),
    "raftlog_high_watermark": (GAUGE, "A partition's high watermark."),
    "raftlog_consumer_group_lag_records": (
        GAUGE, "High watermark minus committed offset, for groups coordinated here "
               "and partitions hosted here."),
    "raftlog_consumer_group_lag_seconds": (
        GAUGE, "Age of the first record after the committed offset (0 when caught up)."),
}


class Histogram:
    """Fixed-bucket histogram: ``observe`` is one bisect and three additions.

    Not thread-safe (trio thread only); see :class:`LockedHistogram`.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple = LATENCY_BUCKETS_S):
        assert list(bounds) == sorted(bounds) and len(set(bounds)) == len(bounds), bounds
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> tuple[list, float]:
        """(cumulative counts per bound, +Inf last; sum)."""
        out, total = [], 0
        for c in self.counts:
            total += c
            out.append(total)
        return out, self.sum


class LockedHistogram(Histogram):
    """A histogram observed from worker threads (metadata writes run in them)."""

    __slots__ = ("_lock",)

    def __init__(self, bounds: tuple = LATENCY_BUCKETS_S):
        super().__init__(bounds)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            Histogram.observe(self, value)

    def snapshot(self) -> tuple[list, float]:
        with self._lock:
            return Histogram.snapshot(self)


class TopicStats:
    """One topic's traffic counters (bumped once per partition per request)."""

    __slots__ = ("bytes_in", "records_in", "bytes_out", "records_out")

    def __init__(self) -> None:
        self.bytes_in = self.records_in = self.bytes_out = self.records_out = 0


class NodeMetrics:
    """The counters a node bumps while serving (trio thread only). Request stats are
    keyed by API (a ``raftlog.protocol.Api``; its name is the label)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        #: {api: Histogram} of request latencies; created on an API's first request
        self.requests: dict = {}
        #: {api: whole-request errors}
        self.request_errors: dict = {}
        self.topics: dict[str, TopicStats] = {}
        self.replication_bytes_out = 0
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.fetch_sessions_created = 0
        self.leader_elections = 0
        #: the trio Instrument timing every task step (added by node.py)
        self.loop = LoopWatch()

    def topic(self, name: str) -> TopicStats:
        """The counters of ``name`` (created on first use)."""
        ts = self.topics.get(name)
        if ts is None:
            ts = self.topics[name] = TopicStats()
        return ts

    def request_done(self, api, seconds: float, error: bool = False) -> None:
        """One request of ``api`` answered after ``seconds``."""
        h = self.requests.get(api)
        if h is None:
            h = self.requests[api] = Histogram()
        h.observe(seconds)
        if error:
            self.request_errors[api] = self.request_errors.get(api, 0) + 1

    def forget_topics(self, existing) -> None:
        """Drop the counters of topics no longer in ``existing`` (deleted)."""
        for name in [n for n in self.topics if n not in existing]:
            del self.topics[name]


# --------------------------------------------------------------------------- exposition


def escape_label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(labels: dict | None) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


class Exposition:
    """Builds the text format: families in the order first written, each with its
    HELP and TYPE lines once."""

    def __init__(self) -> None:
        self._families: dict[str, list[str]] = {}

    def _family(self, name: str) -> list[str]:
        lines = self._families.get(name)
        if lines is None:
            kind, help_text = METRICS[name]
            lines = self._families[name] = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        return lines

    def sample(self, name: str, value, labels: dict | None = None) -> None:
        self._family(name).append(f"{name}{_labels(labels)} {format_value(value)}")

    def declare(self, name: str) -> None:
        """A family with no samples (yet): HELP and TYPE only."""
        self._family(name)

    def histogram(self, name: str, h: Histogram, labels: dict | None = None) -> None:
        lines = self._family(name)
        cumulative, total = h.snapshot()
        base = dict(labels or {})
        for bound, c in zip((*h.bounds, math.inf), cumulative):
            lines.append(f"{name}_bucket{_labels({**base, 'le': format_value(float(bound))})} {c}")
        lines.append(f"{name}_sum{_labels(base)} {format_value(total)}")
        lines.append(f"{name}_count{_labels(base)} {cumulative[-1]}")

    def text(self) -> str:
        return "\n".join(line for lines in self._families.values() for line in lines) + "\n"


# --------------------------------------------------------------------------- scrape


def render(node) -> str:
    """The node's metrics as Prometheus text. ``node``: a running ``Node`` (its
    counters, replica manager, server, store and group host are read here, on the
    trio thread)."""
    replicas, server, store = node.replicas, node.server, node.store
    m: NodeMetrics = node.metrics
    out = Exposition()
    c = replicas.config
    out.sample("raftlog_node_info", 1, {"node_id": c.node_id, "roles": ",".join(c.process_roles),
                                        "cluster_id": c.cluster_id})
    out.sample("raftlog_up_seconds", round(time.monotonic() - m.started, 3))
    out.sample("raftlog_connections", server.connections if server is not None else 0)
    step_s, _task = m.loop.take_max()
    out.sample("raftlog_event_loop_step_max_seconds", round(step_s, 6))
    out.sample("raftlog_event_loop_slow_steps_total", m.loop.slow_steps)
    _requests(out, m)
    _traffic(out, m, store)
    _waiters(out, server)
    _partitions(out, m, replicas, store)
    _controller(out, store)
    _logs(out, replicas)
    _group_lag(out, node.broker.groups, replicas)
    return out.text()


def _requests(out: Exposition, m: NodeMetrics) -> None:
    out.declare("raftlog_request_duration_seconds")
    for api, h in sorted(m.requests.items(), key=lambda kv: _api_name(kv[0])):
        out.histogram("raftlog_request_duration_seconds", h, {"api": _api_name(api)})
    out.declare("raftlog_request_errors_total")
    for api, n in sorted(m.request_errors.items(), key=lambda kv: _api_name(kv[0])):
        out.sample("raftlog_request_errors_total", n, {"api": _api_name(api)})


def _api_name(api) -> str:
    return getattr(api, "name", str(api))


def _traffic(out: Exposition, m: NodeMetrics, store) -> None:
    m.forget_topics(store.topics)
    for name in ("raftlog_topic_bytes_in_total", "raftlog_topic_records_in_total",
                 "raftlog_topic_bytes_out_total", "raftlog_topic_records_out_total"):
        out.declare(name)
    for topic in sorted(m.topics):
        ts, lb = m.topics[topic], {"topic": topic}
        out.sample("raftlog_topic_bytes_in_total", ts.bytes_in, lb)
        out.sample("raftlog_topic_records_in_total", ts.records_in, lb)
        out.sample("raftlog_topic_bytes_out_total", ts.bytes_out, lb)
        out.sample("raftlog_topic_records_out_total", ts.records_out, lb)
    out.sample("raftlog_replication_bytes_out_total", m.replication_bytes_out)


def _waiters(out: Exposition, server) -> None:
    fetch = produce = 0
    if server is not None:
        for op in server.purgatory.live_ops():
            req = getattr(op, "req", None)
            if req is None:
                continue
            if req.api.name == "FETCH":
                fetch += 1
            elif req.api.name == "PRODUCE":
                produce += 1
    out.sample("raftlog_purgatory_waiters", fetch, {"kind": "fetch"})
    out.sample("raftlog_purgatory_waiters", produce, {"kind": "produce"})


def _partitions(out: Exposition, m: NodeMetrics, replicas, store) -> None:
    leaders = followers = under = under_min = 0
    for (topic, _p), part in list(replicas.partitions.items()):
        if not part.is_leader:
            followers += 1
            continue
        leaders += 1
        if len(part.isr) < len(part.replicas):
            under += 1
        try:
            if len(part.isr) < replicas.min_insync_replicas(topic):
                under_min += 1
        except KeyError:  # a topic being removed
            pass
    out.sample("raftlog_partitions", leaders, {"role": "leader"})
    out.sample("raftlog_partitions", followers, {"role": "follower"})
    out.sample("raftlog_under_replicated_partitions", under)
    out.sample("raftlog_under_min_isr_partitions", under_min)
    offline = 0
    if store.quorum.is_leader:
        offline = sum(1 for info in store.topics.values() for p in info.partitions
                      if p.leader < 0)
    out.sample("raftlog_offline_partitions", offline)
    out.sample("raftlog_isr_shrinks_total", m.isr_shrinks)
    out.sample("raftlog_isr_expands_total", m.isr_expands)
    out.sample("raftlog_fetch_sessions_created_total", m.fetch_sessions_created)
    out.sample("raftlog_leader_elections_total", m.leader_elections)


def _controller(out: Exposition, store) -> None:
    q = store.quorum  # (a single node's too: the only voter of its own quorum)
    active, epoch = int(q.is_leader), q.term
    elections, critical = q.controller_elections, q.critical_log_lines
    commit = store.commit_seconds
    out.sample("raftlog_controller_active", active)
    out.sample("raftlog_controller_epoch", epoch)
    out.sample("raftlog_controller_elections_total", elections)
    out.histogram("raftlog_metadata_commit_seconds", commit)
    out.sample("raftlog_pysyncobj_critical_log_lines_total", critical)


def _logs(out: Exposition, replicas) -> None:
    policy = replicas.logs.syncs.policy
    out.sample("raftlog_log_syncs_total", policy.inline, {"mode": "inline"})
    out.sample("raftlog_log_syncs_total", policy.threaded, {"mode": "threaded"})
    out.sample("raftlog_log_sync_mean_seconds", round(policy.mean_s, 6))
    for name in ("raftlog_log_size_bytes", "raftlog_log_segments", "raftlog_log_end_offset",
                 "raftlog_high_watermark"):
        out.declare(name)
    for (topic, p), part in sorted(replicas.partitions.items()):
        log, lb = part.log, {"topic": topic, "partition": p}
        out.sample("raftlog_log_size_bytes", log.size_bytes, lb)
        out.sample("raftlog_log_segments", log.segment_count, lb)
        out.sample("raftlog_log_end_offset", log.log_end_offset, lb)
        out.sample("raftlog_high_watermark", part.high_watermark, lb)


def group_lag_rows(groups, partitions, now_ms: int, max_rows: int = MAX_LAG_SERIES,
                   max_seconds: int = MAX_LAG_SECONDS_SERIES) -> list:
    """``[(group, topic, partition, lag records, lag seconds or None)]`` for the
    groups of loaded coordinator partitions (``groups``: the GroupCoordinator) and
    the partitions hosted here (``partitions``: {(topic, p): Partition}).

    Lag in records is the high watermark minus the committed offset (never below
    0); in seconds, the age of the first record after the committed offset (0 when
    caught up, None past ``max_seconds`` rows or when it cannot be read)."""
    rows: list = []
    seconds_left = max_seconds
    for gid in sorted(groups.groups):
        if not groups.partitions.get(groups.partition_for(gid)):
            continue  # loading, or no longer coordinated here
        for (topic, p), c in sorted(groups.groups[gid].offsets.items()):
            part = partitions.get((topic, p))
            if part is None:
                continue
            lag = max(0, part.high_watermark - c.offset)
            secs = 0.0 if lag == 0 else None
            if lag and seconds_left > 0:
                seconds_left -= 1
                secs = _age_s(part, c.offset, now_ms)
            rows.append((gid, topic, p, lag, secs))
            if len(rows) >= max_rows:
                return rows
    return rows


def _age_s(part, offset: int, now_ms: int) -> float | None:
    """Seconds since the first timestamp of the batch holding ``offset``."""
    from raftlog import records

    try:
        sl = part.log.read(offset, 1, max_offset=part.high_watermark)
        if not sl.length:
            return None
        head = (bytes(sl.cached[:records.HEADER_SIZE]) if sl.cached is not None
                else os.pread(sl.fileno, records.HEADER_SIZE, sl.position))
        h = records.read_header(head)
    except Exception:  # noqa: BLE001 -- retention moved the start, a corrupt batch: no value
        return None
    return max(0.0, (now_ms - h.first_timestamp) / 1000)


def _group_lag(out: Exposition, host, replicas) -> None:
    out.declare("raftlog_consumer_group_lag_records")
    out.declare("raftlog_consumer_group_lag_seconds")
    if host is None:
        return
    now_ms = int(time.time() * 1000)
    for gid, topic, p, lag, secs in group_lag_rows(host.coordinator, replicas.partitions, now_ms):
        lb = {"group": gid, "topic": topic, "partition": p}
        out.sample("raftlog_consumer_group_lag_records", lag, lb)
        if secs is not None:
            out.sample("raftlog_consumer_group_lag_seconds", round(secs, 3), lb)
