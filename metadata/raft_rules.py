"""Raft's rules where pysyncobj 0.3.17 bends them, patched into ``SyncObj`` by
:func:`apply` (called from ``quorum.harden_pysyncobj``; this module and quorum.py are
the only ones that touch pysyncobj). pysyncobj's private state is reached through its
name-mangled attributes (``_SyncObj__raftLog`` ...), read and written on its own tick
thread only -- every function here runs inside pysyncobj's message or tick handler.

1. **The log rule (§5.3, Figure 2 rule 3).** pysyncobj's AppendEntries handler deletes
   every local entry after ``prevLogIdx`` whenever the follower holds more, without a
   conflict, and so logs ``truncating already-applied log entries`` after a re-sent,
   reordered or stale message. Before pysyncobj sees an AppendEntries, we skip the
   entries the follower already holds (same index and term): the message it handles
   starts at the first entry that conflicts or is new, so it truncates exactly from
   the first conflict. A message with nothing new never shortens the log: it is
   handed on as a bare heartbeat at the follower's own last entry, its commit index
   capped at what the message verified, and the acknowledgement names only the
   verified entries (so the leader's match index never covers unverified ones).
2. **nextIndex never below matchIndex.** The leader answers a ``reset`` by moving
   ``nextIndex`` back; a late reset arriving after it had advanced moved it below what
   the follower has acknowledged. It is clamped to ``matchIndex + 1``.
3. **Pre-vote and leader stickiness (thesis §9.6, KIP-996).** A node whose election
   timer runs out first asks the others whether they would vote for it at the next
   term (``rl_pre_vote``; no term changes anywhere) and starts a real election only
   with a majority of yeses. A node that heard from a live leader within the minimum
   election timeout -- or is a leader a majority answered within it -- says no to
   pre-votes and ignores RequestVote: a rejoining partitioned node cannot depose a
   healthy leader, and (its term never rose while it was cut off) rejoins quietly.
   The leader's own check-quorum is pysyncobj's ``leaderFallbackTimeout``.
4. **Ticks when there is something to do.** pysyncobj's tick thread polls its sockets
   for ``autoTickPeriod`` and then runs its timers, so an idle voter woke up every
   period to find nothing due. A tick now waits until the next timer of its role is
   due -- the leader's next heartbeat, a follower's election deadline -- capped at
   :data:`MAX_TICK_WAIT_S` (pysyncobj's reconnects and other housekeeping run on
   ticks); a message or a proposal (pysyncobj's pipe notifier) still ends the wait at
   once.
5. **A single voter decides alone, at once.** With no other voter there is nobody to
   hear from: its tick thread starts ticking at once (pysyncobj first sleeps 0.1 s,
   for connections that a lone voter does not have), a follower's election deadline is
   moved to now (it elects itself on its first tick instead of after 0.2-0.4 s), and a
   leader with a proposal queued or an
   entry not yet committed does not wait for its next heartbeat to commit it (its
   commit needs no acknowledgement; pysyncobj would commit it on the next tick, up to
   a heartbeat period later: ~60 ms per metadata write).
6. **A learner is no voter and no leader.** pysyncobj handles every message alike
   whoever sends it: a read-only peer (a learner, connected as ``readonly``) that sent
   an AppendEntries was taken for the leader and its entries were appended and
   applied; its RequestVote raised the voters' term. A voter now takes from a
   read-only peer only what a learner sends -- a forwarded write (``apply_command``)
   and its acknowledgements (``next_node_idx``) -- and a learner takes only what a
   leader sends a learner (AppendEntries, the answer to a forwarded write): never a
   write to apply as if it led, a vote request or a leadership transfer. Anything
   that is not a message dict is dropped too.
7. **A diverged follower is repaired in one round per term, not one per entry.**
   When an AppendEntries' ``prevLogIdx`` holds another term here, pysyncobj answers
   with a reset to ``prevLogIdx`` and the leader retries one entry earlier at its next
   heartbeat (60 ms): a voter that led alone for a while (a stale controller under
   load or clock jumps appends every proposal it gets) held hundreds of entries the
   others never had and took tens of seconds to rejoin -- longer than a restarted
   node's 60 s registration timeout. The reset now goes back to the first entry of our
   run of that term (the fast backup of Raft's section 5.3), never below our commit
   index + 1: committed entries are the leader's too, and the leader's own check of
   ``prevLogIdx`` at the next message still decides what matches.
8. **A pre-vote learns the highest term.** Pre-votes change no term anywhere, so terms
   never spread while no election is held: after clock jumps and load, a restarted
   cluster had its most up-to-date voter at a lower term than the others (who had run
   elections they lost). Its pre-votes asked for a term the others had passed (refused
   on the term), theirs came from staler logs (refused on the log), and no controller
   was elected -- every node gave up registering after 60 s. A refusal now carries the
   voter's current term; the next pre-vote asks for one past the highest seen, and
   when it wins, the node takes that term before its election (taking a higher term is
   always safe in Raft) so the election's term is past every voter's.
9. **A term above the leader's reaches the leader.** Stickiness (rule 3) keeps voters
   that hear a live leader from taking a higher term from a RequestVote, and pysyncobj
   ignores an AppendEntries from a lower term without answering -- so a voter whose
   pre-vote was granted in the instant before another voter won the election (a
   just-elected leader had not heard from a majority yet, a follower had not heard
   from its new leader yet) ran its election at a term past the leader's, was refused
   by the now-sticky others, and stayed a candidate for good, ignoring the leader's
   AppendEntries (seen in a CI run: 4 minutes, until the test gave up; the controller
   fenced the node and its partitions went under-replicated). Such a voter now answers
   a lower-term AppendEntries with its term (``rl_term``, as etcd answers with its
   term when check-quorum and pre-vote are on); a leader that gets a higher term steps
   down to follower at that term (taking a higher term is always safe), and the next
   election -- after one election timeout -- includes every voter. A leader also never
   grants a pre-vote: while it leads, no election is needed, and its check-quorum
   (``leaderFallbackTimeout``) ends its leadership if it lost its majority.
"""

