"""A simulated correct transactional log that records txn-workload histories (no sockets).

Partitions hold records and commit/abort markers (a marker takes an offset, as in
Kafka). A transaction appends its records while open; a read_committed read stops at the
last stable offset (the first offset of the earliest open transaction) and skips aborted
records and markers. Producers run one transaction at a time; read-process-write
producers own disjoint input keys of one group, poll them first, and commit the
consumer's position with the transaction. Outcomes are recorded as ok (committed), fail
(aborted) or info (either, decided now or later)."""

from __future__ import annotations

import random

from raftlog.jepsen.history import History


class TxnSim:
    def __init__(self, seed: int, keys=("txn-0", "txn-1", "txn-2"), producers=3,
                 rpw=1, consumers=2, group="g", bug=None):
        assert bug in BUGS, bug
        self.bug = bug
        self.rnd = random.Random(seed)
        self.h = History()
        self.keys = list(keys)
        self.log = {k: [] for k in keys}  # [[value or None (marker), txn id]]
        self.state: dict = {}  # txn id -> "open" | "commit" | "abort"
        self.open: set = set()  # ids of open transactions
        self.torn: dict = {}  # (txn id, key) -> "commit" | "abort" (bug: per-key outcomes)
        self.first: dict = {}  # txn id -> {key: first offset}
        self.next_value = 0
        self.group = group
        self.committed_offsets: dict = {}  # key -> next offset of the group
        self.procs = []
        rpw_keys = self.keys[:rpw]
        for p in range(producers):
            owned = [rpw_keys[p]] if p < rpw else []
            self.procs.append({"kind": "producer", "p": p, "owned": owned, "txn": None,
                               "pending": None})
        for c in range(consumers):
            self.procs.append({"kind": "consumer", "p": 100 + c, "pos": None})

    # ---------------------------------------------------------------- the log
    def lso(self, key) -> int:
        if self.bug == "lso-ignores-open-txn":
            return len(self.log[key])
        opened = [self.first[t][key] for t in self.open if key in self.first.get(t, ())]
        return min(opened, default=len(self.log[key]))

    def read(self, key, pos, n) -> tuple[list, int]:
        """read_committed from pos: ([[offset, v]], next position)."""
        out = []
        end = self.lso(key)
        while pos < end and len(out) < n:
            v, t = self.log[key][pos]
            st = self.torn.get((t, key), self.state[t])
            if v is not None and (st == "commit" or st == "open"
                                  and self.bug == "lso-ignores-open-txn"):
                out.append([pos, v])
            pos += 1
        return out, pos

    def append(self, key, v, t) -> int:
        self.log[key].append([v, t])
        self.first.setdefault(t, {}).setdefault(key, len(self.log[key]) - 1)
        return len(self.log[key]) - 1

    def decide(self, t, commit: bool) -> None:
        self.state[t] = "commit" if commit else "abort"
        self.open.discard(t)
        for key in self.first.get(t, {}):
            self.log[key].append([None, t])  # the marker

    def final(self) -> dict:
        return {k: self.read(k, 0, 10**9)[0] for k in self.keys}

    # ---------------------------------------------------------------- processes
    def step(self) -> None:
        pr = self.rnd.choice(self.procs)
        if pr["kind"] == "consumer":
            self._consumer(pr)
        else:
            self._producer(pr)

    def _consumer(self, pr) -> None:
        if pr["pos"] is None or self.rnd.random() < 0.05:
            keys = self.rnd.sample(self.keys, self.rnd.randint(1, len(self.keys)))
            pos = {k: self.rnd.choice([0, self.rnd.randint(0, len(self.log[k]))]) for k in keys}
            inv = self.h.invoke(pr["p"], "assign", None)
            self.h.ok(inv, {"keys": keys, "positions": dict(pos)})
            pr["pos"] = pos
            return
        inv = self.h.invoke(pr["p"], "poll", None)
        got = {}
        for k in pr["pos"]:
            recs, pr["pos"][k] = self.read(k, pr["pos"][k], self.rnd.randint(1, 4))
            if recs:
                got[k] = recs
        self.h.ok(inv, got)

    def _producer(self, pr) -> None:
        if pr["pending"] is not None:  # an info transaction decided late
            t, offsets = pr["pending"]
            commit = self.rnd.random() < 0.5
            self.decide(t, commit)
            if commit and offsets is not None:  # a late commit takes the offsets with it
                self.committed_offsets.update(offsets)
            pr["pending"] = None
            return
        tx = pr["txn"]
        if tx is None:
            t = len(self.state)
            self.state[t] = "open"
            self.open.add(t)
            sends = []
            for _ in range(self.rnd.randint(1, 4)):
                sends.append([self.rnd.choice(self.keys), self.next_value])
                self.next_value += 1
            rpw = bool(pr["owned"])
            inv = self.h.invoke(pr["p"], "txn", {"sends": sends, "poll": rpw})
            pr["txn"] = {"t": t, "inv": inv, "todo": list(sends), "done": [],
                         "polls": {}, "offsets": {}, "positions": None, "rpw": rpw}
            if rpw:  # poll first, from the group's committed offsets
                tx = pr["txn"]
                tx["positions"] = {k: self.committed_offsets.get(k, 0) for k in pr["owned"]}
                for k, pos in tx["positions"].items():
                    recs, nxt = self.read(k, pos, self.rnd.randint(0, 5))
                    if recs:
                        tx["polls"][k] = recs
                    tx["offsets"][k] = nxt
            return
        if tx["todo"]:
            key, v = tx["todo"].pop(0)
            tx["done"].append([key, v, self.append(key, v, tx["t"])])
            if pr.get("delayed") is not None:
                # a retried produce of the previous transaction, delayed, lands now:
                # without verification the leader takes it into this transaction
                k2, v2 = pr.pop("delayed")
                self.append(k2, v2, tx["t"])
            return
        commit = self.rnd.random() < 0.7
        if (self.bug == "marker-before-prepare-durable" and commit and len(self.first.get(
                tx["t"], ())) > 1 and self.rnd.random() < 0.5):
            # the markers went out before the decision was durable; the coordinator
            # failed over and its successor aborted the rest: the client learns nothing
            keys = sorted(self.first[tx["t"]])
            for i, key in enumerate(keys):
                self.torn[(tx["t"], key)] = "commit" if i == 0 else "abort"
            outcome_forced = "info"
        else:
            outcome_forced = None
        commit_time = self.h.now()
        outcome = ("ok" if commit else "fail") if self.rnd.random() < 0.8 else "info"
        outcome = outcome_forced or outcome
        late = outcome == "info" and not outcome_forced and self.rnd.random() < 0.5
        if not late:
            self.decide(tx["t"], commit)
            if commit and tx["rpw"]:
                self.committed_offsets.update(tx["offsets"])
        value = {"sends": [[k, v, o if outcome == "ok" or self.rnd.random() < 0.5 else None]
                           for k, v, o in tx["done"]]}
        if tx["rpw"]:
            value.update({"polls": tx["polls"], "offsets": tx["offsets"],
                          "group": self.group, "positions": tx["positions"]})
        if commit:
            value["commit_time"] = commit_time
        self.h.complete(tx["inv"], outcome, value)
        pr["txn"] = None
        if self.bug == "skip-txn-verification" and tx["done"] and self.rnd.random() < 0.3:
            k2, v2, _o = self.rnd.choice(tx["done"])
            pr["delayed"] = (k2, v2)
        if late:
            pr["pending"] = (tx["t"], tx["offsets"] if tx["rpw"] else None)

    def finish(self) -> None:
        """Decide every open transaction (the coordinator's timeout aborts abandoned ones)
        and stop: after this, final() is the whole committed log."""
        for pr in self.procs:
            if pr["kind"] != "producer":
                continue
            if pr["pending"] is not None:
                self.decide(pr["pending"][0], False)
                pr["pending"] = None
            if pr["txn"] is not None:
                self.decide(pr["txn"]["t"], False)
                pr["txn"] = None  # never completes: no completion in the history


#: Planted bugs of the simulated log (None: correct), named after the node flags of
#: issue 33 whose anomalies they reproduce.
BUGS = (None, "skip-txn-verification", "lso-ignores-open-txn", "marker-before-prepare-durable")


def run(seed: int, steps: int, **kw) -> TxnSim:
    s = TxnSim(seed, **kw)
    for _ in range(steps):
        s.step()
    s.finish()
    return s
