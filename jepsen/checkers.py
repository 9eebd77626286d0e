"""Pure checkers over a history and a final log (no I/O, no sockets).

A history is a list of operation dicts, as recorded by :mod:`raftlog.jepsen.history`:

``{"index": i, "type": "invoke"|"ok"|"fail"|"info", "process": p, "f": f, "value": v,
"time": ns}`` (monotonic nanoseconds since the start of the run). Every completion
(ok / fail / info) follows its invocation by the same process; a process has at most
one operation open at a time. ``info`` means indeterminate (it may or may not have
happened). Operations of the queue workload:

- ``send``: value ``[key, v]`` (key names a topic-partition, e.g. ``"jepsen-0"``; v is an
  int unique over the run); its ok completion carries ``"offset": o``.
- ``poll``: invoke value None; ok value ``{key: [[offset, v], ...]}``.
- ``assign``: ok value ``{"keys": [...], "positions": {key: offset}}``; a new consumer
  whose next poll starts at ``positions[key]`` (absent key: from the beginning).

The idempotent workload records the same ops. The groups workload adds ``"group": g``
to its ``poll`` ops (members of consumer group g), and ``commit`` / ``committed`` ops
(see :func:`check_groups`).

The final log is ``{key: [[offset, v], ...]}``: every partition read from the start to
its high watermark after the run, with fresh clients.

Every checker returns ``{anomaly name: [example, ...]}`` (only non-empty lists).
"""

from __future__ import annotations

import bisect
from collections import defaultdict

#: Examples kept per anomaly type in results (counts are kept in full).
MAX_EXAMPLES = 20


# ----------------------------------------------------------------------------- helpers


def pairs(history: list[dict]) -> list[tuple[dict, dict | None]]:
    """(invoke, completion) for every invocation; completion None if the run ended first."""
    open_: dict = {}
    out: list[list] = []
    for op in history:
        if op["type"] == "invoke":
            slot = [op, None]
            open_[op["process"]] = slot
            out.append(slot)
        else:
            slot = open_.pop(op["process"], None)
            if slot is not None:
                slot[1] = op
    return [(a, b) for a, b in out]


def final_index(final: dict) -> dict:
    """{key: {offset: value}} and {key: {value: [offsets]}} of the final log."""
    by_offset: dict = {}
    by_value: dict = {}
    for key, recs in final.items():
        bo = by_offset.setdefault(key, {})
        bv = by_value.setdefault(key, defaultdict(list))
        for o, v in recs:
            bo[o] = v
            bv[v].append(o)
    return {"by_offset": by_offset, "by_value": by_value}


def _add(out: dict, name: str, example) -> None:
    out.setdefault(name, []).append(example)


def merge(*results: dict) -> dict:
    out: dict = {}
    for r in results:
        for k, v in r.items():
            out.setdefault(k, []).extend(v)
    return out


def sends(history: list[dict]) -> list[tuple[dict, dict | None]]:
    return [(i, c) for i, c in pairs(history) if i["f"] == "send"]


def polls(history: list[dict]):
    """(process, key, offset, value, op) for every record an ok poll returned."""
    for op in history:
        if op["f"] == "poll" and op["type"] == "ok":
            for key, recs in (op.get("value") or {}).items():
                for o, v in recs:
                    yield op["process"], key, o, v, op


# ----------------------------------------------------------------------------- checkers


def check_lost(history: list[dict], final: dict) -> dict:
    """An acknowledged send missing from the final log, or found at another offset."""
    idx = final_index(final)
    out: dict = {}
    for _inv, comp in sends(history):
        if comp is None or comp["type"] != "ok":
            continue
        key, v = comp["value"]
        o = comp.get("offset")
        offsets = idx["by_value"].get(key, {}).get(v, [])
        if not offsets:
            _add(out, "lost", {"key": key, "value": v, "offset": o, "index": comp["index"]})
        elif o is not None and o not in offsets:
            _add(out, "lost", {"key": key, "value": v, "offset": o, "final_offsets": offsets,
                               "index": comp["index"], "reason": "at another offset"})
    return out


