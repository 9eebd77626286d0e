"""Raft's rules patched into pysyncobj (metadata/raft_rules.py), driven in one process:
messages are handed to a node's handler directly and its sends are recorded, so no
sleep or socket decides an outcome."""

from __future__ import annotations

import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.transport import Transport

from raftlog.metadata import quorum, raft_rules

ME, LEADER, OTHER = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"


class RecordingTransport(Transport):
    def __init__(self, syncObj, selfNode, otherNodes):  # noqa: N803
        super().__init__(syncObj, selfNode, otherNodes)
        self.sent: list = []

    def send(self, node, message):
        self.sent.append((node.id, message))
        return True


class Node:
    """One pysyncobj node (patched) with a recording transport and no tick thread."""

    def __init__(self):
        quorum.harden_pysyncobj()
        conf = SyncObjConf(autoTick=False, raftMinTimeout=quorum.RAFT_MIN_TIMEOUT_S,
                           raftMaxTimeout=quorum.RAFT_MAX_TIMEOUT_S,
                           appendEntriesPeriod=quorum.HEARTBEAT_S)
        self.obj = SyncObj(ME, [LEADER, OTHER], conf,
                           transportClass=RecordingTransport)
        self.peers = {n.id: n for n in self.obj._SyncObj__otherNodes}

    @property
    def sent(self) -> list:
        return self.obj._SyncObj__transport.sent

    def deliver(self, sender: str, message: dict) -> None:
        self.obj._SyncObj__onMessageReceived(self.peers[sender], message)

    def log(self) -> list:
        return [(e[1], e[2]) for e in self.obj._SyncObj__raftLog]

    def append(self, term, prev, prev_term, entries, commit=0, sender=LEADER):
        self.deliver(sender, {"type": "append_entries", "term": term, "commit_index": commit,
                              "prevLogIdx": prev, "prevLogTerm": prev_term,
                              "entries": [(b"cmd%d" % i, i, t) for i, t in entries]})

    def acks(self) -> list:
        return [(m["next_node_idx"], m["success"]) for _, m in self.sent
                if m["type"] == "next_node_idx"]


@pytest.fixture
def node():
    n = Node()
    yield n
    n.obj.destroy()


def _five(node):
    """Entries 2..6 of term 1 (index 1 is pysyncobj's initial no-op, term 0)."""
    node.append(1, 1, 0, [(i, 1) for i in range(2, 7)], commit=4)
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)]
    node.sent.clear()


def test_a_resent_append_entries_changes_nothing(node):
    _five(node)
    node.obj._SyncObj__raftLastApplied = 4  # entries up to 4 are in the state machine
    divergences = quorum._DivergenceCounter.count
    node.append(1, 1, 0, [(i, 1) for i in range(2, 7)], commit=4)
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)]
    assert node.acks() == [(7, True)]
    assert quorum._DivergenceCounter.count == divergences


def test_a_reordered_older_append_entries_never_shortens_the_log(node):
    _five(node)
    commit = node.obj._SyncObj__raftCommitIndex
    node.append(1, 1, 0, [(2, 1), (3, 1)], commit=3)  # sent before the one that got here
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)]
    assert node.acks() == [(4, True)], "only what the message verified is acknowledged"
    assert node.obj._SyncObj__raftCommitIndex >= commit


def test_a_stale_heartbeat_never_shortens_the_log_nor_commits_unverified_entries(node):
    node.append(1, 1, 0, [(i, 1) for i in range(2, 7)], commit=1)
    node.sent.clear()
    node.append(1, 3, 1, [], commit=6)  # prev 3: verifies up to 3 only
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)]
    assert node.acks() == [(4, True)]
    assert node.obj._SyncObj__raftCommitIndex == 3


def test_a_conflict_truncates_from_the_first_conflicting_entry_only(node):
    _five(node)
    node.append(2, 3, 1, [(4, 1), (5, 2)], commit=0)  # 4 matches, 5 conflicts
    assert node.log() == [(1, 0), (2, 1), (3, 1), (4, 1), (5, 2)]
    assert node.acks() == [(6, True)]


