"""Model-based test: PartitionLog against a plain list, with crashes and reopens."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from raftlog.config import LogConfig
from raftlog.log import PartitionLog
from raftlog.records import decode_batches, encode_batch

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=200, retention_ms=-1)


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="raftlog-stateful-")
        self.log = PartitionLog.open(self.dir, CONFIG)
        self.model: dict[int, bytes] = {}  # offset -> value
        self.start = 0
        self.end = 0

    def teardown(self):
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        values=st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=8),
        epoch=st.integers(0, 3),
    )
    def append(self, values, epoch):
        base, last = self.log.append(encode_batch(values), leader_epoch=epoch)
        assert (base, last) == (self.end, self.end + len(values) - 1)
        for i, v in enumerate(values):
            self.model[base + i] = v
        self.end = last + 1

    @rule(data=st.data())
    def read(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        max_bytes = data.draw(st.integers(1, 4000))
        sl = self.log.read(offset, max_bytes)
        recs = decode_batches(sl.read_bytes(), start_offset=offset)
        if offset < self.end:
            assert recs, "a read below the LEO returns at least one record"
        for r in recs:
            assert r.value == self.model[r.offset]
        assert [r.offset for r in recs] == list(range(offset, offset + len(recs)))

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(offset)
        new_end = self.log.log_end_offset
        assert self.start <= new_end <= offset
        for o in range(new_end, self.end):
            self.model.pop(o, None)
        self.end = new_end

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def reopen_clean(self):
        self.log.close()
        self.log = PartitionLog.open(self.dir, CONFIG)

    @rule()
    def crash_and_reopen(self):
        # no close(): no clean-shutdown marker, so recovery scans from the recovery point
        self.log = PartitionLog.open(self.dir, CONFIG)

    @rule(limit=st.integers(0, 3000))
    def retention(self, limit):
        self.log.maybe_increment_high_watermark(self.log.log_end_offset)
        self.log.config = LogConfig(
            segment_bytes=1024, index_interval_bytes=200, retention_ms=-1, retention_bytes=limit
        )
        self.log.apply_retention()
        self.log.config = CONFIG
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        for o in range(self.start, new_start):
            self.model.pop(o, None)
        self.start = new_start

    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestPartitionLogModel = LogMachine.TestCase