def check_failed_sends(history: list[dict], final: dict) -> dict:
    """failed-send-written: a send recorded as failed (definitely not written: raised
    before it was sent, or every attempt refused by a leader whose append failed, e.g.
    on a full disk) whose value is in the final log."""
    idx = final_index(final)["by_value"]
    out: dict = {}
    for _inv, comp in sends(history):
        if comp is None or comp["type"] != "fail" or not isinstance(comp.get("value"), list):
            continue
        key, v = comp["value"]
        offsets = idx.get(key, {}).get(v)
        if offsets:
            _add(out, "failed-send-written", {"key": key, "value": v, "offsets": offsets,
                                              "index": comp["index"],
                                              "error": comp.get("error")})
    return out


def check_offsets(history: list[dict], final: dict) -> dict:
    """inconsistent-offsets: one (key, offset) with two values, over acknowledged sends,
    polls and the final log. duplicate: one value at two offsets (final log or polls)."""
    seen: dict = defaultdict(lambda: defaultdict(set))  # key -> offset -> {values}
    where: dict = defaultdict(lambda: defaultdict(set))  # key -> value -> {offsets}
    for _inv, comp in sends(history):
        if comp is not None and comp["type"] == "ok" and comp.get("offset") is not None:
            key, v = comp["value"]
            seen[key][comp["offset"]].add(v)
            where[key][v].add(comp["offset"])
    for _p, key, o, v, _op in polls(history):
        seen[key][o].add(v)
        where[key][v].add(o)
    for key, recs in final.items():
        for o, v in recs:
            seen[key][o].add(v)
            where[key][v].add(o)
    out: dict = {}
    for key in sorted(seen):
        for o in sorted(seen[key]):
            vals = seen[key][o]
            if len(vals) > 1:
                _add(out, "inconsistent-offsets", {"key": key, "offset": o,
                                                   "values": sorted(vals, key=repr)})
    for key in sorted(where):
        for v, offs in where[key].items():
            if len(offs) > 1:
                _add(out, "duplicate", {"key": key, "value": v, "offsets": sorted(offs)})
    return out


def check_aborted_read(history: list[dict], final: dict | None = None) -> dict:
    """A poll returned a value whose send definitely failed."""
    failed = {}
    for _inv, comp in sends(history):
        if comp is not None and comp["type"] == "fail":
            failed[tuple(comp["value"])] = comp["index"]
    out: dict = {}
    for p, key, o, v, op in polls(history):
        if (key, v) in failed:
            _add(out, "aborted-read", {"key": key, "offset": o, "value": v, "process": p,
                                       "poll_index": op["index"], "send_index": failed[(key, v)]})
    return out


def check_read_committed(history: list[dict], final: dict) -> dict:
    """read-not-committed: a poll returned a record that is not in the final log at
    that offset (it was later lost, or the read saw data beyond what survived)."""
    idx = final_index(final)["by_offset"]
    out: dict = {}
    for p, key, o, v, op in polls(history):
        fo = idx.get(key, {})
        if o not in fo:
            _add(out, "read-not-committed", {"key": key, "offset": o, "value": v, "process": p,
                                             "index": op["index"]})
        elif fo[o] != v:
            _add(out, "read-not-committed", {"key": key, "offset": o, "value": v, "process": p,
                                             "index": op["index"], "final_value": fo[o]})
    return out


def check_polls(history: list[dict], final: dict) -> dict:
    """For each consumer process, between assigns: offsets returned per key must strictly
    increase (nonmonotonic-poll) and must not jump over offsets present in the final log
    (skipping-poll). After an assign with a position, the first record read must be the
    first final-log record at or after that position. Polls of group members (``"group"``
    in the op) are left out: a rebalance may hand a partition back to a member at its
    committed offset, below what it already read (at-least-once); check_groups covers them."""
    offsets = {k: sorted(o for o, _ in recs) for k, recs in final.items()}
    last: dict = {}  # (process, key) -> last offset delivered (or position - 1)
    out: dict = {}
    for op in history:
        if op["type"] != "ok":
            continue
        p = op["process"]
        if op["f"] == "assign":
            for k in list(last):
                if k[0] == p:
                    del last[k]
            for key, pos in ((op.get("value") or {}).get("positions") or {}).items():
                last[(p, key)] = pos - 1
            continue
        if op["f"] != "poll" or op.get("group") is not None:
            continue
        for key, recs in (op.get("value") or {}).items():
            for o, v in recs:
                prev = last.get((p, key))
                if prev is not None and o <= prev:
                    _add(out, "nonmonotonic-poll", {"process": p, "key": key, "prev": prev,
                                                    "offset": o, "value": v, "index": op["index"]})
                else:
                    lo = -1 if prev is None else prev
                    fo = offsets.get(key, [])
                    i = bisect.bisect_right(fo, lo)
                    if i < len(fo) and fo[i] < o:
                        _add(out, "skipping-poll", {"process": p, "key": key, "prev": prev,
                                                    "offset": o, "skipped": fo[i:bisect.bisect_left(fo, o)][:10],
                                                    "index": op["index"]})
                last[(p, key)] = max(o, last.get((p, key), -1))
    return out


