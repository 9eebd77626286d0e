"""Faults on a seeded schedule.

The schedule alternates quiet and faulty windows: after ``quiet`` seconds one fault of
the chosen kinds starts, lasts ``hold`` seconds, and is healed. Kinds and their targets:

- ``kill``: SIGKILL one node / the leader / a minority, restarted when the window ends
  (``partition-leader``, only when asked for with ``--targets``: a workload partition's
  leader, never the controller alone);

  The default mix is leader-aware: ``leader`` is a workload partition's current leader
  (asked afresh when the fault starts) three times in four and the controller
  otherwise, and every ``minority`` (also the minority side of ``majority-minority``)
  holds a current partition leader. Random ``one`` / ``isolate-one`` targets stay: a
  fault on a follower is a fault too. Faults on followers, or on the controller
  alone, move no partition leadership and so expose none of the planted replication
  bugs; ``raftlog-jepsen rates`` measures how often the default schedule catches each;
- ``pause``: SIGSTOP the same kinds of target for longer than the election timeout, then
  SIGCONT;
- ``partition``: isolate one node / the leader, split majority from minority, or (5 nodes)
  a majorities ring -- each node sees its two neighbours only, so every node is in a
  majority but no two majorities agree; one-way variants drop one direction only;
- ``corrupt`` (opt-in): on one node, flip one bit in, or truncate, a closed segment of a
  workload partition (the queue topic then rolls segments every 64 KiB). The node is
  killed, the file damaged, the node restarted: it must detect the damage and never
  serve it (a served bad record shows up as read-not-committed / inconsistent-offsets;
  a refused one that is not repaired from replicas, as final-read-incomplete).
- ``reassign`` (opt-in): move a workload partition's replicas while it is written
  (``move``: to another set of as many nodes -- with as many nodes as replicas, the
  same nodes in another order; ``shrink-grow``: drop one replica, and give it back,
  empty, when the window ends, so it catches up from the log start under load;
  ``cancel``: start a move and cancel it at once). acks=all writes go on; nothing
  acknowledged may be lost, and the final read checks the partition's replicas at
  the end, whichever nodes they are then.
- ``powerloss`` (opt-in; the cluster runs every node's log directory on its own
  lazyfs mount): SIGKILL one node / a minority / a majority / all of them at once,
  then crash their filesystems -- every write not fsynced, every directory entry
  whose directory was not fsynced, is gone -- and restart them when the window ends.
  With ``write.caching=false`` (the default, #34: acknowledged once every in-sync
  replica fsynced it) nothing acknowledged may be lost. With topics at
  ``write.caching=true`` (replication plus a periodic fsync) and without
  ``flush.messages=1``, a power loss of *every* node may lose acknowledged records
  that no node had fsynced yet: the documented loss, reported as ``lost-unsynced``
  (see checkers.explain_power_loss), never as ``lost``.

- ``diskfull`` (opt-in): fill the data disk of one node / a leader (every node's data
  dir is then a small tmpfs of its own, see jepsen/disks.py), and free it when the
  window ends. Produce to a full leader fails with KAFKA_STORAGE_ERROR (the sender
  records such a send as failed when no attempt of it was appended, else as
  indeterminate); a full follower falls out of the ISR and catches up afterwards;
  nothing acknowledged may be lost, and a send recorded as failed may never show up.
- ``clock`` (opt-in): jump one node's / a leader's wall clock by 1-10 minutes either
  way, or skew every node's by its own such offset; the window's end jumps them back
  (libfaketime, see jepsen/clock.py; only the wall clock moves, never the monotonic
  one). The workload topic then stamps LogAppendTime and keeps 30 minutes
  (retention.ms), so the leaders' clocks decide the timestamps and retention runs
  against them; the run checks ListOffsets by timestamp against the records.

Transaction coordinators (the ``txn`` workload's own targets, in its default mix and
nowhere else; issue 33): ``coordinator`` is the leader of the ``__transaction_state``
partition of one of the workload's transactional ids (asked afresh when the fault
starts) for ``kill``, ``pause`` and ``powerloss``; ``coordinator-followers`` are that
partition's other in-sync replicas (at most a minority) for ``pause``, and for
``partition`` the links between them and the coordinator (cut both ways; every other
link flows). Paused or cut off for longer than ``replica.lag.time.max.ms``, they take
the coordinator's partition below ``min.insync.replicas`` (5 nodes: its two followers),
so the coordinator's decisions (PrepareCommit/PrepareAbort) cannot become durable while
the cluster runs: its EndTxn waits or fails, and the producers retry, give up or are
fenced. (Measured 2026-11-28 with ``bug-marker-before-prepare-durable``: the producers'
commits waited these faults out, so no transaction was torn by them; the bug was caught
through its untracked early markers landing after the transaction had ended, rates.py.)

Every window is recorded in the history as process ``"nemesis"``: ``start`` (its value
says what was done to whom) and ``stop``.
"""

