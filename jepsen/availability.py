"""Availability: how many client operations succeeded during each fault, compared
with the fault-free parts of the run (results.json ``availability``; report.html's
second timeline panel). Pure: reads a history, no cluster.

- A *fault window* runs from the nemesis ``start`` op's completion to the next
  ``stop``'s completion (the heal: a killed node restarted and listening), as the
  shading of the timeline; the rest of the client time -- from the first client
  operation's invocation to the last completion -- is *fault-free* (the recovery
  after a heal included: it counts against the baseline, not for the fault).
- *Client operations*: every op of a workload process (sends, polls, assigns,
  commits, ...; not the nemesis, not the leader observer).
- ``ok_per_s``: operations that completed ``ok`` per second, each counted at its
  completion time (a send that waited out a failover counts when it succeeded).
- ``ok_fraction``: of the operations invoked in the span, the share that completed
  ``ok`` (fail, info and never-completed ones are not).
- ``availability``: a span's ``ok_per_s`` over the fault-free ``ok_per_s``: 1.0 means
  the clients did as much during the fault as without it. Given per window, per
  fault kind (all its windows together), for all faults together and overall, and
  per operation (``by_f``: a poll that returns nothing is ok too, sends are the
  stricter measure); ``by_kind_and_nodes`` splits each kind by how many nodes a window
  hit (``"pause/1"``: one node paused; a partition counts its smaller side).
"""

from __future__ import annotations

from .checkers import pairs

#: Width of a bin of the successful-operations-per-second panel.
BIN_S = 1.0


def client_ops(history: list[dict]) -> list[tuple[dict, dict | None]]:
    """(invoke, completion or None) of every client operation."""
    return [(inv, comp) for inv, comp in pairs(history)
            if inv["process"] != "nemesis" and not str(inv["f"]).startswith("observe")]


def fault_windows(history: list[dict]) -> list[dict]:
    """{"start", "end" (s), "kind", "target", "what"} of every fault that started."""
    end = history[-1]["time"] / 1e9 if history else 0.0
    out: list[dict] = []
    current = None
    for inv, comp in pairs(history):
        if inv["process"] != "nemesis":
            continue
        t = (comp or inv)["time"] / 1e9
        if inv["f"] == "start" and comp is not None and comp["type"] == "ok":
            if current is not None:
                current["end"] = t
                out.append(current)
            value = inv.get("value") or {}
            current = {"start": t, "end": None, "kind": str(value.get("kind", "?")),
                       "target": str(value.get("target", "")), "what": str(comp.get("value"))}
        elif inv["f"] == "stop" and current is not None:
            current["end"] = t
            out.append(current)
            current = None
    if current is not None:
        current["end"] = end
        out.append(current)
    return out


class _Tally:
    def __init__(self):
        self.seconds = 0.0
        self.ops = 0  # invoked in the span
        self.ok_invoked = 0  # of those, completed ok
        self.ok = 0  # ok completions in the span
        self.by_f: dict[str, list[int]] = {}  # f -> [invoked, ok completions]

    def invoked(self, f: str, ok: bool) -> None:
        self.ops += 1
        self.ok_invoked += ok
        self.by_f.setdefault(f, [0, 0])[0] += 1

    def completed_ok(self, f: str) -> None:
        self.ok += 1
        self.by_f.setdefault(f, [0, 0])[1] += 1

    def summary(self, base: dict | None) -> dict:
        rate = self.ok / self.seconds if self.seconds > 0 else None
        out = {"seconds": round(self.seconds, 3), "ops": self.ops, "ok": self.ok,
               "ok_fraction": round(self.ok_invoked / self.ops, 4) if self.ops else None,
               "ok_per_s": None if rate is None else round(rate, 2)}
        by_f = {}
        for f, (n, ok) in sorted(self.by_f.items()):
            r = ok / self.seconds if self.seconds > 0 else None
            by_f[f] = {"ops": n, "ok": ok, "ok_per_s": None if r is None else round(r, 2)}
            if base is not None:
                by_f[f]["availability"] = _ratio(r, base.get("by_f", {}).get(f, {}).get("ok_per_s"))
        out["by_f"] = by_f
        if base is not None:
            out["availability"] = _ratio(rate, base.get("ok_per_s"))
        return out


def _ratio(x: float | None, base: float | None) -> float | None:
    if x is None or not base:
        return None
    return round(x / base, 3)


