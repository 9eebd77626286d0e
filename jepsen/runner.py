"""``raftlog-jepsen run``: start a cluster, run a workload under faults, check, report."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

from raftlog.node.transactions import TRANSACTION_STATE_TOPIC

from . import checkers, report
from .availability import availability
from .disks import DISK_MB
from .history import History
from .lazyfs import LazyFSUnavailable
from .linear import check_metadata
from .nemesis import KINDS, Nemesis, schedule, targets_for
from .txn_checker import check_txn
from .workloads import NotAvailable, make, split_key

FINAL_READ_TIMEOUT_S = 60.0
#: Share of the default schedule's ``leader`` faults aimed at the controller (the
#: rest hit a workload partition's leader; see LeaderObserver.leader).
CONTROLLER_SHARE = 0.25

#: The node's planted bugs (its config key ``test.flags``, see the README's harness
#: section): named here, not imported -- the harness sees nodes only as processes. A
#: node refuses a flag it does not know, so a stale name fails loudly either way.
PLANTED_BUGS = frozenset({
    "bug-ack-before-replication",
    "bug-serve-beyond-hw",
    "bug-skip-truncation",
    "bug-ack-before-commit",
    "bug-ack-before-fsync",
    # the txn workload's (issue 33)
    "bug-skip-txn-verification",
    "bug-lso-ignores-open-txn",
    "bug-marker-before-prepare-durable",
})


def _in_flight(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of sends (1 to 1000)") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{n}: sends in flight per sender must be 1 to 1000")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raftlog-jepsen",
                                description="raftlog safety harness (Jepsen-style).")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a workload under faults and check the history")
    r.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    r.add_argument("--workload", default="queue",
                   choices=("queue", "idempotent", "groups", "metadata", "txn"))
    r.add_argument("--nemesis", default="kill,pause,partition",
                   help=f"comma-separated faults among {','.join(KINDS)}, or 'none'. "
                        "powerloss: SIGKILL one node, a minority, a majority or all of "
                        "them and drop every write and directory entry their filesystems "
                        "had not fsynced (each node's log dir on its own lazyfs FUSE "
                        "mount: root, /dev/fuse, fuse3); nothing acknowledged may be "
                        "lost (write.caching=false, the default); with topics at "
                        "write.caching=true a power loss of all nodes may lose "
                        "acknowledged unsynced records, reported as lost-unsynced")
    r.add_argument("--time", type=float, default=60.0, help="seconds of workload (default 60)")
    r.add_argument("--rate", type=float, default=200.0, help="operations per second, total")
    r.add_argument("--seed", type=int, default=None, help="seed of the schedule (default random)")
    r.add_argument("--out", default=None, help="output directory (default jepsen-out/<time>)")
    r.add_argument("--replication-factor", type=int, default=3,
                   help="of the workload's topics (default 3; falls back to 1, loudly, "
                        "when the cluster refuses it)")
    r.add_argument("--min-insync-replicas", type=int, default=2)
    r.add_argument("--partitions", type=int, default=None,
                   help="partitions of the workload topic (default 2; groups: 4)")
    r.add_argument("--senders", type=int, default=4, help="sender (or metadata) processes")
    r.add_argument("--in-flight", type=_in_flight, default=64, dest="in_flight",
                   help="sends each sender of queue, idempotent and groups keeps outstanding "
                        "(default 64; each its own history process): an application's producer "
                        "sends on to the other partitions while one fails over. 1: each "
                        "sender waits for its send before the next (Jepsen's one operation "
                        "per process)")
    r.add_argument("--consumers", type=int, default=None,
                   help="consumer processes (queue, idempotent; default 2), or members per "
                        "group (groups; default 3)")
    r.add_argument("--groups", type=int, default=2,
                   help="consumer groups (groups workload; even ones auto-commit, odd ones "
                        "commit by hand)")
    r.add_argument("--member-lifetime", type=str, default="4,10",
                   help="seconds a group member lives before it is closed and created again "
                        "(a rebalance): lo,hi (0,0: never)")
    r.add_argument("--node-flag", action="append", default=[], metavar="FLAG",
                   help="a test.flags value for every node (repeatable), e.g. a planted bug: "
                        "bug-ack-before-replication, bug-serve-beyond-hw, bug-skip-truncation, "
                        "bug-ack-before-fsync; with --workload txn: "
                        "bug-skip-txn-verification, bug-lso-ignores-open-txn, "
                        "bug-marker-before-prepare-durable")
    r.add_argument("--node-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a node config setting for every node (repeatable), e.g. "
                        "auto.leader.rebalance.enable=false; a topic config key (e.g. "
                        "flush.messages=1) sets every node's default for it (log.KEY)")
    r.add_argument("--poll-fraction", type=float, default=0.0, help=argparse.SUPPRESS)
    r.add_argument("--topics", type=int, default=3, help="topic names (metadata workload)")
    r.add_argument("--security-protocol", default="PLAINTEXT", choices=("PLAINTEXT", "SASL_SSL"),
                   help="SASL_SSL: TLS + SCRAM on every listener (clients and replication)")
    r.add_argument("--net", default="auto", choices=("auto", "iptables", "proxy", "none"),
                   help="network fault mechanism: iptables (kernel, all traffic; root), proxy "
                        "(userspace, Raft links only), auto (iptables when root allows, else "
                        "proxy), none")
    r.add_argument("--targets", default="",
                   help="comma-separated fault targets to keep (default all), e.g. "
                        "leader,isolate-leader; see nemesis.TARGETS")
    r.add_argument("--legacy-targets", action="store_true",
                   help="aim the default mix as before it was leader-aware (a comparison)")
    r.add_argument("--quiet", type=str, default="2,4", help="seconds between faults: lo,hi")
    r.add_argument("--hold", type=str, default="3,6", help="seconds a fault lasts: lo,hi")
    r.add_argument("--segment-bytes", type=int, default=None,
                   help="segment.bytes of the queue topic (default: 65536 with the corrupt "
                        "nemesis, else the topic default)")
    r.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a config of the queue workload's topic (repeatable), e.g. "
                        "retention.ms=600000")
    r.add_argument("--keep-data", action="store_true", help="keep node data dirs")
    c = sub.add_parser("check", help="re-check a run directory (history.jsonl, final.json)")
    c.add_argument("dir")
    from . import rates

    rates.add_parser(sub)
    return p


def node_config_key(key: str) -> str:
    """A topic config key given to --node-config becomes the node's default for it
    (``flush.messages`` -> ``log.flush.messages``); node keys stay as they are."""
    import dataclasses

    from raftlog.config import LogConfig

    topic_keys = {f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}
    if key in topic_keys - {"min.insync.replicas", "unclean.leader.election.enable"}:
        return "log." + key
    return key


def unsynced_loss_documented(node_config: dict, topic_config: dict | None = None) -> bool:
    """Whether a power loss of every node may lose acknowledged records: only when the
    topics run with ``write.caching=true`` (#34; from ``topic_config``, the workload
    topic's, else the nodes' default) and without an fsync per batch
    (``flush.messages`` is not 1). With write.caching=false, the default, an
    acknowledged record lost is an anomaly (``lost``), whatever lost power."""
    topic_config = topic_config or {}
    caching = topic_config.get("write.caching", node_config.get(
        "log.write.caching", node_config.get("write.caching.default", "false")))
    if str(caching).strip().lower() != "true":
        return False
    per_batch = topic_config.get("flush.messages", node_config.get("log.flush.messages", ""))
    return str(per_batch).strip() != "1"


def _pair(s: str) -> tuple[float, float]:
    a, b = s.split(",")
    return float(a), float(b)


class Log:
    def __init__(self, path: str):
        self.f = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.2f}s] {msg}"
        with self.lock:
            print(line, file=sys.stderr, flush=True)
            self.f.write(line + "\n")
            self.f.flush()


# ----------------------------------------------------------------------------- observer


class LeaderObserver:
    """Asks every node, one at a time, who leads each partition in which epoch; the
    answers feed the leader-safety checker (at most one leader per epoch)."""

    def __init__(self, cluster, topic: str | None, interval_s: float = 0.5):
        self.cluster = cluster
        self.topic = topic
        self.interval_s = interval_s
        self.observations: list[dict] = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jepsen-observer", daemon=True)
        self.controller: int | None = None
        self.leaders: dict[str, tuple[str, int, int]] = {}  # key -> (topic id, epoch, leader)
        #: __transaction_state partition -> (epoch, leader, isr) (when ``topic`` is None)
        self.txn_state: dict[int, tuple[int, int, tuple]] = {}
        self._lock = threading.Lock()  # the observer thread and the nemesis both ask
        self._t0 = time.monotonic_ns()

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_flag.set()
        self.thread.join(10)

    def partition_leader(self, rnd: random.Random | None = None) -> int | None:
        """A current leader of a workload partition (None: none seen yet). Asks the
        nodes afresh first: a fault aimed at a leader must not hit a node that lost
        leadership since the last round (a preferred-leader election after a restart
        moves it within seconds)."""
        self._observe_round()
        if not self.leaders:
            return self.controller
        leaders = {ld for _t, _e, ld in self.leaders.values()}
        # Not the controller when another node leads a partition too: cut off, the
        # controller's node moves no partition leadership until the quorum has elected
        # another controller and that one has fenced it (up to ~5 s), so a fault of the
        # default 3-6 s may well heal first; any other leader is fenced after
        # broker.session.timeout.ms. (The controller stays a target: ``leader``.)
        others = leaders - {self.controller}
        return (rnd or random).choice(sorted(others or leaders))

    def leader(self, rnd: random.Random | None = None) -> int | None:
        """The target ``leader``: the controller in CONTROLLER_SHARE of the picks, else
        a current leader of a workload partition, asked afresh (:meth:`partition_leader`).
        A partition leader is what a fault must hit to expose a replication bug (the
        planted ones): a leadership that has moved since the last round, or the
        controller alone, exposes none of them."""
        rnd = rnd or random
        if self.controller is not None and rnd.random() < CONTROLLER_SHARE:
            return self.controller
        return self.partition_leader(rnd)

    def coordinator(self, partitions: list[int], rnd: random.Random | None = None):
        """``(leader, [other in-sync replicas])`` of one of the ``__transaction_state``
        ``partitions`` (those of the workload's transactional ids: one of them at
        random, weighted by how many ids it holds), asked afresh; None when unknown."""
        self._observe_round()
        with self._lock:
            known = [p for p in partitions if p in self.txn_state]
            if not known:
                return None
            _e, leader, isr = self.txn_state[(rnd or random).choice(known)]
        return leader, [i for i in isr if i != leader]

    def leader_legacy(self, rnd: random.Random | None = None) -> int | None:
        """``leader`` as the default mix had it before it was leader-aware (issue 22),
        for ``--legacy-targets`` comparisons: a partition leader from the last round 7
        times in 10, the controller otherwise."""
        rnd = rnd or random
        if self.leaders and (self.controller is None or rnd.random() < 0.7):
            return rnd.choice(sorted({ld for _t, _e, ld in self.leaders.values()}))
        return self.controller

    def _run(self):
        while not self.stop_flag.wait(self.interval_s):
            self._observe_round()

    def _observe_round(self) -> None:
        """One METADATA to every live node. Each partition's leader is the one of the
        highest leader epoch seen (a lagging node reports an older one)."""
        from raftlog.client.conn import BrokerConnection
        from raftlog.client.security import ClientSecurity
        from raftlog.protocol import Api

        for n in self.cluster.nodes:
            if not n.alive() or n.paused:
                continue
            try:
                conn = BrokerConnection(n.host, n.port, 1.0,
                                        security=ClientSecurity.from_options(
                                            **self.cluster.client_options))
                try:
                    h = conn.request(Api.METADATA, {"topics": [self.topic] if self.topic
                                                    else None}, timeout_s=1.0).header
                finally:
                    conn.close()
            except Exception:
                continue
            with self._lock:
                self._record(n.id, h, time.monotonic_ns() - self._t0)

    def _record(self, node_id: int, h: dict, now: int) -> None:
        if h.get("controller_id") is not None and h["controller_id"] >= 0:
            self.controller = h["controller_id"]
        for t in h.get("topics") or []:
            if not t.error and t.name == TRANSACTION_STATE_TOPIC:
                for p in t.partitions:
                    seen = self.txn_state.get(p.partition)
                    if p.leader >= 0 and (seen is None or p.leader_epoch >= seen[0]):
                        self.txn_state[p.partition] = (p.leader_epoch, p.leader, tuple(p.isr))
            if t.error or (self.topic and t.name != self.topic):
                continue
            tid = str(t.topic_id)
            for p in t.partitions:
                key = f"{t.name}-{p.partition}"
                self.observations.append({"key": key, "epoch": p.leader_epoch, "leader": p.leader,
                                          "topic_id": tid, "node": node_id, "time": now})
                seen = self.leaders.get(key)
                if p.leader >= 0 and (seen is None or seen[0] != tid or p.leader_epoch >= seen[1]):
                    self.leaders[key] = (tid, p.leader_epoch, p.leader)


# ----------------------------------------------------------------------------- final read


def final_read(cluster, keys: list[str], timeout_s: float = FINAL_READ_TIMEOUT_S,
               until: dict | None = None):
    """Every partition from the start to its high watermark, with fresh clients.
    ``until`` {key: offset}: the read of that key is complete once it returned the
    record at that offset (a sentinel written last, see TxnWorkload.after_restart),
    not at the high watermark: a read_committed consumer's position stays on its last
    record when only markers and aborted records follow it."""
    from raftlog.client import Consumer, TopicPartition

    final: dict = {}
    reads: dict = {}
    for key in keys:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        tp = TopicPartition(*split_key(key))
        recs: dict = {}
        hw = -1
        reached = False
        err = None
        while time.monotonic() < deadline and not reached:
            consumer = None
            try:
                consumer = Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                                    **cluster.client_options,
                                    request_timeout_ms=5000, fetch_max_wait_ms=100)
                consumer.assign([tp])
                hw = consumer.end_offsets([tp])[tp]
                start = consumer.beginning_offsets([tp])[tp]
                consumer.seek(tp, max(start, max(recs, default=start - 1) + 1))
                while time.monotonic() < deadline:
                    if ((until or {}).get(key) in recs if key in (until or {})
                            else consumer.position(tp) >= hw):
                        reached = True
                        break
                    for r in consumer.poll(timeout_ms=500, max_records=10_000):
                        recs[r.offset] = int(r.value)
            except Exception as e:
                err = repr(e)
                time.sleep(0.5)
            finally:
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:
                        pass
        final[key] = [[o, recs[o]] for o in sorted(recs)]
        reads[key] = {"hw": hw, "reached": reached, "records": len(recs),
                      "seconds": round(time.monotonic() - t0, 3)}
        if err and not reached:
            reads[key]["error"] = err
    return final, reads


def replica_sets(cluster, keys: list[str], wait_s: float = 20.0) -> dict:
    """{key: {"replicas": [...], "isr": [...]}} once every key's ISR holds all of its
    replicas and none is being reassigned, or as they stand after ``wait_s`` (a healed
    cluster catches up in well under that; a replica still out then is itself worth a
    look). Keys the cluster cannot describe are left out."""
    from raftlog.client import Admin

    out: dict = {}
    topics = sorted({split_key(k)[0] for k in keys})
    deadline = time.monotonic() + wait_s
    while True:
        moving = True
        try:
            with Admin(cluster.bootstrap, request_timeout_ms=5000,
                       **cluster.client_options) as admin:
                moving = any(f"{r.topic}-{r.partition}" in keys
                             for r in admin.list_partition_reassignments())
                for topic in topics:
                    for p in admin.describe_topic(topic).partitions:
                        key = f"{topic}-{p.partition}"
                        if key in keys:
                            out[key] = {"replicas": sorted(p.replicas), "isr": sorted(p.isr)}
        except Exception:
            pass
        full = (not moving and len(out) == len(keys)
                and all(v["isr"] == v["replicas"] for v in out.values()))
        if full or time.monotonic() >= deadline:
            return out
        time.sleep(0.5)


def read_replicas(cluster, sets: dict) -> tuple[dict, dict]:
    """Every replica's log, read from its files (the cluster is stopped):
    ({key: {node_id: [[offset, value], ...]}}, {key: {node_id: error}})."""
    from raftlog.config import LogConfig
    from raftlog.log import PartitionLog

    logs: dict = {}
    errors: dict = {}
    for key, entry in sorted(sets.items()):
        for node_id in entry["replicas"]:
            path = os.path.join(cluster.node(node_id).log_dir, key)
            try:
                log = PartitionLog.open(path, LogConfig())
            except Exception as e:
                errors.setdefault(key, {})[node_id] = repr(e)
                continue
            recs: list = []
            try:
                offset = log.log_start_offset
                while offset < log.log_end_offset:
                    batch = log.read_records(offset, 1 << 20)
                    if not batch:
                        break
                    recs += [[r.offset, int(r.value)] for r in batch]
                    offset = batch[-1].offset + 1
            except Exception as e:  # e.g. a segment the corrupt nemesis damaged
                errors.setdefault(key, {})[node_id] = repr(e)
            finally:
                log.close()
            logs.setdefault(key, {})[node_id] = recs
    return logs, errors


# ----------------------------------------------------------------------------- check


def check(workload: str, history: list[dict], final: dict, final_reads: dict | None,
          observations: list[dict], replicas: dict | None = None,
          unsynced_loss: bool = False) -> dict:
    """Every checker of the workload. ``unsynced_loss``: acknowledged records lost to
    a power loss of every node are the documented loss (lost-unsynced), see
    :func:`checkers.explain_power_loss`."""
    an = checkers.merge(_check_workload(workload, history, final, final_reads, observations),
                        checkers.check_replicas(final, final_reads, replicas))
    if unsynced_loss:
        an = checkers.explain_power_loss(an, history, final)
    return an


def _check_workload(workload: str, history: list[dict], final: dict, final_reads: dict | None,
                    observations: list[dict]) -> dict:
    if workload == "metadata":
        an = checkers.merge(check_metadata(history), checkers.check_leaders(observations))
    elif workload == "idempotent":
        an = checkers.merge(checkers.check_queue(history, final, final_reads, observations),
                            checkers.check_exactly_once(history, final))
    elif workload == "groups":
        an = checkers.merge(checkers.check_queue(history, final, final_reads, observations),
                            checkers.check_groups(history, final))
    elif workload == "txn":
        an = checkers.merge(check_txn(history, final, final_reads),
                            checkers.check_liveness(history, final, final_reads),
                            checkers.check_leaders(observations))
    else:
        an = checkers.check_queue(history, final, final_reads, observations)
    return an


def txn_stats(ops: list[dict]) -> dict:
    """The txn workload's transactions by outcome: committed (ok), aborted (fail),
    indeterminate (info), and the records the committed ones sent."""
    out = {"committed": 0, "aborted": 0, "indeterminate": 0, "committed_records": 0}
    name = {"ok": "committed", "fail": "aborted", "info": "indeterminate"}
    for o in ops:
        if o["f"] == "txn" and o["type"] in name:
            out[name[o["type"]]] += 1
            if o["type"] == "ok":
                out["committed_records"] += len((o.get("value") or {}).get("sends") or ())
    return out


def node_critical_lines(cluster) -> list[dict]:
    """The CRITICAL lines of every node's log (level=CRITICAL from a library logger, or
    level=critical from the node's event log)."""
    out = []
    for node in cluster.nodes:
        try:
            with open(node.log_path, encoding="utf-8", errors="replace") as f:
                out += [{"node": node.id, "line": line.strip()[:500]} for line in f
                        if "level=CRITICAL" in line or "level=critical" in line]
        except OSError:
            continue
    return out