def test_the_leader_never_moves_next_index_below_the_match_index(node):
    node.obj._SyncObj__setCurrentTerm(5, None)
    node.obj._SyncObj__onBecomeLeader()
    peer = node.peers[LEADER]
    node.obj._SyncObj__raftNextIndex[peer] = 10
    node.obj._SyncObj__raftMatchIndex[peer] = 8
    node.deliver(LEADER, {"type": "next_node_idx", "next_node_idx": 3, "reset": True,
                          "success": False})  # a late reset
    assert node.obj._SyncObj__raftNextIndex[peer] == 9


def test_a_node_that_hears_a_live_leader_grants_no_vote_and_keeps_its_term(node, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(raft_rules, "monotonic", lambda: clock[0])
    _five(node)
    term = node.obj._SyncObj__raftCurrentTerm
    # a voter back from a partition, with a higher term, asks for votes and pre-votes
    node.deliver(OTHER, {"type": "request_vote", "term": term + 3, "last_log_index": 6,
                         "last_log_term": 1})
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE, "term": term + 4, "last_log_index": 6,
                         "last_log_term": 1})
    assert node.obj._SyncObj__raftCurrentTerm == term
    assert [m for _, m in node.sent if m["type"] == "response_vote"] == []
    assert [m["granted"] for _, m in node.sent if m["type"] == raft_rules.PRE_VOTE_RESPONSE] \
        == [False]
    # once the leader has been silent for the minimum election timeout, it may
    clock[0] += quorum.RAFT_MIN_TIMEOUT_S + 0.01
    node.sent.clear()
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE, "term": term + 4, "last_log_index": 6,
                         "last_log_term": 1})
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE, "term": term + 4, "last_log_index": 2,
                         "last_log_term": 1})  # a shorter log: never
    assert [m["granted"] for _, m in node.sent] == [True, False]


def test_an_election_starts_only_after_a_majority_of_pre_votes(node):
    _five(node)
    obj = node.obj
    term = obj._SyncObj__raftCurrentTerm
    obj._SyncObj__connectedNodes.update(node.peers.values())
    obj._SyncObj__raftElectionDeadline = 0  # the timer ran out
    node.sent.clear()
    obj._onTick(0)
    kinds = [m["type"] for _, m in node.sent]
    assert kinds == [raft_rules.PRE_VOTE] * 2 and obj._SyncObj__raftCurrentTerm == term
    node.sent.clear()
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE_RESPONSE, "term": term + 1,
                         "granted": True})
    obj._onTick(0)
    votes = [m for _, m in node.sent if m["type"] == "request_vote"]
    assert len(votes) == 2 and votes[0]["term"] == term + 1
    assert obj._SyncObj__raftCurrentTerm == term + 1


def test_a_pre_vote_refused_on_its_term_asks_past_the_highest_term_next(node):
    """The voter with the most up-to-date log but the lowest term (the others ran
    elections they lost): its pre-vote is refused on the term and carries the
    refuser's term; the next one asks past it, and once granted the election runs at
    that term -- a restarted cluster elected nobody for a minute before (rule 8)."""
    _five(node)
    obj = node.obj
    term = obj._SyncObj__raftCurrentTerm
    obj._SyncObj__connectedNodes.update(node.peers.values())
    obj._SyncObj__raftElectionDeadline = 0
    obj._onTick(0)
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE_RESPONSE, "term": term + 1,
                         "granted": False, "current_term": term + 5})
    assert obj._SyncObj__raftCurrentTerm == term  # a pre-vote changes no term
    node.sent.clear()
    obj._SyncObj__raftElectionDeadline = 0
    obj._onTick(0)
    asks = [m for _, m in node.sent if m["type"] == raft_rules.PRE_VOTE]
    assert asks and all(m["term"] == term + 6 for m in asks)
    node.sent.clear()
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE_RESPONSE, "term": term + 6,
                         "granted": True, "current_term": term + 5})
    obj._onTick(0)
    votes = [m for _, m in node.sent if m["type"] == "request_vote"]
    assert votes and all(m["term"] == term + 6 for m in votes)
    assert obj._SyncObj__raftCurrentTerm == term + 6