from __future__ import annotations

import logging
import math
import time

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.transport import TransportNotReadyError

PRE_VOTE = "rl_pre_vote"
PRE_VOTE_RESPONSE = "rl_pre_vote_response"
#: A voter's answer to an AppendEntries from a lower term: its own term (rule 9).
TERM_NOTICE = "rl_term"
#: What a voter takes from a read-only peer (rule 6).
FROM_LEARNER = frozenset({"apply_command", "next_node_idx"})
#: What a learner takes (from the voters it dials: nobody else can reach it).
TO_LEARNER = frozenset({"append_entries", "apply_command_response"})

logger = logging.getLogger("pysyncobj.syncobj")  # (its lines, as pysyncobj logs them)
ORIGINALS: dict = {}
#: Longest a tick waits with nothing due (reconnects, log compaction checks).
MAX_TICK_WAIT_S = 0.1
#: How often the leader sends an empty AppendEntries to learners (broker-only nodes)
#: that have every entry and the current commit index: they hold no elections, so
#: only news is urgent -- and news (an entry, a commit) goes out on the next round.
LEARNER_HEARTBEAT_S = 0.5
_LEADER, _FOLLOWER, _CANDIDATE = _RAFT_STATE.LEADER, _RAFT_STATE.FOLLOWER, _RAFT_STATE.CANDIDATE


def _get(obj, name: str):
    return getattr(obj, "_SyncObj__" + name)


def _put(obj, name: str, value) -> None:
    setattr(obj, "_SyncObj__" + name, value)


def _term_at(obj, idx: int):
    entries = _get(obj, "getEntries")(idx, 1)
    return entries[0][2] if entries else None


# --------------------------------------------------------------------------- messages


def on_message(self, node, message) -> None:
    kind = message.get("type") if isinstance(message, dict) else None
    if not _allowed(self, node, kind):
        _dropped(node, kind)
        return
    if kind == "append_entries":
        if _from_lower_term(self, node, message):
            return
        if message.get("term", -1) >= _get(self, "raftCurrentTerm"):
            self._rl_leader_contact_node = node  # (its time: _held_entries_skipped)
        message = _held_entries_skipped(self, message)
    elif kind == "request_vote":
        if message.get("term", 0) > _get(self, "raftCurrentTerm") and _sticky(self):
            return  # a live leader: neither grant nor take the term
    elif kind == PRE_VOTE:
        _answer_pre_vote(self, node, message)
        return
    elif kind == PRE_VOTE_RESPONSE:
        _count_pre_vote(self, node, message)
        return
    elif kind == TERM_NOTICE:
        _take_higher_term(self, message)
        return
    try:
        ORIGINALS["on_message"](self, node, message)
    finally:
        self._rl_ack_next = None
        self._rl_reset_next = None
    if kind == "next_node_idx" and _get(self, "raftState") == _LEADER:
        _clamp_next_index(self, node)