def check_nonmonotonic_send(history: list[dict], final: dict | None = None) -> dict:
    """A send invoked after another send to the same key completed ok must get a higher
    offset (real-time order; this covers each process's own order too)."""
    events: dict = defaultdict(list)  # key -> [(time, kind, op)]
    for inv, comp in sends(history):
        if comp is None or comp["type"] != "ok" or comp.get("offset") is None:
            continue
        key = comp["value"][0]
        # completion before invocation at equal times: order by (time, 0=complete, 1=invoke)
        events[key].append((inv["time"], 1, inv["index"], comp))
        events[key].append((comp["time"], 0, comp["index"], comp))
    out: dict = {}
    for key, evs in events.items():
        evs.sort(key=lambda e: (e[0], e[1], e[2]))
        best: dict | None = None  # completed op with the highest offset so far
        floor: dict = {}  # comp index -> best completed op when it was invoked
        for _t, kind, _i, comp in evs:
            if kind == 1:
                floor[comp["index"]] = best
            else:
                b = floor.get(comp["index"])
                if b is not None and comp["offset"] <= b["offset"]:
                    _add(out, "nonmonotonic-send", {
                        "key": key, "earlier": {"value": b["value"][1], "offset": b["offset"],
                                                "index": b["index"]},
                        "later": {"value": comp["value"][1], "offset": comp["offset"],
                                  "index": comp["index"]}})
                if best is None or comp["offset"] > best["offset"]:
                    best = comp
    return out


def check_exactly_once(history: list[dict], final: dict) -> dict:
    """Idempotent workload: every acknowledged value exactly once in the final log; an
    indeterminate (info) or failed one at most once."""
    idx = final_index(final)["by_value"]
    out: dict = {}
    for inv, comp in sends(history):
        key, v = inv["value"]
        n = len(idx.get(key, {}).get(v, []))
        t = comp["type"] if comp else "info"
        if n > 1:
            _add(out, "duplicate", {"key": key, "value": v, "count": n, "type": t})
        elif n == 0 and t == "ok":
            _add(out, "lost", {"key": key, "value": v, "index": comp["index"]})
        elif n == 1 and t == "fail":
            _add(out, "aborted-write", {"key": key, "value": v, "index": comp["index"]})
    return out


def _commit_offsets(value: dict | None) -> dict:
    """{key: offset} of a ``commit`` / ``committed`` value: ``{"key": k, "offset": o}`` or
    ``{"offsets": {k: o}}`` (None offsets: nothing committed yet, left out)."""
    if not value:
        return {}
    if "offsets" in value:
        return {k: o for k, o in (value["offsets"] or {}).items() if o is not None}
    if value.get("key") is not None and value.get("offset") is not None:
        return {value["key"]: value["offset"]}
    return {}