def availability(history: list[dict]) -> dict:
    """The ``availability`` section of results.json (see the module docstring)."""
    ops = client_ops(history)
    windows = fault_windows(history)
    if not ops:
        return {"fault_free": None, "faults": None, "overall": None, "by_kind": {},
                "windows": [], "note": "no client operations"}
    t0 = min(inv["time"] for inv, _ in ops) / 1e9
    t1 = max((comp or inv)["time"] for inv, comp in ops) / 1e9
    spans = [(max(w["start"], t0), min(w["end"], t1)) for w in windows]
    fault_free, faults, overall = _Tally(), _Tally(), _Tally()
    per_window = [_Tally() for _ in windows]
    overall.seconds = t1 - t0
    for w, (a, b) in zip(per_window, spans):
        w.seconds = max(0.0, b - a)
    faults.seconds = sum(w.seconds for w in per_window)
    fault_free.seconds = max(0.0, overall.seconds - faults.seconds)

    def tallies(t: float) -> list[_Tally]:
        hit = [w for w, (a, b) in zip(per_window, spans) if a <= t < b]
        return [overall, *(hit + [faults] if hit else [fault_free])]

    for inv, comp in ops:
        f = str(inv["f"])
        ok = comp is not None and comp["type"] == "ok"
        for tally in tallies(inv["time"] / 1e9):
            tally.invoked(f, ok)
        if ok:
            for tally in tallies(comp["time"] / 1e9):
                tally.completed_ok(f)
    base = fault_free.summary(None)
    out_windows = []
    for w, tally in zip(windows, per_window):
        out_windows.append({"start": round(w["start"], 3), "end": round(w["end"], 3),
                            "kind": w["kind"], "target": w["target"], "what": w["what"],
                            **tally.summary(base)})
    def grouped(key) -> dict:
        acc: dict = {}
        members: dict = {}
        for w, ow, tally in zip(windows, out_windows, per_window):
            name = key(w)
            if name is None:
                continue
            members.setdefault(name, []).append(ow)
            _merge(acc.setdefault(name, _Tally()), tally)
        out = {}
        for name, tally in sorted(acc.items()):
            ws = [w["availability"] for w in members[name] if w["availability"] is not None]
            out[name] = {**tally.summary(base), "windows": len(members[name]),
                         "worst_window_availability": min(ws) if ws else None}
        return out

    return {"fault_free": base, "faults": faults.summary(base) if windows else None,
            "overall": overall.summary(base), "by_kind": grouped(lambda w: w["kind"]),
            "by_kind_and_nodes": grouped(
                lambda w: None if nodes_hit(w["what"]) is None
                else f"{w['kind']}/{nodes_hit(w['what'])}"),
            "windows": out_windows}


def nodes_hit(what: str) -> int | None:
    """How many nodes a fault hit, from the nemesis's description ("pause [1, 3]": 2;
    a partition "[[5], [1, 2, 3, 4]]": the smaller side, 1); None when it names none."""
    import re

    groups = re.findall(r"\[([\d,\s]+)\]", what)
    if not groups:
        return None
    sizes = [len([x for x in g.split(",") if x.strip()]) for g in groups]
    return min(sizes) if what.lstrip().startswith("partition") and len(sizes) > 1 else sizes[0]


def _merge(into: _Tally, tally: _Tally) -> None:
    into.seconds += tally.seconds
    into.ops += tally.ops
    into.ok_invoked += tally.ok_invoked
    into.ok += tally.ok
    for f, (n, ok) in tally.by_f.items():
        acc = into.by_f.setdefault(f, [0, 0])
        acc[0] += n
        acc[1] += ok


def ok_per_second(history: list[dict], bin_s: float = BIN_S) -> dict[str, list[tuple[float, int]]]:
    """{f: [(bin start s, ok completions in the bin)]} for the timeline's second panel
    (every bin from the first to the last client operation, empty ones included)."""
    ops = client_ops(history)
    if not ops:
        return {}
    t0 = min(inv["time"] for inv, _ in ops) / 1e9
    t1 = max((comp or inv)["time"] for inv, comp in ops) / 1e9
    start = int(t0 // bin_s) * bin_s
    n = int((t1 - start) // bin_s) + 1
    counts: dict[str, list[int]] = {}
    for inv, comp in ops:
        if comp is not None and comp["type"] == "ok":
            i = min(n - 1, int((comp["time"] / 1e9 - start) // bin_s))
            counts.setdefault(str(inv["f"]), [0] * n)[i] += 1
    return {f: [(round(start + i * bin_s, 3), c) for i, c in enumerate(cs)]
            for f, cs in sorted(counts.items())}