from __future__ import annotations

import random
import threading
import time

from raftlog.errors import did_you_mean

KINDS = ("kill", "pause", "partition", "corrupt", "reassign", "powerloss", "diskfull",
         "clock")
TARGETS = {
    "kill": ("one", "leader", "minority"),
    "pause": ("one", "leader", "minority"),
    "partition": ("isolate-one", "isolate-leader", "majority-minority", "ring", "one-way"),
    "corrupt": ("bitflip", "truncate"),
    "reassign": ("move", "shrink-grow", "cancel"),
    "powerloss": ("one", "minority", "majority", "all"),
    "diskfull": ("one", "leader"),
    "clock": ("one", "leader", "skew"),
}
#: Targets used only when asked for by name (``--targets``), so that the default
#: schedules of a seed stay what they were: ``partition-leader`` is always the leader of
#: a workload partition (``leader`` is sometimes the controller instead), as is the node
#: ``isolate-partition-leader`` cuts off.
EXTRA_TARGETS = {
    "kill": ("partition-leader",),
    "pause": ("partition-leader",),
    "partition": ("isolate-partition-leader",),
    "corrupt": (),
    "reassign": (),
    "powerloss": (),
    "diskfull": ("partition-leader",),
    "clock": ("partition-leader",),
}


#: A workload's own targets, in its default mix (they need what only it has: the txn
#: workload's transactional ids and their coordinators).
WORKLOAD_TARGETS = {
    "txn": {"kill": ("coordinator",), "pause": ("coordinator", "coordinator-followers"),
            "partition": ("coordinator-followers",), "powerloss": ("coordinator",)},
}


def targets_for(kinds: list[str], only: list[str] | None = None,
                workload: str | None = None) -> dict[str, tuple]:
    """The targets of each kind, restricted to ``only`` (every target of a kind when
    ``only`` is empty), ``workload``'s own included (WORKLOAD_TARGETS). ValueError when
    a kind keeps none or a name is unknown."""
    own = WORKLOAD_TARGETS.get(workload or "", {})
    known = {t for k in KINDS for t in TARGETS[k] + EXTRA_TARGETS[k]}
    others = {t for w in WORKLOAD_TARGETS.values() for ts in w.values() for t in ts}
    bad = sorted(set(only or ()) - known - {t for ts in own.values() for t in ts})
    if bad:
        elsewhere = sorted(set(bad) & others)
        if elsewhere:
            users = sorted(w for w, d in WORKLOAD_TARGETS.items()
                           if set(elsewhere) & {t for ts in d.values() for t in ts})
            raise ValueError(f"target(s) {elsewhere} need the {' or '.join(users)} workload "
                             f"(--workload {users[0]})")
        raise ValueError(f"unknown target(s) {bad}{did_you_mean(bad[0], known | others)}"
                         f"; known: {sorted(known | others)}")
    out = {}
    for k in kinds:
        pool = TARGETS[k] + own.get(k, ())
        if only:
            pool += EXTRA_TARGETS[k]
        ts = tuple(t for t in pool if not only or t in only)
        if not ts:
            raise ValueError(f"no target of nemesis {k!r} among {sorted(only or ())} "
                             f"(its targets: {', '.join(TARGETS[k] + own.get(k, ()))})")
        out[k] = ts
    return out


