"""Partition side of transactions (pure): producer state's open transactions and markers,
the last stable offset, the aborted-transaction index and the read_committed query."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog import records
from raftlog.errors import CorruptSnapshotError
from raftlog.producer_state import ProducerStateManager, Verdict
from raftlog.txn_index import (
    ENTRY_SIZE,
    AbortedFilter,
    AbortedTxn,
    CorruptTxnIndexError,
    TxnIndex,
    collect_aborted,
    decode,
    encode_entry,
)

TXN = records.ATTR_TRANSACTIONAL
CTRL = records.ATTR_TRANSACTIONAL | records.ATTR_CONTROL


def header(base, count, pid=-1, epoch=-1, seq=-1, attrs=0):
    return records.BatchHeader(base, 0, 0, records.MAGIC, 0, attrs, count - 1, 1, 1, pid,
                               epoch, seq, count)


# --------------------------------------------------------------------------- producer state


def test_open_transaction_sets_the_lso_and_a_marker_closes_it():
    s = ProducerStateManager()
    assert s.check(7, 0, 0, 2, transactional=True).verdict is Verdict.APPEND
    s.update(7, 0, 0, 2, 10, transactional=True)
    s.update(7, 0, 2, 1, 15, transactional=True)  # (a later batch: the first stays)
    s.update(8, 0, 0, 1, 12, transactional=True)
    assert s.ongoing == {7: 10, 8: 12}
    assert s.last_stable_offset(9) == 9  # never above the high watermark
    assert s.last_stable_offset(16) == 10
    # a plain batch inside the open transaction is refused
    assert s.check(7, 0, 3, 1).verdict is Verdict.INVALID_TXN_STATE
    assert s.check_marker(7, 1, 3).verdict is Verdict.APPEND
    done = s.complete_txn(7, 1, 3, 16, aborted=True)
    assert (done.first_offset, done.last_offset, done.aborted) == (10, 16, True)
    assert done.last_stable_offset == 12  # producer 8 still open
    assert s.ongoing == {8: 12}
    # a delayed batch of the ended transaction (old epoch) is fenced; the bumped epoch
    # starts at sequence 0
    assert s.check(7, 0, 3, 1, transactional=True).verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert s.check(7, 1, 0, 1, transactional=True).verdict is Verdict.APPEND
    # stale coordinator and stale epoch markers
    assert s.check_marker(7, 0, 3).verdict is Verdict.INVALID_PRODUCER_EPOCH
    assert s.check_marker(7, 1, 2).verdict is Verdict.COORDINATOR_FENCED
    assert s.check_marker(7, 1, 2).error_code.name == "TRANSACTION_COORDINATOR_FENCED"
    assert s.check_marker(99, 0, 0).verdict is Verdict.APPEND  # unknown: as Kafka
    done8 = s.complete_txn(8, 1, 3, 17, aborted=False)
    assert done8.last_stable_offset == 18 and not s.ongoing
    # both markers closed, but the one at 17 is not below the high watermark 17 yet
    assert s.last_stable_offset(17) == 12 and s.last_stable_offset(18) == 18


def test_a_marker_without_data_here_covers_itself():
    s = ProducerStateManager()
    done = s.complete_txn(5, 1, 0, 40, aborted=True)
    assert (done.first_offset, done.last_offset, done.last_stable_offset) == (40, 40, 41)


def test_open_transactions_keep_their_producer_through_expiry_and_head_truncation():
    s = ProducerStateManager()
    s.update(1, 0, 0, 1, 0, timestamp_ms=0, transactional=True)
    s.update(2, 0, 0, 1, 1, timestamp_ms=0)
    assert s.remove_expired(10**12) == [2]
    s.truncate_head(100)
    assert list(s.producers) == [1] and s.ongoing == {1: 0}


def test_snapshot_keeps_open_transactions_and_unreplicated_markers():
    s = ProducerStateManager()
    s.update(1, 0, 0, 3, 0, transactional=True)
    s.update(2, 0, 0, 1, 3, transactional=True)
    s.complete_txn(2, 1, 4, 4, aborted=True)
    r = ProducerStateManager.restore(s.snapshot())
    assert r.ongoing == {1: 0} and r.unreplicated == [(3, 4)] and r.end_offset == 5
    assert r.producers[2].coordinator_epoch == 4 and r.producers[2].epoch == 1
    assert r.last_stable_offset(5) == 0


def test_version_1_snapshots_still_restore():
    import cbor2

    body = cbor2.dumps([5, [[1, 0, 7, [[0, 4, 0, 4]]]]])
    data = b"RLPS" + struct.pack("<HI", 1, crc32c.crc32c(body)) + body
    r = ProducerStateManager.restore(data)
    assert r.producers[1].txn_first_offset == -1 and not r.ongoing and r.end_offset == 5


def test_snapshots_breaking_transaction_rules_are_corrupt():
    import cbor2

    for body in ([5, [[1, 0, 7, [], 5, -1]], []],  # open transaction at the end offset
                 [5, [[1, 0, 7, [], -1, -2]], []],
                 [5, [], [[3, 2]]],  # marker before its first offset
                 [5, [], [[3, 5]]]):
        blob = cbor2.dumps(body)
        data = b"RLPS" + struct.pack("<HI", 2, crc32c.crc32c(blob)) + blob
        with pytest.raises(CorruptSnapshotError):
            ProducerStateManager.restore(data)


# --------------------------------------------------------------------------- txn index


def test_txn_index_file_round_trips_and_collects_overlapping_aborts():
    idx = TxnIndex(100)
    # producer 3's transaction (from 103) is open when producer 2's abort marker lands
    e1, e2, e3 = AbortedTxn(1, 90, 101, 95), AbortedTxn(2, 102, 105, 103), AbortedTxn(3, 103, 110, 111)
    for e in (e1, e2, e3):
        idx.append(e)
    back = decode(idx.to_bytes(), 100, 120)
    assert back.entries == idx.entries and len(back) == 3
    assert idx.collect(102, 104) == ([e2, e3], True)
    assert idx.collect(0, 100) == ([e1], True)  # (e2's LSO 103 >= 100 ends the search)
    assert idx.collect(106, 120) == ([e3], False)  # the next segment may hold more
    assert idx.collect(111, 120) == ([], False)
    assert collect_aborted([idx, TxnIndex(111, [AbortedTxn(4, 100, 112, 113),
                                                 AbortedTxn(5, 121, 130, 131)])],
                           106, 120) == [(3, 103), (4, 100)]
    idx.truncate_to(105)
    assert [e.producer_id for e in idx.entries] == [1]
    with pytest.raises(CorruptTxnIndexError, match="not after"):
        idx.append(AbortedTxn(4, 0, 101, 0))


@pytest.mark.parametrize("entry,why", [
    (AbortedTxn(-1, 0, 100, 0), "producer id"),
    (AbortedTxn(1, 101, 100, 0), "first offset"),
    (AbortedTxn(1, 0, 100, 102), "past its marker"),
    (AbortedTxn(1, 0, 99, 0), "outside the segment"),
    (AbortedTxn(1, 0, 200, 0), "outside the segment"),
])
def test_txn_index_entries_breaking_invariants_are_corrupt(entry, why):
    with pytest.raises(CorruptTxnIndexError, match=why):
        decode(encode_entry(entry), 100, 200)


def test_txn_index_damage_is_detected():
    good = encode_entry(AbortedTxn(1, 0, 100, 50)) + encode_entry(AbortedTxn(2, 0, 101, 50))
    with pytest.raises(CorruptTxnIndexError, match="torn"):
        decode(good[:-1], 100)
    flipped = bytearray(good)
    flipped[5] ^= 1
    with pytest.raises(CorruptTxnIndexError, match="CRC"):
        decode(bytes(flipped), 100)
    body = struct.pack(">hqqqq", 1, 1, 0, 100, 50)
    with pytest.raises(CorruptTxnIndexError, match="version"):
        decode(body + struct.pack(">I", crc32c.crc32c(body)), 100)
    with pytest.raises(CorruptTxnIndexError, match="not after"):
        decode(good[ENTRY_SIZE:] + good[:ENTRY_SIZE], 100)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3 * ENTRY_SIZE + 3))
def test_txn_index_garbage_raises_only_corrupt_txn_index_error(data):
    try:
        idx = decode(data, 0)
    except CorruptTxnIndexError:
        return
    assert idx.to_bytes() == data


# --------------------------------------------------------------------------- the model

SEGMENT_OFFSETS = 6  # a new segment every 6 offsets (or so)

_op = st.one_of(
    st.tuples(st.just("txn"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("idem"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("plain"), st.just(-1), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(0, 2), st.just(1)),
    st.tuples(st.just("abort"), st.integers(0, 2), st.just(1)),
    st.tuples(st.just("hw"), st.just(-1), st.integers(0, 8)),
)


class Partition:
    """A leader's log of batch headers plus the pure state; and the oracle's view."""

    def __init__(self):
        self.state = ProducerStateManager()
        self.log: list = []  # (header, aborted?) in offset order
        self.indexes: list[TxnIndex] = [TxnIndex(0)]
        self.hw = 0
        self.epoch = {p: 0 for p in range(3)}
        self.seq = {p: 0 for p in range(3)}
        self.open: dict = {}  # pid -> first offset (oracle)
        self.txn_of: dict = {}  # offset of a transactional batch -> transaction number
        self.outcome: dict = {}  # transaction number -> "commit" | "abort"
        self.current: dict = {}  # pid -> transaction number
        self.closed: list = []  # (first, marker) (oracle)
        self.count = 0

    @property
    def leo(self):
        return self.log[-1][0].next_offset if self.log else 0

    def _append(self, h, aborted=None):
        if h.base_offset - self.indexes[-1].base_offset >= SEGMENT_OFFSETS:
            self.indexes.append(TxnIndex(h.base_offset))
        self.log.append((h, aborted))

    def apply(self, kind, pid, n):
        base = self.leo
        if kind == "hw":
            self.hw = min(self.leo, self.hw + n)
        elif kind == "plain":
            self._append(header(base, n))
        elif kind in ("txn", "idem"):
            txn = kind == "txn"
            c = self.state.check(pid, self.epoch[pid], self.seq[pid], n, transactional=txn)
            if not txn and pid in self.open:
                assert c.verdict is Verdict.INVALID_TXN_STATE
                return
            assert c.verdict is Verdict.APPEND, c
            self.state.update(pid, self.epoch[pid], self.seq[pid], n, base, transactional=txn)
            self._append(header(base, n, pid, self.epoch[pid], self.seq[pid],
                                TXN if txn else 0))
            self.seq[pid] += n
            if txn:
                if pid not in self.open:
                    self.open[pid] = base
                    self.count += 1
                    self.current[pid] = self.count
                self.txn_of[base] = self.current[pid]
        else:  # a marker, with the epoch bumped (KIP-890)
            aborted = kind == "abort"
            epoch = self.epoch[pid] + 1
            assert self.state.check_marker(pid, epoch, 1).verdict is Verdict.APPEND
            done = self.state.complete_txn(pid, epoch, 1, base, aborted)
            first = self.open.pop(pid, base)
            assert (done.first_offset, done.last_offset) == (first, base)
            others = min(self.open.values(), default=base + 1)
            assert done.last_stable_offset == min(others, base + 1)
            if pid in self.current:
                self.outcome[self.current.pop(pid)] = kind
            self.closed.append((first, base))
            self._append(header(base, 1, pid, epoch, -1, CTRL), aborted)
            if aborted:
                self.indexes[-1].append(AbortedTxn(pid, done.first_offset, base,
                                                   done.last_stable_offset))
            self.epoch[pid], self.seq[pid] = epoch, 0

    def oracle_lso(self):
        firsts = list(self.open.values()) + [f for f, m in self.closed if m >= self.hw]
        return min([*firsts, self.hw])


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(_op, max_size=40), data=st.data())
def test_lso_index_and_read_committed_match_the_oracle(ops, data):
    p = Partition()
    for kind, pid, n in ops:
        p.apply(kind, pid, n)
        lso = p.state.last_stable_offset(p.hw)
        assert lso == p.oracle_lso() and lso <= p.hw
        assert p.state.ongoing == p.open
    # the index files read back as written, segment by segment
    bases = [i.base_offset for i in p.indexes] + [p.leo]
    for idx, nxt in zip(p.indexes, bases[1:]):
        assert decode(idx.to_bytes(), idx.base_offset, max(nxt, idx.base_offset + 1)).entries \
            == idx.entries
    # a read_committed fetch of [fetch, upper) with upper <= LSO
    lso = p.state.last_stable_offset(p.hw)
    fetch = data.draw(st.integers(0, max(lso, 0)))
    upper = data.draw(st.integers(fetch, max(lso, fetch)))
    first_seg = max(i for i, idx in enumerate(p.indexes) if idx.base_offset <= fetch) \
        if p.indexes else 0
    aborted = collect_aborted(iter(p.indexes[first_seg:]), fetch, upper)
    f = AbortedFilter(aborted)
    got = []
    for h, _ in p.log:
        if h.next_offset <= fetch or h.base_offset >= upper:
            continue
        if not f.skip(h.producer_id, h.base_offset, h.is_transactional, h.is_control):
            got += [o for o in range(h.base_offset, h.next_offset) if fetch <= o < upper]
    want = []
    for h, _ in p.log:
        if h.is_control:
            continue
        if h.is_transactional and p.outcome.get(p.txn_of[h.base_offset]) != "commit":
            assert p.outcome.get(p.txn_of[h.base_offset]) == "abort" or h.base_offset >= upper
            continue
        want += [o for o in range(h.base_offset, h.next_offset) if fetch <= o < upper]
    assert got == want
    # recovery: replaying the log (from a snapshot taken halfway) gives the same state
    half = len(p.log) // 2
    s2 = ProducerStateManager()
    for h, ab in p.log[:half]:
        s2.apply_header(h, coordinator_epoch=1, aborted=bool(ab))
    s3 = ProducerStateManager.restore(s2.snapshot())
    rebuilt_index = []
    for h, ab in p.log[half:]:
        done = s3.apply_header(h, coordinator_epoch=1, aborted=bool(ab))
        if done is not None and done.aborted:
            rebuilt_index.append(AbortedTxn(done.producer_id, done.first_offset,
                                            done.last_offset, done.last_stable_offset))
    assert s3.ongoing == p.state.ongoing
    assert s3.last_stable_offset(p.hw) == p.state.last_stable_offset(p.hw)
    assert {pid: (e.epoch, e.txn_first_offset) for pid, e in s3.producers.items()} == {
        pid: (e.epoch, e.txn_first_offset) for pid, e in p.state.producers.items()}
    live_index = [e for idx in p.indexes for e in idx.entries]
    assert rebuilt_index == [e for e in live_index if e.last_offset >= (
        p.log[half][0].base_offset if half < len(p.log) else p.leo)]