def run(args) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    out = args.out or os.path.join("jepsen-out", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    log = Log(os.path.join(out, "jepsen.log"))
    kinds = [k for k in args.nemesis.split(",") if k and k != "none"]
    for k in kinds:
        if k not in KINDS:
            log(f"unknown nemesis {k!r} (known: {', '.join(KINDS)})")
            return 2
    unknown = sorted(set(args.node_flag) - PLANTED_BUGS)
    if unknown:
        log(f"unknown --node-flag {unknown} (known: {', '.join(sorted(PLANTED_BUGS))})")
        return 2
    node_config, topic_config = {}, {}
    for option, items, into in (("--node-config", args.node_config, node_config),
                                ("--topic-config", args.topic_config, topic_config)):
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                log(f"{option} {item!r}: expected KEY=VALUE")
                return 2
            key = key.strip()
            into[node_config_key(key) if into is node_config else key] = value.strip()
    only = [t for t in args.targets.split(",") if t]
    try:
        targets_for(kinds, only, args.workload)
    except ValueError as e:
        log(str(e))
        return 2
    if args.segment_bytes is None and ("corrupt" in kinds or "clock" in kinds):
        args.segment_bytes = 65536
    if "clock" in kinds:  # timestamps from the leaders' clocks, retention against them
        from .clock import NODE_CONFIG, TOPIC_CONFIG

        topic_config = {**TOPIC_CONFIG, **topic_config}
        node_config = {**NODE_CONFIG, **node_config}
    args.topic_config = topic_config
    if args.partitions is None:
        args.partitions = 4 if args.workload == "groups" else 2
    if args.consumers is None:
        args.consumers = 3 if args.workload == "groups" else 2
    if isinstance(args.member_lifetime, str):
        args.member_lifetime = _pair(args.member_lifetime)
    config = {k: v for k, v in vars(args).items() if k != "command"}
    config["seed"] = seed
    log(f"raftlog-jepsen: workload={args.workload} nodes={args.nodes} nemesis={kinds} "
        f"time={args.time}s rate={args.rate}/s seed={seed} out={out}"
        + (f" node-flags={','.join(args.node_flag)}" if args.node_flag else ""))
    from .cluster import Cluster

    history = History(os.path.join(out, "history.jsonl"))
    rnd = random.Random(seed)
    warnings: list[str] = []
    try:
        workload = make(args.workload, None, history, args, rnd, log)
    except NotAvailable as e:
        log(str(e))
        report.write_results(out, {"valid": False, "unavailable": str(e), "anomalies": {},
                                   "stats": {}, "config": config})
        return 3
    extra = {**workload.node_config, **node_config}
    if args.node_flag:
        extra["test.flags"] = ",".join(args.node_flag)
        warnings.append(f"planted bugs enabled on every node (test.flags): "
                        f"{','.join(args.node_flag)}")
    cluster = Cluster(args.nodes, os.path.join(out, "data"),
                      min_isr=args.min_insync_replicas, extra_config=extra,
                      net="none" if args.net == "none" else args.net, log=log,
                      security_protocol=args.security_protocol,
                      lazyfs="powerloss" in kinds,
                      disk_mb=DISK_MB if "diskfull" in kinds else None,
                      clocks="clock" in kinds)
    workload.cluster = cluster
    if "clock" in kinds and cluster.clocks is None:
        msg = f"clock nemesis disabled: {cluster.clock_error}"
        log("WARNING: " + msg)
        warnings.append(msg)
        kinds.remove("clock")
    if cluster.disks is not None:
        log(f"data disks: {cluster.disks.kind}"
            + (f" ({cluster.disks.error})" if cluster.disks.error else f" of {DISK_MB} MiB"))
        if cluster.disks.error:
            warnings.append(f"diskfull: no tmpfs data disks ({cluster.disks.error}); a full "
                            f"disk is RLIMIT_FSIZE instead (EFBIG, not ENOSPC; see "
                            f"jepsen/disks.py)")
    if "partition" in kinds and cluster.net is None:
        msg = f"partition nemesis disabled: no network control ({cluster.net_error})"
        log("WARNING: " + msg)
        warnings.append(msg)
        kinds.remove("partition")
    if "partition" in kinds and cluster.net is not None and cluster.net.kind.startswith("proxy"):
        msg = ("partitions cut Raft links only (userspace proxy): heartbeats, replica "
               "fetches and client traffic still flow")
        log("WARNING: " + msg)
        warnings.append(msg)
    log(f"nodes on {cluster.subnet}.2-{args.nodes + 1}; network faults: "
        f"{cluster.net.kind if cluster.net else 'unavailable: ' + str(cluster.net_error)}")
    try:
        events = schedule(seed, kinds, args.time, _pair(args.quiet), _pair(args.hold), only,
                          args.workload)
    except ValueError as e:  # a kind was dropped above and the others have no target left
        log(str(e))
        cluster.close()
        return 2
    final: dict = {}
    reads: dict = {}
    sets: dict = {}
    time_anomalies: dict = {}
    clock_stats: dict = {}
    replicas: dict = {}
    observer = None
    lazyfs_status: dict = {}
    t_start = time.monotonic()
    try:
        try:
            cluster.start()
        except LazyFSUnavailable as e:
            log(f"powerloss nemesis unavailable: {e}")
            report.write_results(out, {"valid": False, "unavailable": str(e),
                                       "anomalies": {}, "stats": {}, "config": config})
            return 3
        log("cluster up")
        workload.setup()
        warnings += workload.warnings
        observer = LeaderObserver(cluster, workload.topic)
        observer.start()
        legacy = getattr(args, "legacy_targets", False)
        nemesis = Nemesis(cluster, history, events,
                          leader_of=lambda: (observer.leader_legacy if legacy
                                             else observer.leader)(rnd), log=log,
                          leader_aware=not legacy,
                          partition_leader_of=lambda: observer.partition_leader(rnd),
                          coordinator_of=(lambda: observer.coordinator(
                              workload.coordinator_partitions(), rnd))
                          if hasattr(workload, "coordinator_partitions") else None,
                          partitions=[split_key(k) for k in workload.keys])
        workload.start()
        nemesis.start()
        log(f"workload running for {args.time}s, {len(events)} faults scheduled")
        time.sleep(args.time)
        nemesis.stop()
        workload.stop()
        log("workload stopped; healing, restarting every node")
        cluster.heal()
        observer.stop()
        cluster.restart_all()
        workload.after_restart()
        log("cluster restarted; final read")
        if workload.keys:
            final, reads = final_read(cluster, workload.keys,
                                      until=getattr(workload, "sentinels", None))
            final = workload.strip_final(final)
            sets = replica_sets(cluster, workload.keys)
            if cluster.clocks is not None:
                from .clock import check_timestamps

                time_anomalies, clock_stats = check_timestamps(cluster, workload.keys, rnd)
        lazyfs_status = cluster.lazyfs_status()
    except KeyboardInterrupt:
        log("interrupted")
        raise
    finally:
        if observer is not None:
            observer.stop()
        history.close()
        cluster.close()
    if sets:
        replicas, replica_errors = read_replicas(cluster, sets)
        if replica_errors:
            warnings.append(f"replica logs not read in full: {replica_errors}")
    warnings += [w for w in workload.warnings if w not in warnings]  # e.g. from stop()
    ops = history.ops
    observations = observer.observations if observer else []
    with open(os.path.join(out, "final.json"), "w", encoding="utf-8") as f:
        json.dump({"final": final, "reads": reads, "replicas": replicas,
                   **({"time_anomalies": time_anomalies} if time_anomalies else {})}, f)
    with open(os.path.join(out, "observations.jsonl"), "w", encoding="utf-8") as f:
        for ob in observations:
            f.write(json.dumps(ob) + "\n")
    an = checkers.merge(
        check(args.workload, ops, final, reads, observations, replicas,
              unsynced_loss="powerloss" in kinds and unsynced_loss_documented(
                  node_config, topic_config if args.workload == "queue" else None)),
        time_anomalies)
    full = {i: s["full_errors"] for i, s in lazyfs_status.items() if s.get("full_errors")}
    if full:  # a write refused by a full ledger: the run did not test what it claims
        an["lazyfs-ledger-full"] = [{"node": i, "refused": n} for i, n in full.items()]
    critical = node_critical_lines(cluster)
    if critical:  # never expected (e.g. pysyncobj's "state machine may have diverged")
        an["critical-log-line"] = critical
    valid, trimmed, counts = checkers.summarize(an, args.workload)
    unsynced_by_kind: dict = {}
    for ex in an.get("lost-unsynced", []):
        unsynced_by_kind[ex["was"]] = unsynced_by_kind.get(ex["was"], 0) + 1
    st = report.stats(ops)
    st.update({"anomaly_counts": counts, "replication_factor": workload.replication_factor,
               "final_log": {k: len(v) for k, v in final.items()}, "final_reads": reads,
               "replicas_at_end": sets,
               "acknowledged_sends": sum(1 for o in ops if o["f"] == "send" and o["type"] == "ok"),
               "leader_observations": len(observations),
               **({"transactions": txn_stats(ops)} if args.workload == "txn" else {}),
               **({"drain": workload.drained} if getattr(workload, "drained", None) else {}),
               "network_faults": cluster.net.kind if cluster.net else f"none ({cluster.net_error})",
               **({"lazyfs": lazyfs_status} if lazyfs_status else {}),
               **({"lost_unsynced_by_kind": unsynced_by_kind} if unsynced_by_kind else {}),
               **({"clock": {**cluster.clocks.stats(), **clock_stats}}
                  if cluster.clocks is not None else {}),
               "seconds": round(time.monotonic() - t_start, 1)})
    if workload.replication_factor < args.replication_factor:
        st["replication_warning"] = (f"ran with replication factor {workload.replication_factor}"
                                     f", not {args.replication_factor}")
    notes = {k: checkers.NOTES[k] for k in counts if k in checkers.NOTES}
    if counts.get("lost-unsynced"):
        warnings.append(f"documented loss (power loss of every node, flush.messages not 1): "
                        f"{counts['lost-unsynced']} lost-unsynced {unsynced_by_kind}; "
                        f"see notes")
    results = {"valid": valid, "anomalies": trimmed, "stats": st, "warnings": warnings,
               "notes": notes, "availability": availability(ops),
               "allowed_anomalies": sorted(checkers.ALLOWED.get(args.workload, ())),
               "config": config, "schedule": events}
    report.write_results(out, results)
    report.write_report(out, ops, results)
    if not args.keep_data:
        import shutil

        # the nodes' own logs stay (small, and what explains a surprising verdict)
        for name in sorted(os.listdir(os.path.join(out, "data"))):
            for log_name, suffix in (("node.log", ".log"), ("lazyfs.log", ".lazyfs.log")):
                src = os.path.join(out, "data", name, log_name)
                if os.path.exists(src):
                    shutil.copyfile(src, os.path.join(out, f"{name}{suffix}"))
        if cluster.disks is not None:
            cluster.disks.release()
        shutil.rmtree(os.path.join(out, "data"), ignore_errors=True)
    elif cluster.disks is not None:
        cluster.disks.release(keep=True)
    if counts.get("lost-unsynced"):
        log(f"lost-unsynced: {counts['lost-unsynced']} {unsynced_by_kind} -- the documented "
            f"loss of a power loss of every node with flush.messages not 1 (not counted "
            f"against validity)")
    av = results["availability"]
    if av.get("by_kind"):
        log("availability (ok operations/s vs fault-free): " + ", ".join(
            f"{k} {v['availability']}" for k, v in av["by_kind"].items())
            + "; by nodes hit: " + ", ".join(
                f"{k} {v['availability']}" for k, v in av.get("by_kind_and_nodes", {}).items()))
    done = (f"transactions {st['transactions']}" if "transactions" in st
            else f"{st['acknowledged_sends']} acknowledged sends")
    log(f"{'VALID' if valid else 'INVALID'}: anomalies {counts or 'none'}; "
        f"{done}; results in {out}/results.json")
    return 0 if valid else 1


def recheck(d: str) -> int:
    from .history import load

    ops = load(os.path.join(d, "history.jsonl"))
    with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
        old = json.load(f)
    with open(os.path.join(d, "final.json"), encoding="utf-8") as f:
        fin = json.load(f)
    obs = []
    p = os.path.join(d, "observations.jsonl")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            obs = [json.loads(x) for x in f if x.strip()]
    cfg = old.get("config", {})
    wl = cfg.get("workload", "queue")
    node_config = {}
    for item in cfg.get("node_config") or []:
        key, _sep, value = item.partition("=")
        node_config[node_config_key(key.strip())] = value.strip()
    kinds = [k for k in str(cfg.get("nemesis", "")).split(",") if k]
    an = checkers.merge(
        check(wl, ops, fin["final"], fin["reads"], obs, fin.get("replicas"),
              unsynced_loss="powerloss" in kinds and unsynced_loss_documented(
                  node_config, (cfg.get("topic_config") or {}) if wl == "queue" else None)),
        fin.get("time_anomalies", {}))
    valid, trimmed, counts = checkers.summarize(an, wl)
    print(json.dumps({"valid": valid, "anomaly_counts": counts}, indent=1))
    return 0 if valid else 1


def _on_sigterm(signum, frame):
    import signal

    # once: `timeout` signals the child and then its whole process group, and a second
    # SystemExit would cut the cleanup short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(143)  # unwinds run(): nodes stopped, iptables rules and cgroups removed


def main(argv: list[str] | None = None) -> int:
    import signal

    args = build_parser().parse_args(argv)
    if args.command == "check":
        return recheck(args.dir)
    if args.command == "rates":
        from . import rates

        return rates.main(args)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
    return run(args)