def check_groups(history: list[dict], final: dict) -> dict:
    """Groups workload. ``commit`` ops (a member commits; acknowledged when ok): invoke
    value ``{"group": g, "key": k, "offset": o}`` or ``{"group": g, "offsets": {k: o}}``.
    ``committed`` ops (anyone reads the group's committed offsets): ok value ``{"group":
    g, "offsets": {k: o or None}}``. Members are the processes whose ``poll`` ops carry
    ``"group": g``.

    - committed-offset-regression: per (group, key), an acknowledged commit or a read
      that began after another acknowledged commit or read of the same (group, key)
      completed, with a lower offset (committed offsets never go back; an acknowledged
      commit is durable).
    - unprocessed: a final-log record below the highest committed offset of a group
      (acknowledged or read) that no member of that group polled.
    - unconsumed-acked: an acknowledged send, in the final log at or beyond that offset,
      that no member of the group polled (every acknowledged record is processed at
      least once by each group; the workload drains before it stops)."""
    out: dict = {}
    events: dict = defaultdict(list)  # (group, key) -> [(time, 0=complete/1=invoke, i, ev)]
    groups: set = set()
    for inv, comp in pairs(history):
        f = inv["f"]
        if f not in ("commit", "committed") or comp is None or comp["type"] != "ok":
            continue
        v = inv["value"] if f == "commit" else comp["value"]
        g = (v or {}).get("group", (inv["value"] or {}).get("group"))
        groups.add(g)
        for key, o in _commit_offsets(v).items():
            ev = {"offset": o, "f": f, "index": comp["index"], "process": inv["process"]}
            if comp.get("coordinator") is not None:  # the node that answered, when known
                ev["coordinator"] = comp["coordinator"]
            events[(g, key)].append((inv["time"], 1, inv["index"], ev))
            events[(g, key)].append((comp["time"], 0, comp["index"], ev))
    last_committed: dict = {}
    for (g, key), evs in events.items():
        evs.sort(key=lambda e: (e[0], e[1], e[2]))
        best = None  # completed op with the highest offset so far
        floor: dict = {}  # id(ev) -> best when it was invoked
        for _t, kind, _i, ev in evs:
            if kind == 1:
                floor[id(ev)] = best
                continue
            b = floor.get(id(ev))
            if b is not None and ev["offset"] < b["offset"]:
                _add(out, "committed-offset-regression", {
                    "group": g, "key": key, "earlier": b["offset"], "later": ev["offset"],
                    "earlier_op": {k: v for k, v in b.items() if k != "offset"},
                    "later_op": {k: v for k, v in ev.items() if k != "offset"},
                    "index": ev["index"]})
            if best is None or ev["offset"] > best["offset"]:
                best = ev
        if best is not None:
            last_committed[(g, key)] = best["offset"]
    seen: dict = defaultdict(set)  # (group, key) -> {values}
    for op in history:
        if op["f"] == "poll" and op["type"] == "ok" and op.get("group") is not None:
            groups.add(op["group"])
            for key, recs in (op.get("value") or {}).items():
                for _o, v in recs:
                    seen[(op["group"], key)].add(v)
    for (g, key), upto in sorted(last_committed.items(), key=repr):
        for o, v in final.get(key, []):
            if o < upto and v not in seen[(g, key)]:
                _add(out, "unprocessed", {"group": g, "key": key, "offset": o, "value": v})
    if groups - {None}:
        idx = final_index(final)["by_value"]
        for _inv, comp in sends(history):
            if comp is None or comp["type"] != "ok":
                continue
            key, v = comp["value"]
            offs = idx.get(key, {}).get(v)
            if not offs:
                continue  # lost: reported by check_lost
            for g in sorted(groups - {None}, key=repr):
                if v not in seen[(g, key)] and min(offs) >= last_committed.get((g, key), 0):
                    _add(out, "unconsumed-acked", {
                        "group": g, "key": key, "value": v, "offset": min(offs),
                        "committed": last_committed.get((g, key)), "index": comp["index"]})
    return out


def check_leaders(observations: list[dict]) -> dict:
    """Leader safety: at most one leader per (key, leader epoch). An observation is
    ``{"key": k, "epoch": e, "leader": node_id, "node": who_reported, "time": ns}``, with
    ``"topic_id"`` when known: a topic deleted and created again starts over at epoch 0,
    so epochs are compared within one incarnation."""
    by: dict = defaultdict(dict)
    for ob in observations:
        if ob.get("leader") is None or ob["leader"] < 0:
            continue
        by[(ob["key"], str(ob.get("topic_id", "")), ob["epoch"])].setdefault(ob["leader"], ob)
    out: dict = {}
    for (key, tid, epoch), leaders in sorted(by.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])):
        if len(leaders) > 1:
            _add(out, "multiple-leaders", {"key": key, "topic_id": tid, "epoch": epoch,
                                           "leaders": sorted(leaders),
                                           "reported_by": {str(ld): ob.get("node")
                                                           for ld, ob in leaders.items()}})
    return out