def test_a_pre_vote_refusal_carries_the_voters_term(node):
    _five(node)
    term = node.obj._SyncObj__raftCurrentTerm
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE, "term": term, "last_log_index": 99,
                         "last_log_term": 9})
    [(_to, answer)] = [(n, m) for n, m in node.sent if m["type"] == raft_rules.PRE_VOTE_RESPONSE]
    assert answer["granted"] is False and answer["current_term"] == term


# --------------------------------------------------------------------------- rule 6: learners


def _readonly_peer(node):
    """A learner connected to ``node`` (pysyncobj names read-only peers by a counter)."""
    from pysyncobj.node import Node as PeerNode

    peer = PeerNode("0")
    node.obj._SyncObj__onReadonlyNodeConnected(peer)
    return peer


def test_a_voter_takes_no_append_entries_nor_votes_from_a_learner(node):
    learner = _readonly_peer(node)
    term = node.obj._SyncObj__raftCurrentTerm
    log = node.log()
    node.obj._SyncObj__onMessageReceived(learner, {
        "type": "append_entries", "term": term + 5, "commit_index": 2, "prevLogIdx": 1,
        "prevLogTerm": 0, "entries": [(b"forged", 2, term + 5)]})
    node.obj._SyncObj__onMessageReceived(learner, {
        "type": "request_vote", "term": term + 7, "last_log_index": 99, "last_log_term": 99})
    node.obj._SyncObj__onMessageReceived(learner, {"type": "timeout_now", "term": term + 7})
    node.obj._SyncObj__onMessageReceived(learner, "not a message")
    assert node.log() == log  # nothing appended, nothing to apply
    assert node.obj._SyncObj__raftCurrentTerm == term
    assert node.obj._SyncObj__raftLeader is None
    assert node.sent == []  # no vote, no acknowledgement
    # what a learner does send still works: a forwarded write reaches the queue
    node.obj._SyncObj__onMessageReceived(learner, {"type": "apply_command",
                                                   "command": b"x", "request_id": 1})
    assert len(node.obj._SyncObj__commandsQueue._FastQueue__queue) == 1


def test_a_learner_never_applies_a_write_sent_to_it():
    """A learner (pysyncobj's read-only node) follows the leader's AppendEntries only:
    a write sent to it as if it led, a vote request or a transfer is dropped."""
    quorum.harden_pysyncobj()
    conf = SyncObjConf(autoTick=False)
    obj = SyncObj(None, [LEADER, OTHER], conf, transportClass=RecordingTransport)
    try:
        voter = next(n for n in obj._SyncObj__otherNodes if n.id == LEADER)
        obj._SyncObj__onMessageReceived(voter, {"type": "apply_command", "command": b"x",
                                                "request_id": 1})
        obj._SyncObj__onMessageReceived(voter, {"type": "request_vote", "term": 9,
                                                "last_log_index": 9, "last_log_term": 9})
        assert not obj._SyncObj__commandsQueue._FastQueue__queue
        assert obj._SyncObj__raftCurrentTerm == 0
        obj._SyncObj__onMessageReceived(voter, {
            "type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1,
            "prevLogTerm": 0, "entries": [(b"cmd2", 2, 1)]})
        assert [(e[1], e[2]) for e in obj._SyncObj__raftLog] == [(1, 0), (2, 1)]
        assert obj._SyncObj__raftLeader == voter
    finally:
        obj.destroy()