def schedule(seed: int, kinds: list[str], duration_s: float, quiet=(2.0, 4.0),
             hold=(3.0, 6.0), targets: list[str] | None = None,
             workload: str | None = None) -> list[dict]:
    """The list of faults: {"at": s, "hold": s, "kind": k, "target": t, "pick": float}.
    ``pick`` seeds the choice of nodes when the fault starts. ``targets`` restricts the
    targets (e.g. ``["leader", "isolate-leader"]``); ``workload``'s own join the mix."""
    allowed = targets_for(kinds, targets, workload)
    rnd = random.Random(seed)
    out, t = [], rnd.uniform(*quiet)
    while kinds and t < duration_s - 1.0:
        kind = rnd.choice(kinds)
        h = min(rnd.uniform(*hold), max(duration_s - t - 0.5, 0.5))
        out.append({"at": round(t, 3), "hold": round(h, 3), "kind": kind,
                    "target": rnd.choice(allowed[kind]), "pick": rnd.random()})
        t += h + rnd.uniform(*quiet)
    return out


class Nemesis:
    def __init__(self, cluster, history, events: list[dict], leader_of=None, log=print,
                 partition_leader_of=None, partitions: list[tuple[str, int]] = (),
                 leader_aware: bool = True, coordinator_of=None):
        """``leader_of()`` returns the id of a current leader (a partition leader or the
        controller) or None; ``partition_leader_of()`` that of a workload partition's
        leader; ``coordinator_of()`` (the txn workload) a transaction coordinator and
        the other in-sync replicas of its partition, ``(leader, [followers])``, or None;
        ``partitions`` are the workload's (topic, partition) pairs, which the
        ``reassign`` nemesis moves."""
        self.cluster = cluster
        self.history = history
        self.events = events
        self.leader_of = leader_of or (lambda: None)
        self.partition_leader_of = partition_leader_of or self.leader_of
        self.coordinator_of = coordinator_of or (lambda: None)
        self.log = log
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jepsen-nemesis", daemon=True)
        self.partitions = list(partitions)
        #: minorities hold a partition leader (False: any nodes, as before issue 22)
        self.leader_aware = leader_aware
        self.done: list[dict] = []
        self._undo = None
        #: the coordinator the last coordinator target aimed at (None: none was seen)
        self.coordinator_seen: int | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(60)

    def _sleep_until(self, t0: float, at: float) -> bool:
        while not self.stop_flag.is_set():
            left = t0 + at - time.monotonic()
            if left <= 0:
                return True
            self.stop_flag.wait(min(left, 0.2))
        return False

    def _run(self) -> None:
        t0 = time.monotonic()
        for ev in self.events:
            if not self._sleep_until(t0, ev["at"]):
                break
            self._fault(ev)
            self._sleep_until(t0, ev["at"] + ev["hold"])
            self._heal()
        if self._undo is not None:
            self._heal()

    # ------------------------------------------------------------------------ targets

    def _nodes(self, target: str, rnd: random.Random) -> list[int]:
        ids = [n.id for n in self.cluster.nodes]
        if target in ("coordinator", "coordinator-followers"):
            leader, followers = self._coordinator(ids, rnd)
            return [leader] if target == "coordinator" else followers
        if target in ("leader", "isolate-leader", "partition-leader"):
            ld = None
            try:
                ld = (self.partition_leader_of if target == "partition-leader"
                      else self.leader_of)()
            except Exception:
                pass
            return [ld] if ld in ids else [rnd.choice(ids)]
        if target == "minority":
            return self._minority(ids, rnd)
        if target == "majority":
            return sorted(rnd.sample(ids, len(ids) // 2 + 1))
        if target == "all":
            return sorted(ids)
        return [rnd.choice(ids)]

    def _coordinator(self, ids: list[int], rnd: random.Random) -> tuple[int, list[int]]:
        """A transaction coordinator and (at most a minority of) the other in-sync
        replicas of its partition; a random node and a random minority when none is
        known (never none: the fault still happens, to someone)."""
        got = None
        try:
            got = self.coordinator_of()
        except Exception:
            pass
        k = max((len(ids) - 1) // 2, 1)
        if got is None or got[0] not in ids:
            leader = rnd.choice(ids)
            self.coordinator_seen = None
            return leader, sorted(rnd.sample([i for i in ids if i != leader], k))
        leader, followers = got
        self.coordinator_seen = leader
        fs = sorted(f for f in followers if f in ids and f != leader)
        if len(fs) > k:
            fs = sorted(rnd.sample(fs, k))
        return leader, fs or sorted(rnd.sample([i for i in ids if i != leader], k))

    def _minority(self, ids: list[int], rnd: random.Random) -> list[int]:
        """(n-1)//2 nodes, one of them a current leader of a workload partition when
        one is known (leader-aware: a minority without it changes no leadership)."""
        k = (len(ids) - 1) // 2
        if not self.leader_aware:
            return sorted(rnd.sample(ids, k))
        ld = None
        try:
            ld = self.partition_leader_of()
        except Exception:
            pass
        first = [ld] if ld in ids and k > 0 else []
        rest = [i for i in ids if i not in first]
        return sorted(first + rnd.sample(rest, k - len(first)))

    def _fault(self, ev: dict) -> None:
        rnd = random.Random(ev["pick"])
        kind, target = ev["kind"], ev["target"]
        extra: dict = {}
        op = self.history.invoke("nemesis", "start", {"kind": kind, "target": target})
        try:
            if kind == "kill":
                victims = self._nodes(target, rnd)
                for i in victims:
                    self.cluster.node(i).kill()
                desc = f"kill {victims}"

                def undo(victims=victims):
                    for i in victims:
                        self.cluster.node(i).start()
                    for i in victims:
                        self.cluster.node(i).wait_listening(30)
            elif kind == "pause":
                victims = self._nodes(target, rnd)
                for i in victims:
                    self.cluster.node(i).pause()
                desc = f"pause {victims}"

                def undo(victims=victims):
                    for i in victims:
                        self.cluster.node(i).resume()
            elif kind == "partition":
                net = self.cluster.net
                if net is None:
                    raise RuntimeError(f"no network control: {self.cluster.net_error}")
                ids = [n.id for n in self.cluster.nodes]
                if target == "coordinator-followers":
                    c, fs = self._coordinator(ids, rnd)
                    for f in fs:
                        net.block(c, f)
                        net.block(f, c)
                    desc = f"cut coordinator {c} from {fs}"
                elif target in ("isolate-one", "isolate-leader", "isolate-partition-leader"):
                    (v,) = self._nodes({"isolate-leader": "leader",
                                        "isolate-partition-leader": "partition-leader"}
                                       .get(target, "one"), rnd)
                    groups = [[v], [i for i in ids if i != v]]
                    net.partition(groups)
                    desc = f"partition {groups}"
                elif target == "majority-minority":
                    minority = self._minority(ids, rnd)
                    groups = [minority, [i for i in ids if i not in minority]]
                    net.partition(groups)
                    desc = f"partition {groups}"
                elif target == "ring" and len(ids) >= 5:
                    order = ids[:]
                    rnd.shuffle(order)
                    n = len(order)
                    for j, a in enumerate(order):
                        near = {order[(j - 1) % n], order[(j + 1) % n], a}
                        for b in ids:
                            if b not in near:
                                net.block(a, b)
                    desc = f"ring {order}"
                else:  # one-way (also "ring" with fewer than 5 nodes)
                    a, b = rnd.sample(ids, 2)
                    net.block(a, b)
                    desc = f"drop {a}->{b}"

                def undo():
                    self.cluster.net.heal()
            elif kind == "corrupt":
                desc = self._corrupt(target, rnd)

                def undo():
                    pass
            elif kind == "reassign":
                desc, undo = self._reassign(target, rnd)
            elif kind == "powerloss":
                victims = self._nodes(target, rnd)
                for i in victims:  # every victim dies before any filesystem crashes
                    self.cluster.node(i).kill()
                dropped = {i: self.cluster.node(i).mount.crash() for i in victims}
                desc = (f"powerloss {victims}: dropped "
                        + ", ".join(f"{i}: {d['bytes_dropped']} B, {d['dirs_reverted']} dirs"
                                    for i, d in dropped.items()))
                extra = {"power_loss": {
                    "nodes": victims,
                    "all": sorted(victims) == sorted(n.id for n in self.cluster.nodes),
                    "dropped": {str(i): d for i, d in dropped.items()}}}

                def undo(victims=victims):
                    for i in victims:
                        self.cluster.node(i).start()
                    for i in victims:
                        self.cluster.node(i).wait_listening(30)
            elif kind == "diskfull":
                desc, undo = self._diskfull(target, rnd)
            elif kind == "clock":
                desc, undo = self._clock(target, rnd)
            else:
                raise ValueError(f"unknown nemesis {kind!r}")
        except Exception as e:
            self.history.info(op, {"kind": kind, "target": target, "error": repr(e)})
            self.log(f"nemesis: {kind} {target} failed: {e!r}")
            self._undo = None
            return
        if target.startswith("coordinator"):  # (whom it aimed at: a coordinator seen, or not)
            if self.coordinator_seen is None:
                desc += " (no coordinator seen: random)"
            elif not desc.startswith("cut coordinator"):
                desc += f" (coordinator {self.coordinator_seen})"
        self._undo = undo
        self.history.ok(op, desc, **extra)
        self.done.append({"kind": kind, "target": target, "what": desc})
        self.log(f"nemesis: {desc}")

    def _corrupt(self, how: str, rnd: random.Random) -> str:
        import glob
        import os

        node = self.cluster.node(rnd.choice([n.id for n in self.cluster.nodes]))
        closed = []
        for d in sorted(glob.glob(os.path.join(node.log_dir, "jepsen-queue-*"))):
            segs = sorted(glob.glob(os.path.join(d, "*.log")))
            closed += segs[:-1]  # the last segment is the active one
        if not closed:
            raise RuntimeError(f"node {node.id} has no closed segment yet")
        path = rnd.choice(closed)
        node.kill()
        size = os.path.getsize(path)
        if how == "truncate":
            cut = rnd.randrange(size // 2, size)
            os.truncate(path, cut)
            what = f"truncated to {cut} of {size} bytes"
        else:
            pos = rnd.randrange(min(size - 1, 64), size)
            with open(path, "r+b") as f:
                f.seek(pos)
                b = f.read(1)[0]
                f.seek(pos)
                f.write(bytes([b ^ (1 << rnd.randrange(8))]))
            what = f"bit flipped at byte {pos} of {size}"
        node.start()
        node.wait_listening(30)
        return f"corrupt node {node.id} {os.path.relpath(path, node.log_dir)}: {what}"

    def _diskfull(self, target: str, rnd: random.Random):
        """Fill the data disk of one node (jepsen/disks.py); (description, undo)."""
        disks = self.cluster.disks
        if disks is None:
            raise RuntimeError("the cluster has no small data disks (Cluster(disk_mb=...))")
        (victim,) = self._nodes(target, rnd)
        node = self.cluster.node(victim)
        what = disks.fill(node)

        def undo():
            disks.free(node)

        return f"diskfull node {victim} ({disks.kind}): {what}", undo

    def _clock(self, target: str, rnd: random.Random):
        """Jump one node's wall clock (``one``, ``leader``) or skew every node's
        (``skew``: each its own offset) by minutes; undo: back to the real time (a
        jump too)."""
        from .clock import random_offset

        clocks = self.cluster.clocks
        if clocks is None:
            raise RuntimeError(f"no clock control: {self.cluster.clock_error or 'not asked'}")
        ids = [n.id for n in self.cluster.nodes]
        victims = ids if target == "skew" else self._nodes(target, rnd)
        moved = {i: random_offset(rnd) for i in victims}
        for i, off in moved.items():
            clocks.set(i, off)

        def undo():
            clocks.reset()

        return "clock " + ", ".join(f"node {i} {off:+d} s" for i, off in moved.items()), undo

    def _reassign(self, how: str, rnd: random.Random):
        """Start one reassignment of a workload partition; (description, undo)."""
        from raftlog.client import Admin

        if not self.partitions:
            raise RuntimeError("the workload has no partitions to move")
        ids = [n.id for n in self.cluster.nodes]
        with Admin(self.cluster.bootstrap, request_timeout_ms=5000,
                       **self.cluster.client_options) as admin:
            moving = {(r.topic, r.partition) for r in admin.list_partition_reassignments()}
            idle = [tp for tp in self.partitions if tp not in moving]
            if not idle:
                raise RuntimeError("every workload partition is being moved already")
            tp = rnd.choice(sorted(idle))
            current = list(next(p.replicas for p in admin.describe_topic(tp[0]).partitions
                                if p.partition == tp[1]))
            if how == "shrink-grow" and len(current) > 1:
                drop = rnd.choice(current)
                target = [b for b in current if b != drop]
            else:
                others = [b for b in ids if b not in current]
                if how == "cancel" and not others:
                    raise RuntimeError(f"{tp[0]}-{tp[1]} is on every node: no move to cancel")
                target = current[:]
                if others:  # swap one replica for a node that has none
                    target[rnd.randrange(len(target))] = rnd.choice(others)
                else:  # as many nodes as replicas: the same ones, another leader first
                    target = current[1:] + current[:1]
            # a move to be cancelled is throttled to 1 KiB/s, so that it is still under
            # way when the cancel arrives (at 64 KiB/s a young log was copied whole
            # before it: nothing was left to cancel)
            _start(admin, {tp: target}, CANCEL_THROTTLE if how == "cancel" else 0)
            desc = f"reassign {tp[0]}-{tp[1]} {current} -> {target}"
            if how == "cancel":
                r = admin.alter_partition_reassignments({tp: None})[0]
                desc += " cancelled" if r.error == 0 else f" (cancel: {r.message})"

        def undo():
            if how != "shrink-grow" or len(current) <= 1:
                return
            deadline = time.monotonic() + 30
            while True:  # the shrink may still be completing (the leader may be away)
                try:
                    with Admin(self.cluster.bootstrap, request_timeout_ms=5000,
                       **self.cluster.client_options) as admin:
                        _start(admin, {tp: current})
                    self.log(f"nemesis: reassign {tp[0]}-{tp[1]} back to {current}")
                    return
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        return desc, undo

    def _heal(self) -> None:
        undo, self._undo = self._undo, None
        if undo is None:
            return
        op = self.history.invoke("nemesis", "stop", None)
        try:
            undo()
            self.history.ok(op, "healed")
        except Exception as e:
            self.history.info(op, repr(e))
        self.log("nemesis: healed")


#: Bytes/s a move that the ``cancel`` fault cancels may copy: a log of a few seconds of
#: the workload's writes takes minutes at this rate.
CANCEL_THROTTLE = 1024


def _start(admin, moves: dict, throttle: int = 0) -> None:
    """Start ``moves`` (Admin.alter_partition_reassignments); RuntimeError naming the
    broker's error when one is refused."""
    for r in admin.alter_partition_reassignments(moves, throttle):
        if r.error != 0:
            raise RuntimeError(f"reassignment of {r.topic}-{r.partition} refused: "
                               f"{r.message}")