def check_liveness(history: list[dict], final: dict, final_reads: dict | None) -> dict:
    """After healing, the final read of every key must reach past every acknowledged
    offset. ``final_reads``: {key: {"reached": bool, "hw": int, "seconds": float}}."""
    out: dict = {}
    max_acked: dict = {}
    for _inv, comp in sends(history):
        if comp is not None and comp["type"] == "ok" and comp.get("offset") is not None:
            k = comp["value"][0]
            max_acked[k] = max(max_acked.get(k, -1), comp["offset"])
    for key, o in sorted(max_acked.items()):
        info = (final_reads or {}).get(key)
        hw = info.get("hw", -1) if info else max((x for x, _ in final.get(key, [])), default=-1) + 1
        if info is not None and not info.get("reached", True):
            _add(out, "final-read-incomplete", {"key": key, **info})
        if hw <= o:
            _add(out, "unreachable-acked-offset", {"key": key, "max_acked_offset": o, "hw": hw})
    return out


# ----------------------------------------------------------------------------- suites

def check_replicas(final: dict, final_reads: dict | None, replicas: dict | None) -> dict:
    """replica-divergence: a replica holds, below the high watermark of the final read,
    another value than the final log at some offset (a follower that kept a tail it
    should have truncated on a leader change: in the ISR the HW counts its LEO, so the
    clients may never notice until that replica leads; out of it, it stays out for good
    when its tail reaches past the leader's end). The harness reads the replicas after
    waiting for every ISR to fill up again, so a correct follower has truncated by then.

    ``replicas``: ``{key: {node_id: [[offset, value], ...]}}``, each replica's log read
    from its files after the cluster stopped. Offsets one side lacks are not compared
    (retention, compaction, or a final read that stopped short)."""
    out: dict = {}
    idx = final_index(final)["by_offset"]
    for key, by_node in sorted((replicas or {}).items()):
        hw = ((final_reads or {}).get(key) or {}).get("hw", -1)
        want = idx.get(key, {})
        for node, recs in sorted(by_node.items(), key=lambda kv: str(kv[0])):
            bad = [(o, v) for o, v in recs if o < hw and o in want and want[o] != v]
            if bad:
                o, v = bad[0]
                _add(out, "replica-divergence", {
                    "key": key, "node": node, "offset": o, "replica_value": v,
                    "final_value": want[o], "diverging_offsets": len(bad), "hw": hw})
    return out


#: anomaly types reported but not counted against validity, per workload.
ALLOWED = {
    # the queue workload does not promise exactly-once (a producer without idempotence
    # duplicates a record when a retry's first attempt was written, as Kafka's does);
    # the idempotent workload is the one that counts duplicates
    "queue": {"duplicate", "unknown-final-tail", "lost-unsynced"},
    "metadata": {"stale-describe", "lost-unsynced"},
    "idempotent": {"unknown-final-tail", "lost-unsynced"},
    "groups": {"duplicate", "unknown-final-tail", "lost-unsynced"},
}

#: What an allowed anomaly means, for the report.
NOTES = {
    "lost-unsynced": "the documented loss of topics at write.caching=true (without "
                     "flush.messages=1): records are acknowledged once replicated, before "
                     "any fsync, so a power loss of every node at once may take back "
                     "acknowledged records that no node had fsynced yet (and what "
                     "followed from it: their offsets reused, consumers that had read "
                     "them). Examples keep the original anomaly name in 'was'.",
}


def power_losses_of_all(history: list[dict]) -> list[int]:
    """History indexes of the completions of every power loss that hit all nodes at
    once (the powerloss nemesis's ``start`` ops with ``power_loss.all``)."""
    return [op["index"] for op in history
            if op.get("process") == "nemesis" and op["type"] == "ok"
            and (op.get("power_loss") or {}).get("all")]


def _unsynced_lost(history: list[dict], final: dict, before: int) -> dict:
    """{key: {value: lowest offset}} of the records acknowledged or read before history
    index ``before`` that the final log does not hold at all."""
    idx = final_index(final)["by_value"]
    out: dict = defaultdict(dict)

    def note(key, v, o):
        if v in idx.get(key, {}):
            return
        prev = out[key].get(v)
        out[key][v] = o if prev is None or (o is not None and o < prev) else prev

    for _inv, comp in sends(history):
        if comp is not None and comp["type"] == "ok" and comp["index"] < before:
            note(comp["value"][0], comp["value"][1], comp.get("offset"))
    for _p, key, o, v, op in polls(history):
        if op["index"] < before:
            note(key, v, o)
    return out


