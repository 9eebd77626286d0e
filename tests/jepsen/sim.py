"""A simulated correct queue system that records Jepsen histories (no sockets)."""

from __future__ import annotations

import random

from raftlog.jepsen.history import History


class Sim:
    """Keys are partitions; sends append at some point between invoke and completion."""

    def __init__(self, keys=("t-0", "t-1")):
        self.h = History()
        self.log = {k: [] for k in keys}
        self.next_value = 0
        self.pending: dict = {}  # process -> (invoke, state)
        self.positions: dict = {}  # consumer process -> {key: next offset}

    def final(self) -> dict:
        return {k: [list(r) for r in recs] for k, recs in self.log.items()}

    # senders -------------------------------------------------------------
    def send_invoke(self, p, key):
        v = self.next_value
        self.next_value += 1
        self.pending[p] = [self.h.invoke(p, "send", [key, v]), None]

    def send_apply(self, p):
        slot = self.pending.get(p)
        if slot and slot[1] is None:
            key, v = slot[0]["value"]
            slot[1] = len(self.log[key])
            self.log[key].append((slot[1], v))

    def send_complete(self, p, outcome):
        slot = self.pending.pop(p, None)
        if slot is None:
            return
        inv, offset = slot
        if outcome == "ok":
            if offset is None:
                self.pending[p] = slot
                self.send_apply(p)
                slot = self.pending.pop(p)
                offset = slot[1]
            self.h.ok(inv, offset=offset)
        elif outcome == "fail" and offset is None:
            self.h.fail(inv, error="definite")
        else:
            self.h.info(inv, error="timeout")

    # consumers -----------------------------------------------------------
    def assign(self, p, keys, start=None):
        inv = self.h.invoke(p, "assign", None)
        pos = {k: (start or {}).get(k, 0) for k in keys}
        self.positions[p] = dict(pos)
        self.h.ok(inv, {"keys": list(keys), "positions": pos})

    def poll(self, p, n=3):
        inv = self.h.invoke(p, "poll", None)
        out = {}
        for k, pos in self.positions[p].items():
            recs = self.log[k][pos:pos + n]
            if recs:
                out[k] = [list(r) for r in recs]
                self.positions[p][k] = recs[-1][0] + 1
        self.h.ok(inv, out)


def random_history(seed: int, steps: int = 200, keys=("t-0", "t-1")) -> Sim:
    rnd = random.Random(seed)
    s = Sim(keys)
    senders = [0, 1, 2]
    consumers = [10, 11]
    for c in consumers:
        s.assign(c, list(keys))
    for _ in range(steps):
        r = rnd.random()
        p = rnd.choice(senders)
        if r < 0.4:
            if p not in s.pending:
                s.send_invoke(p, rnd.choice(keys))
        elif r < 0.6:
            s.send_apply(p)
        elif r < 0.85:
            s.send_complete(p, rnd.choice(["ok", "ok", "ok", "fail", "info"]))
        elif r < 0.98:
            s.poll(rnd.choice(consumers), rnd.randint(1, 4))
        else:
            c = rnd.choice(consumers)
            s.assign(c, list(keys), {k: rnd.randint(0, len(s.log[k])) for k in keys})
    return s