def test_a_diverged_follower_is_sent_back_past_the_whole_conflicting_term(node):
    """Entries 7..12 of term 3 that the leader (term 4) never had: one reset sends it
    back to 7 -- the first of that term's run -- not to 12 (one entry per heartbeat:
    hundreds of stale entries took longer than a node's registration timeout)."""
    _five(node)
    node.append(3, 6, 1, [(i, 3) for i in range(7, 13)], commit=4, sender=OTHER)
    node.sent.clear()
    node.append(4, 12, 2, [(13, 4)], commit=6)  # the leader's 12 is of term 2
    assert node.acks() == [(7, False)]
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)] + [(i, 3) for i in range(7, 13)]
    node.sent.clear()
    node.append(4, 6, 1, [(i, 2) for i in range(7, 14)], commit=6)  # from 7: repaired
    assert node.log() == [(1, 0)] + [(i, 1) for i in range(2, 7)] + [(i, 2) for i in range(7, 14)]
    assert node.acks() == [(14, True)]


def test_the_reset_never_goes_back_to_committed_entries(node):
    _five(node)
    node.append(3, 6, 1, [(i, 3) for i in range(7, 13)], commit=9, sender=OTHER)
    assert node.obj._SyncObj__raftCommitIndex == 9
    node.sent.clear()
    node.append(4, 12, 2, [], commit=9)
    assert node.acks() == [(10, False)]


# --------------------------------------------------------------------------- rule 9: terms


def test_a_voter_past_the_leaders_term_answers_its_append_entries_with_its_term(node):
    """A candidate whose term passed the leader's (its pre-vote was granted just before
    the others saw the new leader) was refused by the sticky voters and ignored the
    leader's lower-term AppendEntries for good; it now tells the leader its term."""
    _five(node)
    obj = node.obj
    obj._SyncObj__setCurrentTerm(3, obj._SyncObj__selfNode.id)
    obj._SyncObj__raftState = raft_rules._CANDIDATE
    obj._SyncObj__raftLeader = None
    node.append(2, 6, 1, [(7, 2)], commit=6)
    assert node.log()[-1] == (6, 1)  # nothing from a lower term is taken
    assert obj._SyncObj__raftCurrentTerm == 3 and obj._SyncObj__raftLeader is None
    assert [(to, m) for to, m in node.sent] == [(LEADER, {"type": raft_rules.TERM_NOTICE,
                                                           "term": 3})]
    node.sent.clear()
    node.append(3, 6, 1, [(7, 3)], commit=6)  # a leader at our term is followed
    assert node.log()[-1] == (7, 3)
    assert not [m for _, m in node.sent if m["type"] == raft_rules.TERM_NOTICE]


def test_a_leader_told_of_a_higher_term_steps_down_and_takes_it(node):
    _five(node)
    obj = node.obj
    obj._SyncObj__setCurrentTerm(2, None)
    obj._SyncObj__onBecomeLeader()
    assert obj._SyncObj__raftState == raft_rules._LEADER
    node.deliver(OTHER, {"type": raft_rules.TERM_NOTICE, "term": 2})  # not higher: nothing
    assert obj._SyncObj__raftState == raft_rules._LEADER
    node.deliver(OTHER, {"type": raft_rules.TERM_NOTICE, "term": 3})
    assert obj._SyncObj__raftState == raft_rules._FOLLOWER
    assert obj._SyncObj__raftCurrentTerm == 3 and obj._SyncObj__raftLeader is None
    assert obj._SyncObj__votedForNodeId is None  # free to vote in term 3's elections


def test_a_leader_grants_no_pre_vote_even_before_it_heard_from_a_majority(node):
    _five(node)
    obj = node.obj
    obj._SyncObj__setCurrentTerm(2, None)
    obj._SyncObj__onBecomeLeader()
    obj._SyncObj__lastResponseTime.clear()  # just elected: nobody answered yet
    node.sent.clear()
    node.deliver(OTHER, {"type": raft_rules.PRE_VOTE, "term": 3, "last_log_index": 99,
                         "last_log_term": 9})
    assert [m["granted"] for _, m in node.sent if m["type"] == raft_rules.PRE_VOTE_RESPONSE] \
        == [False]
