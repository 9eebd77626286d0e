"""The pure checker of the ``txn`` workload: Kafka transactions and read_committed reads.

Modelled on Jepsen's Kafka test (jepsen.tests.kafka) and its analyses of Redpanda 21.10.1
and Bufstream 0.1.0; no I/O, no sockets. :func:`check_txn` returns ``{anomaly: [example,
...]}`` like every checker in :mod:`raftlog.jepsen.checkers` (only non-empty lists; every
example is plain JSON and names history indexes, keys, offsets and values).

History
-------
Ops are recorded by :class:`raftlog.jepsen.history.History` (invoke, then ok / fail / info
by the same process). A *key* names one topic-partition (``"txn-0"``); a value is unique
over the run (the writer of a read value is known from the value alone).

``txn`` -- one transaction of one transactional producer:

- invoke value ``{"sends": [[key, v], ...], "poll": bool}`` (``poll``: read-process-write
  mode, the transaction first polls its consumer and commits the consumer's offsets with
  ``send_offsets_to_transaction``);
- completion value ``{"sends": [[key, v, offset | None], ...], "polls": {key: [[offset, v],
  ...]}, "offsets": {key: next offset}, "group": g}`` with the optional
  ``"commit_time"`` (the history's ns clock when ``commit_transaction`` was called) and
  ``"positions"`` ``{key: offset}`` (where the consumer stood when the transaction's
  polls began: the workload records it at a seek, a rebalance, or after an abort rewound
  the consumer to its committed offsets). ``offset`` is the acknowledged offset of the
  send (None when unknown); ``offsets`` is what the transaction committed for ``group``.
  A completion without this dict (e.g. an ``info`` that kept the invocation's value) means
  the invoked sends, offsets unknown, no polls.
- ``ok``: ``commit_transaction`` returned; ``fail``: definitely not committed (aborted,
  or refused before anything was written); ``info`` or no completion: indeterminate -- the
  transaction may have committed or aborted, but as a whole.

``poll`` -- a read_committed consumer outside transactions: ok value ``{key: [[offset, v],
...]}``. ``assign`` -- ok value ``{"keys": [...], "positions": {key: offset}}``: that
process's consumer starts a new *session* at ``positions`` (absent key: unknown start).
A process's session also ends after a transaction of it that polled and did not commit
(the workload rewinds), and a transaction's ``positions`` start a new one.

``final`` (optional): ``{key: [[offset, v], ...]}``, every key read read_committed from
its start after every transaction was decided; ``final_reads`` (optional) ``{key:
{"reached": bool}}`` says whether that read reached the end (a short one proves nothing
about what lies beyond it).

Definitions
-----------
The *version order* of a key is its offset order, from acknowledged sends (of any
outcome: an aborted record still takes its offset), reads and the final log. A
transaction is *committed* when ok, or when info and a read returned one of its
records; *aborted* when fail. Reads are by ``poll`` ops, by transactions' polls, and by
the final read.

- ``inconsistent-offsets``: one (key, offset) with two values. ``duplicate``: one value at
  two offsets of a key (a write duplicated).
- ``lost-write``: a record of an ok transaction that no read returned although the final
  read of its key reached the end or, without one, although a consumer session read
  through its offset (from the session's start position, or its first read of the key,
  to its last).
- ``aborted-read`` (G1a): a read (``final`` included) of a record of an aborted
  transaction. ``unwritten-read``: a read of a value that no transaction sent.
- ``intermediate-read``: a read of a record of a transaction that had not asked to commit
  yet: the reading op completed before that transaction's ``commit_time``, or a
  transaction read its own record (Jepsen's precommitted read).
- ``nonmonotonic-poll``: within a session, a key's offsets not strictly increasing.
  ``poll-skip``: a session read past a *visible* record (one that some read returned, of
  a transaction not aborted) without returning it: its offset lies between the session's
  start (or its previous read of the key) and a read of the key.
- ``torn-transaction``: a committed transaction seen in part: a skip as above of a record
  of a transaction the session returned another record of (reported as this, not as a
  poll-skip); or, over all reads, an info transaction proven committed with a record
  missing where an ok one's would be a lost-write (info may be aborted, never half).
- ``committed-offset-repeat`` / ``committed-offset-skip`` (read-process-write): per group
  and input key, one record polled by two committed transactions (processed twice), or a
  committed record below the group's highest committed offset (and at or above the
  group's first position, 0 when none was recorded) that no transaction of the group
  that may have committed polled (never processed).
- ``G0`` / ``G1c``: a cycle in the *time-point graph* below. ``G1c`` when a read edge is in
  the cycle, else ``G0`` (a write cycle).

The time-point graph
--------------------
Kafka does not isolate writes: two concurrent transactions' records interleave in any
order in each partition, so a cycle of write-write edges alone (t1 before t2 in one
partition, t2 before t1 in another) is allowed -- Jepsen's Kafka checker allows G0 for
that reason. Here the nodes are points in time and every edge is a "happened before"
that Kafka's transactions promise, so any cycle is a contradiction:

- a committed transaction T: its invocation, one point per *run* (consecutive records of T
  in one key's version order) when it was appended, and its commit point c(T) (the
  invocation precedes every append; every append precedes c(T));
- ww: the runs of one key in offset order (offsets are assigned in append order);
- realtime: c(T) precedes T's ok completion, which precedes the invocation of any op
  invoked after it (a chain of points in history order keeps this linear);
- wr (with the last stable offset): a read_committed read at offset o of key k means
  every transaction with a record at or below o in k was decided (committed) before the
  read, and the read precedes the reader's commit (its completion, for a ``poll`` op).

A cycle is reported as the transactions it goes through, each step ``ww`` (key, offsets),
``wr`` (key, the writer's offsets, the reader's highest offset read) or ``realtime``.
The search is Kahn's algorithm (an acyclic graph ends there), then Tarjan's strongly connected components, then a
shortest cycle (breadth first) per component; per run it explains at most
``MAX_CYCLE_EXAMPLES`` components within ``cycle_budget_s`` seconds and counts the rest.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections import defaultdict, deque

from .checkers import MAX_EXAMPLES, merge

#: What each anomaly means (the report's anomaly table shows it).
ANOMALIES = {
    "inconsistent-offsets": "two values at one offset of a partition",
    "duplicate": "one value at two offsets of a partition (a write duplicated)",
    "lost-write": "a record of a committed transaction that no read_committed read "
                  "returned, though reads went past it",
    "aborted-read": "G1a: a read_committed read of a record of an aborted transaction",
    "unwritten-read": "a read of a value that no transaction sent",
    "intermediate-read": "a read of a record of a transaction that had not asked to "
                         "commit yet (or of the reader's own transaction)",
    "torn-transaction": "a committed transaction seen in part by a read_committed "
                        "consumer that read past its records",
    "nonmonotonic-poll": "a consumer session's offsets of a partition went backwards",
    "poll-skip": "a consumer session skipped a committed record",
    "committed-offset-repeat": "read-process-write: one input record processed by two "
                               "committed transactions of a group",
    "committed-offset-skip": "read-process-write: a committed input record below the "
                             "group's committed offset that no transaction processed",
    "G0": "a write cycle: appends ordered against real time (offsets of one partition "
          "and op order), which no interleaving of transactions explains",
    "G1c": "a cycle through reads: information that flowed in a circle between committed "
           "transactions (read_committed reads, offsets, real time)",
}

#: Cycles (G0 + G1c) explained per check; the rest are counted, not searched.
MAX_CYCLE_EXAMPLES = 2 * MAX_EXAMPLES
#: Steps kept of one cycle (a shortest cycle is searched; longer ones are cut here).
MAX_CYCLE_STEPS = 40


class _Op:
    __slots__ = ("id", "f", "type", "process", "index", "inv_index", "t_end", "sends",
                 "reads", "rw", "offsets", "group", "commit_time", "positions", "committed")

    def __init__(self, id_, f, inv, comp):
        self.id = id_
        self.f = f
        self.type = comp["type"] if comp is not None else "info"
        self.process = inv["process"]
        self.inv_index = inv["index"]
        self.index = comp["index"] if comp is not None else inv["index"]
        self.t_end = comp["time"] if comp is not None else None
        self.sends: list = []  # [(key, v, offset | None)]
        self.reads: list = []  # [(key, offset, v)]
        self.rw: list = []  # [(self, key, offset, v, writer op or None)]
        self.offsets: dict = {}
        self.group = None
        self.commit_time = None
        self.positions = None
        self.committed = None  # True / False / None (unknown)


def _parse(history: list[dict]) -> tuple[list[_Op], list[tuple]]:
    """(transaction and poll ops, session events in history order)."""
    ops: list[_Op] = []
    events: list[tuple] = []  # (history index, kind, payload)
    open_: dict = {}  # process -> its open invocation
    done: list = []  # [invocation, completion or None] in invocation order
    for op in history:
        if op["type"] == "invoke":
            if op["f"] in ("txn", "poll", "assign"):
                slot = [op, None]
                open_[op["process"]] = slot
                done.append(slot)
            else:
                open_.pop(op["process"], None)
        else:
            slot = open_.pop(op["process"], None)
            if slot is not None:
                slot[1] = op
    for inv, comp in done:
        f = inv["f"]
        if f == "assign":
            if comp is not None and comp["type"] == "ok":
                v = comp.get("value") or {}
                events.append((comp["index"], "assign", (inv["process"], v.get("positions") or {})))
            continue
        if f not in ("txn", "poll"):
            continue
        op = _Op(len(ops), f, inv, comp)
        cv = comp.get("value") if comp is not None else None
        if f == "txn":
            if isinstance(cv, dict) and "sends" in cv:
                op.sends = [(s[0], s[1], s[2] if len(s) > 2 else None) for s in cv["sends"]]
            else:
                op.sends = [(s[0], s[1], None) for s in (inv.get("value") or {}).get("sends", [])]
            if isinstance(cv, dict):
                for key, recs in (cv.get("polls") or {}).items():
                    op.reads += [(key, o, v) for o, v in recs]
                op.offsets = cv.get("offsets") or {}
                op.group = cv.get("group")
                op.commit_time = cv.get("commit_time")
                op.positions = cv.get("positions")
            op.committed = {"ok": True, "fail": False}.get(op.type)
        else:
            if op.type != "ok":
                continue
            for key, recs in (cv or {}).items():
                op.reads += [(key, o, v) for o, v in recs]
            op.committed = True
        ops.append(op)
        if op.reads or op.positions is not None:
            events.append((op.index, "reads", op))
    events.sort(key=lambda e: e[0])
    return ops, events


class _Analysis:
    def __init__(self, history, final, final_reads):
        self.ops, self.events = _parse(history)
        self.final = final or {}
        self.reached = {k for k in self.final
                        if (final_reads or {}).get(k, {}).get("reached", True)}
        writer: dict = {}  # (key, v) -> _Op
        for op in self.ops:
            for key, v, _o in op.sends:
                writer.setdefault((key, v), op)
        self.writer = writer
        # every read: (reader op or None for the final read, key, offset, value, writer)
        reads = []
        for op in self.ops:
            if op.reads:
                op.rw = [(op, k, o, v, writer.get((k, v))) for k, o, v in op.reads]
                reads += op.rw
        for k, recs in self.final.items():
            reads += [(None, k, o, v, writer.get((k, v))) for o, v in recs]
        self.reads = reads
        #: every distinct (key, offset, value) some read returned
        self.read_kov = {(k, o, v) for _r, k, o, v, _w in reads}
        self.read_kv = {(k, v) for k, _o, v in self.read_kov}  # (key, v) some read returned
        for op in self.ops:  # info transactions proven committed by a read of another op
            if op.committed is None and op.f == "txn":
                sent = [(k, v) for k, v, _o in op.sends if (k, v) in self.read_kv]
                if not sent:
                    continue
                own = {(k, v) for k, _o, v in op.reads}.intersection(sent)
                if len(own) < len(sent) or any(  # (a read of its own write proves nothing)
                        r is not op for r, k, _o, v, _w in reads if (k, v) in own):
                    op.committed = True
        self._orders()
        self.sessions = self._sessions()
        self._by_key: list | None = None
        self._cover: dict | None = None

    # -------------------------------------------------------------- version orders
    def _orders(self) -> None:
        at: dict = defaultdict(dict)  # key -> offset -> value, or a set of values
        conflicts: dict = defaultdict(set)  # key -> offsets with several values
        known = {(k, o, v) for op in self.ops for k, v, o in op.sends if o is not None}
        known |= self.read_kov
        for k, o, v in known:
            if o is None:
                continue
            d = at[k]
            old = d.get(o, d)
            if old is d:
                d[o] = v
            elif old != v and not (isinstance(old, frozenset) and v in old):
                conflicts[k].add(o)
                d[o] = (old | {v}) if isinstance(old, frozenset) else frozenset((old, v))
        self.at, self.conflicts = at, conflicts
        #: key -> sorted [(offset, value)] of the offsets with one value
        self.order = {k: sorted((o, v) for o, v in by.items() if o not in conflicts.get(k, ()))
                      for k, by in at.items()}
        #: key -> sorted offsets of records some read returned, of writers not aborted
        self.visible: dict = {}
        read_kv, writer = self.read_kv, self.writer
        for k, recs in self.order.items():
            vis = []
            for o, v in recs:
                if (k, v) in read_kv:
                    w = writer.get((k, v))
                    if w is None or w.committed is not False:
                        vis.append(o)
            self.visible[k] = vis

    def offsets(self) -> dict:
        out: dict = {}
        for k in sorted(self.conflicts):
            for o in sorted(self.conflicts[k]):
                out.setdefault("inconsistent-offsets", []).append(
                    {"key": k, "offset": o, "values": sorted(self.at[k][o], key=repr)})
        for k in sorted(self.at):
            where: dict = {}
            for o, v in self.at[k].items():
                for x in (v if o in self.conflicts.get(k, ()) else (v,)):
                    where.setdefault(x, []).append(o)
            for v, offs in where.items():
                if len(offs) > 1:
                    w = self.writer.get((k, v))
                    out.setdefault("duplicate", []).append(
                        {"key": k, "value": v, "offsets": sorted(offs),
                         "writer": w.index if w else None})
        return out

    # -------------------------------------------------------------- reads
    def read_anomalies(self) -> dict:
        out: dict = {}
        for r, k, o, v, w in self.reads:
            if w is not None and w.committed and r is not None and r is not w and (
                    w.commit_time is None or r.t_end is None or r.t_end >= w.commit_time):
                continue  # the common case: a committed record, read after its commit
            reader = "final" if r is None else r.index
            if w is None:
                out.setdefault("unwritten-read", []).append(
                    {"key": k, "offset": o, "value": v, "reader": reader})
            elif w.committed is False:
                out.setdefault("aborted-read", []).append(
                    {"key": k, "offset": o, "value": v, "reader": reader, "writer": w.index})
            elif r is w:
                out.setdefault("intermediate-read", []).append(
                    {"key": k, "offset": o, "value": v, "reader": reader, "writer": w.index,
                     "why": "a transaction read its own record"})
            elif r is not None and w.commit_time is not None and r.t_end is not None:
                out.setdefault("intermediate-read", []).append(
                    {"key": k, "offset": o, "value": v, "reader": reader, "writer": w.index,
                     "why": "the read completed before the writer called commit",
                     "read_completed": r.t_end, "commit_time": w.commit_time})
        return out

    # -------------------------------------------------------------- sessions
    def _sessions(self):
        """[(process, {key: start}, [(op, key, offset, v, writer)])] in history order."""
        cur: dict = {}
        done = []

        def close(p):
            s = cur.pop(p, None)
            if s is not None and s[2]:
                done.append(s)

        for _i, kind, x in self.events:
            if kind == "assign":
                p, pos = x
                close(p)
                cur[p] = (p, dict(pos), [])
                continue
            op = x
            p = op.process
            if op.positions is not None:
                close(p)
                cur[p] = (p, dict(op.positions), [])
            s = cur.get(p)
            if s is None:
                s = cur[p] = (p, {}, [])
            s[2].extend(op.rw)
            if op.f == "txn" and op.type != "ok":
                close(p)  # an aborted or unknown transaction rewinds its consumer
        for p in list(cur):
            close(p)
        return done

    def _session_keys(self) -> list[dict]:
        """Per session: {key: [(op, key, offset, v, writer)]} (reads with an offset)."""
        if self._by_key is None:
            self._by_key = []
            for _p, _starts, reads in self.sessions:
                by_key: dict = {}
                for r in reads:
                    if r[2] is not None:
                        recs = by_key.get(r[1])
                        if recs is None:
                            by_key[r[1]] = [r]
                        else:
                            recs.append(r)
                self._by_key.append(by_key)
        return self._by_key

    def _coverage(self) -> dict:
        """Per key, the offset ranges that some session read through: [start or first
        read, last read] (merged, sorted); computed when a key has no complete final read."""
        if self._cover is not None:
            return self._cover
        spans: dict = defaultdict(list)
        for (_p, starts, _reads), by_key in zip(self.sessions, self._session_keys()):
            for k, recs in by_key.items():
                lo = starts.get(k)
                spans[k].append((recs[0][2] if lo is None else lo, max(r[2] for r in recs)))
        self._cover = {}
        for k, sp in spans.items():
            sp.sort()
            merged = [list(sp[0])]
            for lo, hi in sp[1:]:
                if lo <= merged[-1][1] + 1:
                    merged[-1][1] = max(merged[-1][1], hi)
                else:
                    merged.append([lo, hi])
            self._cover[k] = ([m[0] for m in merged], [m[1] for m in merged])
        return self._cover

    def _covered(self, k, o) -> bool:
        if k in self.reached:
            return True
        if o is None:
            return False
        cover = self._coverage()
        if k not in cover:
            return False
        los, his = cover[k]
        i = bisect.bisect_right(los, o) - 1
        return i >= 0 and o <= his[i]

    def lost(self) -> dict:
        out: dict = {}
        read_kv = self.read_kv
        for op in self.ops:
            if op.f != "txn" or not op.committed:
                continue
            if all((k, v) in read_kv for k, v, _o in op.sends):
                continue
            seen, missing = [], []
            for k, v, o in op.sends:
                if (k, v) in read_kv:
                    seen.append([k, o, v])
                elif self._covered(k, o):
                    missing.append([k, o, v])
            if not missing:
                continue
            if op.type == "ok":
                for k, o, v in missing:
                    out.setdefault("lost-write", []).append(
                        {"key": k, "offset": o, "value": v, "writer": op.index})
            else:
                out.setdefault("torn-transaction", []).append(
                    {"txn": op.index, "type": op.type, "reader": "all reads",
                     "seen": seen[:10], "missing": missing[:10]})
        return out

    def session_anomalies(self) -> dict:
        out: dict = {}
        writer = self.writer
        for (p, starts, reads), by_key in zip(self.sessions, self._session_keys()):
            seen_txns = None
            torn: dict = {}  # writer id -> example
            for k, recs in by_key.items():
                vis = self.visible.get(k, ())
                lo = starts.get(k)
                prev = None  # the highest offset read so far
                missed = []  # offsets of committed records read past, in read order
                i = bisect.bisect_left(vis, recs[0][2] if lo is None else lo)
                n = len(vis)
                for op, _k, o, v, _w in recs:
                    if i < n and vis[i] == o and (prev is None or o > prev):
                        i += 1  # the next visible record: the common case
                        prev = o
                        continue
                    if prev is not None and o <= prev:
                        out.setdefault("nonmonotonic-poll", []).append(
                            {"process": p, "key": k, "prev": prev, "offset": o, "value": v,
                             "index": op.index})
                        continue
                    j = bisect.bisect_left(vis, o)
                    if j > i:
                        missed.extend(vis[i:j])
                    i = j + 1 if j < n and vis[j] == o else j
                    prev = o
                if not missed:
                    continue
                if seen_txns is None:  # writer id -> {(key, offset)} this session read
                    seen_txns = defaultdict(set)
                    for _op, k2, o2, _v, w in reads:
                        if w is not None:
                            seen_txns[w.id].add((k2, o2))
                values = dict(self.order.get(k, ()))
                skipped = []
                for o in missed:
                    v = values[o]
                    w = writer.get((k, v))
                    if w is not None and seen_txns.get(w.id, set()) - {(k, o)}:
                        ex = torn.get(w.id)
                        if ex is None:
                            ex = torn[w.id] = {
                                "txn": w.index, "type": w.type, "process": p,
                                "reader": "session",
                                "seen": [[k2, o2, v2] for _op2, k2, o2, v2, w2 in reads
                                         if w2 is w and (k2, o2) != (k, o)][:10],
                                "missing": []}
                        if len(ex["missing"]) < 10:
                            ex["missing"].append([k, o, v])
                    else:
                        skipped.append([o, v])
                if skipped:
                    out.setdefault("poll-skip", []).append(
                        {"process": p, "key": k, "start": lo, "last_read": prev,
                         "count": len(skipped), "skipped": skipped[:10],
                         "index": recs[-1][0].index})
            for ex in torn.values():
                out.setdefault("torn-transaction", []).append(ex)
        return out

    # -------------------------------------------------------------- consumer offsets
    def consumer_offsets(self) -> dict:
        out: dict = {}
        by_group: dict = defaultdict(list)
        for op in self.ops:
            if op.f == "txn" and op.group is not None and op.committed is not False:
                by_group[op.group].append(op)
        for g in sorted(by_group, key=repr):
            processed: dict = defaultdict(lambda: defaultdict(list))  # key -> o -> [ops]
            polled_any: dict = defaultdict(set)
            hi: dict = {}
            lo: dict = {}
            for op in by_group[g]:
                for k, o, _v in op.reads:
                    polled_any[k].add(o)
                    if op.committed and op not in processed[k][o]:
                        processed[k][o].append(op)
                if op.committed:
                    for k, o in op.offsets.items():
                        if o is not None and o > hi.get(k, -1):
                            hi[k] = o
                for k, o in (op.positions or {}).items():
                    if o is not None:
                        lo[k] = min(lo.get(k, o), o)
            for k in sorted(processed):
                values = None
                for o in sorted(processed[k]):
                    ops_ = processed[k][o]
                    if len(ops_) > 1:
                        if values is None:
                            values = dict(self.order.get(k, []))
                        out.setdefault("committed-offset-repeat", []).append(
                            {"group": g, "key": k, "offset": o, "value": values.get(o),
                             "txns": [x.index for x in ops_][:10]})
            for k in sorted(hi):
                values = dict(self.order.get(k, []))
                vis = self.visible.get(k, [])
                start = lo.get(k, 0)
                missed = [o for o in vis[bisect.bisect_left(vis, start):
                                         bisect.bisect_left(vis, hi[k])]
                          if o not in polled_any[k]]
                for o in missed:
                    out.setdefault("committed-offset-skip", []).append(
                        {"group": g, "key": k, "offset": o, "value": values.get(o),
                         "committed_offset": hi[k]})
        return out

    # -------------------------------------------------------------- cycles
    def cycles(self, budget_s: float) -> dict:
        g = _PointGraph(self)
        return g.anomalies(budget_s)


class _PointGraph:
    """Nodes: ("c", op) commit point, ("w", key, op, first, last) a run's appends,
    ("l", key, first, last) "every record up to this run decided", ("z", index) a point of
    the history's real-time order. Every edge is a happened-before (see the docstring)."""

    def __init__(self, a: _Analysis):
        self.a = a
        succ: list[list[int]] = []
        info: list[tuple] = []
        self.succ, self.info = succ, info

        def node(inf) -> int:
            succ.append([])
            info.append(inf)
            return len(succ) - 1

        inner = [op for op in a.ops if op.committed]  # the transactions and polls in it
        cnode = {op.id: node(("c", op)) for op in inner}
        self.cnode = cnode
        zinv: dict = {}  # op id -> z node at its invocation
        # realtime: a chain of points in history order
        evs = [(op.inv_index, 1, op) for op in inner]
        evs += [(op.index, 0, op) for op in inner if op.type == "ok"]
        evs.sort(key=lambda e: e[0])
        z, last = None, None
        for _i, kind, op in evs:
            if kind == 1:
                if z is None:
                    z = node(("z", op.inv_index))
                zinv[op.id] = z
                succ[z].append(cnode[op.id])
                last = 1
            else:
                if z is None or last == 1:
                    nz = node(("z", op.index))
                    if z is not None:
                        succ[z].append(nz)
                    z = nz
                succ[cnode[op.id]].append(z)
                last = 0
        # ww runs and the decided chain, per key
        self.lfirst: dict = {}
        self.lnodes: dict = {}
        writer = a.writer
        for k, recs in a.order.items():
            prev_w = prev_l = None
            lf, ln = [], []
            run = None  # [writer, first, last]
            runs = []
            for o, v in recs:
                w = writer.get((k, v))
                if w is None:
                    continue
                if run is not None and run[0] is w:
                    run[2] = o
                else:
                    run = [w, o, o]
                    runs.append(run)
            for w, first, lst in runs:
                wn = len(succ)
                succ.append([])
                info.append(("w", k, w, first, lst))
                if prev_w is not None:
                    succ[prev_w].append(wn)
                prev_w = wn
                c = cnode.get(w.id)
                if c is not None:
                    zi = zinv.get(w.id)
                    if zi is not None:
                        succ[zi].append(wn)
                    ln_ = len(succ)
                    succ.append([])
                    info.append(("l", k, first, lst))
                    succ[wn].append(c)
                    succ[c].append(ln_)
                    if prev_l is not None:
                        succ[prev_l].append(ln_)
                    prev_l = ln_
                    lf.append(first)
                    ln.append(ln_)
            self.lfirst[k], self.lnodes[k] = lf, ln
        # reads: the last decided point at or below the highest offset read -> the reader
        self._tops: dict = {}  # op id -> {key: highest offset read}
        for op in inner:
            if not op.reads:
                continue
            top: dict = {}
            for k, o, _v in op.reads:
                if o is not None and o > top.get(k, -1):
                    top[k] = o
            self._tops[op.id] = top
            for k, o in top.items():
                i = bisect.bisect_right(self.lfirst.get(k, ()), o) - 1
                if i >= 0:
                    succ[self.lnodes[k][i]].append(cnode[op.id])

    # ---------------------------------------------------------------- search
    def _pruned(self) -> list[int]:
        """Nodes on or downstream of a cycle (what Kahn's algorithm cannot sort)."""
        succ = self.succ
        n = len(succ)
        indeg = [0] * n
        for s in succ:
            for v in s:
                indeg[v] += 1
        stack = [i for i in range(n) if indeg[i] == 0]
        while stack:
            u = stack.pop()
            for v in succ[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    stack.append(v)
        alive = [i for i in range(n) if indeg[i] > 0]
        return alive

    def _sccs(self, nodes, allowed) -> list[list[int]]:
        """Tarjan's strongly connected components (iterative) over ``nodes``, following
        the edges ``allowed(u, v)`` accepts; only those with more than one node."""
        member = set(nodes)
        index: dict = {}
        low: dict = {}
        on: set = set()
        stack: list = []
        out = []
        counter = 0
        for root in nodes:
            if root in index:
                continue
            work = [(root, 0)]
            while work:
                u, i = work[-1]
                if i == 0 and u not in index:
                    index[u] = low[u] = counter
                    counter += 1
                    stack.append(u)
                    on.add(u)
                succ = self.succ[u]
                advanced = False
                while i < len(succ):
                    v = succ[i]
                    i += 1
                    if v not in member or not allowed(u, v):
                        continue
                    if v not in index:
                        work[-1] = (u, i)
                        work.append((v, 0))
                        advanced = True
                        break
                    if v in on:
                        low[u] = min(low[u], index[v])
                if advanced:
                    continue
                work.pop()
                if work:
                    p = work[-1][0]
                    low[p] = min(low[p], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == u:
                            break
                    if len(comp) > 1:
                        out.append(comp)
        return out

    def _is_read(self, u, v) -> bool:
        return self.info[u][0] == "l" and self.info[v][0] == "c"

    def _cycle(self, comp, allowed, through=None) -> list[int] | None:
        """A shortest cycle in ``comp`` (through the edge ``through`` when given)."""
        member = set(comp)
        if through is not None:
            u0, v0 = through
            start, goal = v0, u0
        else:
            start = goal = None
            for u in comp:
                for v in self.succ[u]:
                    if v in member and allowed(u, v):
                        start, goal = v, u
                        break
                if start is not None:
                    break
            if start is None:
                return None
        prev = {start: None}
        q = deque([start])
        while q:
            u = q.popleft()
            if u == goal:
                break
            for v in self.succ[u]:
                if v in member and v not in prev and allowed(u, v):
                    prev[v] = u
                    q.append(v)
        if goal not in prev:
            return None
        path = []
        x = goal
        while x is not None:
            path.append(x)
            x = prev[x]
        path.reverse()  # start .. goal; goal -> start closes it
        return path

    def anomalies(self, budget_s: float) -> dict:
        out: dict = {}
        alive = self._pruned()
        if not alive:
            return out
        t0 = time.monotonic()
        every = self._sccs(alive, lambda u, v: True)
        explained = 0
        for comp in every:
            txns = sorted({self._owner(x).index for x in comp if self._owner(x) is not None})
            ex = {"txns": txns[:20], "txn_count": len(txns)}
            member = set(comp)
            if explained >= MAX_CYCLE_EXAMPLES or time.monotonic() - t0 > budget_s:
                has_read = any(self._is_read(u, v) for u in comp for v in self.succ[u]
                               if v in member)
                out.setdefault("G1c" if has_read else "G0", []).append(
                    {**ex, "steps": None, "note": "not explained (cycle search budget)"})
                continue
            explained += 1
            sub = self._sccs(comp, lambda u, v: not self._is_read(u, v))
            if sub:
                cyc = self._cycle(sub[0], lambda u, v: not self._is_read(u, v))
                out.setdefault("G0", []).append({**ex, **self._explain(cyc)})
                continue
            edge = next((u, v) for u in comp for v in self.succ[u]
                        if v in member and self._is_read(u, v))
            cyc = self._cycle(comp, lambda u, v: True, through=edge)
            out.setdefault("G1c", []).append({**ex, **self._explain(cyc)})
        return out

    def _owner(self, x):
        inf = self.info[x]
        if inf[0] == "c":
            return inf[1]
        if inf[0] == "w":
            return inf[2]
        return None

    def _explain(self, cyc: list[int] | None) -> dict:
        if not cyc:
            return {"steps": None}
        # rotate to start at a transaction's node, so each step has a "from"
        i0 = next((i for i, x in enumerate(cyc) if self.info[x][0] in ("c", "w")), 0)
        cyc = cyc[i0:] + cyc[:i0]
        n = len(cyc)
        steps = []
        realtime = False
        entered = None  # (kind, op, extra) when a chain of z or l points was entered
        for j in range(n):
            u, v = cyc[j], cyc[(j + 1) % n]
            iu, iv = self.info[u], self.info[v]
            if iu[0] == "w" and iv[0] == "w":
                steps.append({"rel": "ww", "from": iu[2].index, "to": iv[2].index,
                              "key": iu[1], "offsets": [iu[4], iv[3]]})
            elif iu[0] == "c" and iv[0] == "z":
                entered = ("z", iu[1])
            elif iu[0] == "c" and iv[0] == "l":
                entered = ("l", iu[1], iv)
            elif iu[0] == "z" and iv[0] in ("c", "w"):
                realtime = True
                to = iv[1] if iv[0] == "c" else iv[2]
                if entered is not None and entered[0] == "z" and entered[1] is not to:
                    steps.append({"rel": "realtime", "from": entered[1].index,
                                  "to": to.index})
                entered = None
            elif iu[0] == "l" and iv[0] == "c":
                reader = iv[1]
                st = {"rel": "wr", "to": reader.index, "key": iu[1],
                      "read_up_to": self._tops.get(reader.id, {}).get(iu[1])}
                if entered is not None and entered[0] == "l":
                    st["from"] = entered[1].index
                    st["writer_offsets"] = [entered[2][2], entered[2][3]]
                steps.append(st)
                entered = None
            if len(steps) >= MAX_CYCLE_STEPS:
                return {"steps": steps, "steps_truncated": True, "realtime": realtime}
        return {"steps": steps, "realtime": realtime}


def check_txn(history: list[dict], final: dict | None = None, final_reads: dict | None = None,
              cycle_budget_s: float = 5.0) -> dict:
    """Every anomaly of the txn workload (see the module docstring)."""
    # the analysis allocates millions of small objects and frees none until it returns:
    # the cyclic collector's passes over them would cost more than the check itself
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        a = _Analysis(history, final, final_reads)
        return merge(a.offsets(), a.read_anomalies(), a.lost(), a.session_anomalies(),
                     a.consumer_offsets(), a.cycles(cycle_budget_s))
    finally:
        if was_enabled:
            gc.enable()
