"""A short real run under the powerloss nemesis: every node's log directory on its own
lazyfs mount; with flush.messages=1 no acknowledged record may be lost, whatever loses
power (about 45 s)."""

from __future__ import annotations

import pytest

from .runs import run_harness


def _lazyfs_or_skip(tmp_path) -> None:
    from raftlog.jepsen.lazyfs import LazyFSUnavailable, Mount

    m = Mount(str(tmp_path / "probe"), str(tmp_path / "probe.backing"))
    try:
        m.start()
    except LazyFSUnavailable as e:
        pytest.skip(f"FUSE cannot mount here: {e}")
    m.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_powerloss_and_kill_with_fsync_per_batch_is_valid(tmp_path):
    _lazyfs_or_skip(tmp_path)
    out = tmp_path / "run"
    code, results, stderr = run_harness(
        out, "--nemesis", "powerloss,kill", "--node-config", "flush.messages=1",
        "--time", "30", "--rate", "100", "--seed", "3", "--hold", "2,4", "--quiet", "1.5,3")
    assert code == 0 and results["valid"] is True, (stderr, results.get("anomalies"))
    st = results["stats"]
    losses = [e for e in results["schedule"] if e["kind"] == "powerloss"]
    assert losses, results["schedule"]
    assert st["acknowledged_sends"] > 100
    assert all(r["reached"] for r in st["final_reads"].values())
    assert "lost-unsynced" not in st["anomaly_counts"]  # flush.messages=1: nothing allowed
    assert all(s.get("full_errors", 0) == 0 for s in st["lazyfs"].values())