def _allowed(self, node, kind) -> bool:
    """May ``node`` send this kind of message here (rule 6)?"""
    if not isinstance(kind, str):
        return False
    if _get(self, "selfNode") is None:
        return kind in TO_LEARNER
    if node not in _get(self, "otherNodes"):  # a read-only peer
        return kind in FROM_LEARNER
    return True


_drops = {"count": 0}


def _dropped(node, kind) -> None:
    _drops["count"] += 1
    if _drops["count"] & (_drops["count"] - 1) == 0:  # 1st, 2nd, 4th, 8th ...: bounded log
        logger.warning("raftlog: dropped a %r message from %s that its role may not send "
                       "(%d so far)", kind if isinstance(kind, str) else type(kind).__name__,
                       getattr(node, "id", node), _drops["count"])


def _held_entries_skipped(self, message: dict) -> dict:
    """The AppendEntries pysyncobj should handle (rule 1 of the module docstring)."""
    if (message.get("term", -1) < _get(self, "raftCurrentTerm")
            or "prevLogIdx" not in message or message.get("transmission") is not None):
        return message
    self._rl_leader_contact = monotonic()
    prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
    if _term_at(self, prev_idx) != prev_term:
        # pysyncobj answers with a reset (nothing is truncated on that path), to
        # prevLogIdx: one entry back per round; back past the whole term (rule 7)
        self._rl_reset_next = _conflict_start(self, prev_idx)
        return message
    entries = message.get("entries") or []
    held = 0
    for entry in entries:
        if _term_at(self, entry[1]) != entry[2]:
            break
        held += 1
    verified = prev_idx + held  # the follower's log matches the leader's up to here
    if held < len(entries):  # truncate (if at all) from the first conflict, append the rest
        if not held:
            return message
        return dict(message, prevLogIdx=verified, prevLogTerm=entries[held - 1][2],
                    entries=entries[held:])
    last = _get(self, "getCurrentLogIndex")()
    if last == verified:
        return dict(message, prevLogIdx=verified, prevLogTerm=_term_at(self, verified),
                    entries=[])
    # Nothing new, and the log holds more than the message verifies (re-sent, reordered
    # or stale): keep it all; commit and acknowledge only what was verified.
    self._rl_ack_next = verified + 1
    return dict(message, prevLogIdx=last, prevLogTerm=_term_at(self, last), entries=[],
                commit_index=min(message.get("commit_index", 0), verified))


def _from_lower_term(self, node, message: dict) -> bool:
    """An AppendEntries from a leader at a term below ours (rule 9): tell it our term
    (a voter's answer; a learner's term is the leader's) and drop the message, as
    pysyncobj would have."""
    term = message.get("term")
    current = _get(self, "raftCurrentTerm")
    if not isinstance(term, int) or term >= current:
        return False
    if _get(self, "selfNode") is not None and node in _get(self, "otherNodes"):
        _get(self, "transport").send(node, {"type": TERM_NOTICE, "term": current})
    return True


def _take_higher_term(self, message: dict) -> None:
    """A voter told us of a term past ours (rule 9): take it as a follower; a leader
    steps down (Raft's rule for any message with a higher term)."""
    term = message.get("term")
    if not isinstance(term, int) or term <= _get(self, "raftCurrentTerm"):
        return
    was_leader = _get(self, "raftState") == _LEADER
    _get(self, "setCurrentTerm")(term, None)
    _get(self, "setState")(_FOLLOWER)
    _put(self, "raftLeader", None)
    _put(self, "raftElectionDeadline", monotonic() + _get(self, "generateRaftTimeout")())
    if was_leader:
        _get(self, "onLeaderChanged")()
        logger.warning("raftlog: stepped down as leader: a voter is at term %d", term)


def _conflict_start(self, idx: int) -> int | None:
    """Where the leader should resume after our entry ``idx`` conflicted with its
    term there (rule 7): the first entry of our run of that term -- none of that run
    is the leader's -- but never at or below our commit index (committed entries are
    the leader's). Terms never decrease along a log, so a binary search finds it.
    None when we hold no entry ``idx`` (pysyncobj then answers with our log's end)."""
    term = _term_at(self, idx)
    if term is None:
        return None
    lo = max(_get(self, "raftCommitIndex") + 1, _get(self, "raftLog")[0][1] + 1)
    if lo > idx:
        return None
    hi = idx  # the first index in [lo, idx] whose term is ``term``
    while lo < hi:
        mid = (lo + hi) // 2
        t = _term_at(self, mid)
        if t is not None and t >= term:
            hi = mid
        else:
            lo = mid + 1
    return lo