def explain_power_loss(anomalies: dict, history: list[dict], final: dict) -> dict:
    """For a run whose nodes do not fsync before acknowledging (flush.messages is not
    1): move to ``lost-unsynced`` what a power loss of every node at once explains --
    records acknowledged or read before such a power loss and absent from the final log
    (``lost``, ``read-not-committed``), offsets of those records given to later ones
    (``inconsistent-offsets``, ``nonmonotonic-send``), acknowledged offsets beyond the
    final high watermark only because of them (``unreachable-acked-offset``),
    consumers whose position came from them (``nonmonotonic-poll``, ``skipping-poll``,
    ``unprocessed``) and committed offsets that went back across the power loss
    (``committed-offset-regression``). Without such a power loss nothing moves, and
    everything else (replica divergence, duplicates with idempotence, a corrupt batch
    served, multiple leaders...) stays as it is."""
    events = power_losses_of_all(history)
    if not events:
        return anomalies
    lost = _unsynced_lost(history, final, max(events))
    low = {k: min((o for o in vs.values() if o is not None), default=None)
           for k, vs in lost.items()}
    acked_kept: dict = {}
    for _inv, comp in sends(history):
        if comp is not None and comp["type"] == "ok" and comp.get("offset") is not None:
            key, v = comp["value"]
            if v not in lost.get(key, {}):
                acked_kept[key] = max(acked_kept.get(key, -1), comp["offset"])

    def from_lost(key, prev) -> bool:
        return low.get(key) is not None and prev is not None and prev >= low[key]

    def explained(name: str, ex: dict) -> bool:
        key = ex.get("key")
        if name in ("lost", "read-not-committed"):
            return ex.get("value") in lost.get(key, {})
        if name == "inconsistent-offsets":
            return len([v for v in ex["values"] if v not in lost.get(key, {})]) <= 1
        if name == "nonmonotonic-send":
            return ex["earlier"]["value"] in lost.get(key, {})
        if name == "unreachable-acked-offset":
            return bool(lost.get(key)) and acked_kept.get(key, -1) < ex["hw"]
        if name in ("nonmonotonic-poll", "skipping-poll"):
            return from_lost(key, ex.get("prev"))
        if name == "unprocessed":
            return from_lost(key, ex.get("offset"))
        if name == "committed-offset-regression":
            a, b = ex["earlier_op"].get("index", -1), ex.get("index", -1)
            return any(a < e < b for e in events)
        return False

    out: dict = {}
    for name, exs in anomalies.items():
        for ex in exs:
            if explained(name, ex):
                _add(out, "lost-unsynced", {"was": name, **ex})
            else:
                _add(out, name, ex)
    return out


def _unread_tail(anomalies: dict, final: dict, final_reads: dict | None) -> dict:
    """When the final read of a key stopped short of its high watermark, records beyond
    where it stopped are unknown, not lost: lost / read-not-committed examples there move
    to ``unknown-final-tail`` (the stop itself is reported by the liveness checker)."""
    short = {k: max((o for o, _ in final.get(k, [])), default=-1)
             for k, info in (final_reads or {}).items() if not info.get("reached", True)}
    if not short:
        return anomalies
    out: dict = {}
    for name, exs in anomalies.items():
        for ex in exs:
            if (name in ("lost", "read-not-committed") and ex.get("key") in short
                    and ex.get("offset") is not None and ex["offset"] > short[ex["key"]]):
                _add(out, "unknown-final-tail", {"was": name, **ex})
            else:
                _add(out, name, ex)
    return out


def check_queue(history: list[dict], final: dict, final_reads: dict | None = None,
                observations: list[dict] | None = None) -> dict:
    return merge(_unread_tail(merge(
        check_lost(history, final),
        check_read_committed(history, final)), final, final_reads),
        check_offsets(history, final),
        check_failed_sends(history, final),
        check_aborted_read(history, final),
        check_polls(history, final),
        check_nonmonotonic_send(history, final),
        check_liveness(history, final, final_reads),
        check_leaders(observations or []),
    )


def summarize(anomalies: dict, workload: str) -> tuple[bool, dict, dict]:
    """(valid, anomalies with at most MAX_EXAMPLES each, counts)."""
    allowed = ALLOWED.get(workload, set())
    counts = {k: len(v) for k, v in anomalies.items() if v}
    valid = not any(k not in allowed for k in counts)
    trimmed = {k: v[:MAX_EXAMPLES] for k, v in anomalies.items() if v}
    return valid, trimmed, counts
