"""The clock nemesis's pieces that need no cluster: the offset files, the command a
node runs under libfaketime, and the timestamp-lookup check."""

from __future__ import annotations

import bisect
import random
import subprocess
import sys

import pytest

from raftlog.jepsen import clock


def test_lookup_check_catches_a_time_index_that_assumes_monotonic_timestamps():
    # a leader whose clock was 5 min ahead, then one at the real time, then the first
    recs = [(0, 301_000), (1, 302_000), (2, 1_000), (3, 2_000), (4, 303_000)]
    targets = clock.probe_targets(recs, random.Random(1))

    def exact(t):
        o = clock.expected_offset(recs, t)
        return None if o is None else (o, recs[o][1])

    def bisecting(t):  # what a lookup that trusts the order of timestamps would do
        i = bisect.bisect_left([ts for _o, ts in recs], t)
        return recs[i] if i < len(recs) else None

    assert clock.wrong_lookups("k", recs, targets, exact) == []
    bad = clock.wrong_lookups("k", recs, targets, bisecting)
    assert bad and all(b["key"] == "k" for b in bad)
    assert clock.expected_offset(recs, 1_500) == 0  # the first at or after, in log order
    assert bisecting(1_500) == (3, 2_000)
    assert clock.expected_offset(recs, 303_001) is None


def test_offset_files_and_the_wrapped_node_command(tmp_path):
    if clock.find_libfaketime() is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    clocks = clock.Clocks({1: str(tmp_path / "n1"), 2: str(tmp_path / "n2")})
    clocks.set(2, -420)
    assert (tmp_path / "n2" / clock.RC_FILE).read_text() == "-420\n"
    assert (tmp_path / "n1" / clock.RC_FILE).read_text() == "+0\n"
    clocks.reset()
    assert clocks.offsets == {1: 0, 2: 0} and clocks.stats()["jumps"] == 2
    clocks.set(1, 600)
    argv = clocks.wrap(1, [sys.executable, "-m", "raftlog.node", "--config", "x"])
    assert argv[0] == "env" and argv[-2:] == ["--config", "x"]
    # the same environment, a script instead of the node: wall clock moved, monotonic
    # clock and time.sleep (replaced: libfaketime breaks clock_nanosleep) unharmed
    env = [a for a in argv[1:] if "=" in a and not a.startswith("-")]
    code = ("import time, select\n"
            "time.sleep = lambda s: select.select([], [], [], s)\n"
            "m, w = time.monotonic(), time.time(); time.sleep(0.1)\n"
            "print(round(w), round(time.monotonic() - m, 1))\n")
    import time as _time

    out = subprocess.run(["env", *env, sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=30, check=True).stdout.split()
    assert abs(int(out[0]) - (_time.time() + 600)) < 5, out
    assert out[1] == "0.1", out