def send_next_node_idx(self, node, reset=False, nextNodeIdx=None, success=False):  # noqa: N803
    ack = getattr(self, "_rl_ack_next", None)
    if ack is not None and success:
        nextNodeIdx = ack
    back = getattr(self, "_rl_reset_next", None)
    if back is not None and reset and not success and nextNodeIdx is not None:
        nextNodeIdx = min(nextNodeIdx, back)
    return ORIGINALS["send_next_node_idx"](self, node, reset=reset, nextNodeIdx=nextNodeIdx,
                                           success=success)


def _clamp_next_index(self, node) -> None:
    next_index, match_index = _get(self, "raftNextIndex"), _get(self, "raftMatchIndex")
    if node in next_index and next_index[node] <= match_index.get(node, 0):
        next_index[node] = match_index[node] + 1


# --------------------------------------------------------------------------- elections


def _sticky(self) -> bool:
    """Has this node heard from a live leader within the minimum election timeout (or,
    as leader, from a majority)? Then it starts, grants and joins no election."""
    now, window = monotonic(), _get(self, "conf").raftMinTimeout
    if _get(self, "raftState") == _LEADER:
        others = _get(self, "otherNodes")
        heard = sum(1 for t in _get(self, "lastResponseTime").values() if now - t < window)
        return heard + 1 > (len(others) + 1) / 2
    return (_get(self, "raftLeader") is not None
            and now - getattr(self, "_rl_leader_contact", -math.inf) < window)


def _log_up_to_date(self, message: dict) -> bool:
    my_term = _get(self, "getCurrentLogTerm")()
    if message["last_log_term"] != my_term:
        return message["last_log_term"] > my_term
    return message["last_log_index"] >= _get(self, "getCurrentLogIndex")()


def _answer_pre_vote(self, node, message: dict) -> None:
    current = _get(self, "raftCurrentTerm")
    granted = (message.get("term", 0) > current
               and _get(self, "raftState") != _LEADER  # (rule 9)
               and not _sticky(self) and _log_up_to_date(self, message))
    _get(self, "transport").send(node, {"type": PRE_VOTE_RESPONSE, "term": message.get("term"),
                                        "granted": granted, "current_term": current})


def _count_pre_vote(self, node, message: dict) -> None:
    round_ = getattr(self, "_rl_pre_vote", None)
    if (round_ is None or message.get("term") != round_["term"]
            or _get(self, "raftState") == _LEADER
            or _get(self, "raftCurrentTerm") != round_["current"]):
        return
    if not message.get("granted"):
        seen = message.get("current_term")
        if isinstance(seen, int) and seen >= round_["term"]:  # (rule 8)
            self._rl_seen_term = max(getattr(self, "_rl_seen_term", 0), seen)
        return
    round_["grants"].add(node.id)
    if len(round_["grants"]) > (len(_get(self, "otherNodes")) + 1) / 2:
        self._rl_pre_vote = None
        self._rl_pre_vote_won = True
        if round_["term"] - 1 > round_["current"]:  # asked past a higher term seen:
            _get(self, "setCurrentTerm")(round_["term"] - 1, None)  # the election's is next
        _put(self, "raftElectionDeadline", 0)  # the next tick starts the election


def on_tick(self, timeToWait=0.0):  # noqa: N803
    if (_get(self, "raftState") in (_FOLLOWER, _CANDIDATE)
            and _get(self, "selfNode") is not None
            and _get(self, "otherNodes")
            and not _get(self, "transferInProgress")
            and _get(self, "raftElectionDeadline") < monotonic()
            and _get(self, "connectedToAnyone")()):
        if getattr(self, "_rl_pre_vote_won", False):
            self._rl_pre_vote_won = False  # this tick's election was won in a pre-vote
        else:
            _start_pre_vote(self)  # instead of an election: moves the deadline on
    return ORIGINALS["on_tick"](self, _tick_wait(self, timeToWait))


def _tick_wait(self, period: float) -> float:
    """How long this tick may wait for messages: until the role's next timer is due
    (never below ``period``/4, never above MAX_TICK_WAIT_S); no wait at all for a
    single voter with work to do (rule 5); a learner has no timer of its own (it holds
    no elections; messages wake its poller), so MAX_TICK_WAIT_S."""
    if _get(self, "selfNode") is None:
        return MAX_TICK_WAIT_S
    if not _get(self, "otherNodes"):
        state = _get(self, "raftState")
        if state != _LEADER:
            _put(self, "raftElectionDeadline", 0)  # nobody else could win: elect now
            return 0.0
        if (_get(self, "raftCommitIndex") < _get(self, "getCurrentLogIndex")()
                or _get(self, "commandsQueue")._FastQueue__queue):
            return 0.0
    due = (_get(self, "newAppendEntriesTime") if _get(self, "raftState") == _LEADER
           else _get(self, "raftElectionDeadline")) - monotonic()
    return min(max(due, period / 4), MAX_TICK_WAIT_S)


def auto_tick_thread(self) -> None:
    """pysyncobj's tick thread (``self`` is a weak proxy), without its 0.1 s sleep
    before the first tick for a lone voter (rule 5); anyone else runs the original."""
    if _get(self, "selfNode") is None or _get(self, "otherNodes"):
        return ORIGINALS["auto_tick_thread"](self)
    try:
        _get(self, "transport").tryGetReady()
    except TransportNotReadyError:
        logger.exception("failed to perform initialization")
        return
    finally:
        _get(self, "initialised").set()
    try:
        while _get(self, "mainThread").is_alive():
            if _get(self, "destroying"):
                self._doDestroy()
                break
            period = _get(self, "conf").autoTickPeriod
            try:
                self._onTick(period)
            except Exception:  # as pysyncobj's loop: log, wait a little, go on
                logger.exception("failed _onTick in _autoTickThread")
                time.sleep(period)
    except ReferenceError:  # the SyncObj is gone
        pass


def _start_pre_vote(self) -> None:
    current = _get(self, "raftCurrentTerm")
    term = max(current, getattr(self, "_rl_seen_term", 0)) + 1
    self._rl_pre_vote = {"term": term, "current": current,
                         "grants": {_get(self, "selfNode").id}}
    _put(self, "raftElectionDeadline", monotonic() + _get(self, "generateRaftTimeout")())
    ask = {"type": PRE_VOTE, "term": term,
           "last_log_index": _get(self, "getCurrentLogIndex")(),
           "last_log_term": _get(self, "getCurrentLogTerm")()}
    transport = _get(self, "transport")
    for node in _get(self, "otherNodes"):
        transport.send(node, ask)


def send_append_entries(self) -> None:
    """The leader's AppendEntries round, to learners only when they have news or
    LEARNER_HEARTBEAT_S passed: with 6 broker-only nodes the controller's heartbeat
    rounds (every 60 ms, for the voters' 0.2-0.4 s election timeout) were 8 sends
    each, which held its GIL in bursts and cost it 3% of a core idle."""
    learners = _get(self, "readonlyNodes")
    if learners:
        now = time.monotonic()
        commit = _get(self, "raftCommitIndex")
        last_index = _get(self, "getCurrentLogIndex")()
        next_index = _get(self, "raftNextIndex")
        beat = self.__dict__.setdefault("_raftlog_learner_beat", [float("-inf"), None])
        current = beat[1] == commit and all(next_index.get(n, 0) > last_index for n in learners)
        if current and now - beat[0] < LEARNER_HEARTBEAT_S:
            _put(self, "readonlyNodes", set())  # (the round iterates voters | learners)
            try:
                return ORIGINALS["send_append_entries"](self)
            finally:
                _put(self, "readonlyNodes", learners)
        beat[0], beat[1] = now, commit
    return ORIGINALS["send_append_entries"](self)


def apply() -> None:
    """Patch SyncObj (once; the caller holds the patch lock)."""
    if ORIGINALS:
        return
    ORIGINALS["on_message"] = SyncObj._SyncObj__onMessageReceived
    ORIGINALS["send_next_node_idx"] = SyncObj._SyncObj__sendNextNodeIdx
    ORIGINALS["on_tick"] = SyncObj._onTick
    ORIGINALS["auto_tick_thread"] = SyncObj._autoTickThread
    ORIGINALS["send_append_entries"] = SyncObj._SyncObj__sendAppendEntries
    SyncObj._SyncObj__sendAppendEntries = send_append_entries
    SyncObj._SyncObj__onMessageReceived = on_message
    SyncObj._SyncObj__sendNextNodeIdx = send_next_node_idx
    SyncObj._onTick = on_tick
    SyncObj._autoTickThread = auto_tick_thread
