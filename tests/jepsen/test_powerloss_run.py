"""Short real runs under the powerloss nemesis: every node's log directory on its own
lazyfs mount. With the defaults (write.caching=false, #34) no acknowledged record may
be lost, even when every node loses power at once (about 45 s each); with
``bug-ack-before-fsync`` (acknowledged before the sync) such a power loss loses
acknowledged records and the run is invalid."""

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


#: every power loss hits every node at once (the case page-cache acks cannot survive)
ALL_LOSE_POWER = ("--nemesis", "powerloss", "--targets", "all", "--time", "30",
                  "--seed", "3", "--hold", "2,4", "--quiet", "1.5,3")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_power_loss_of_every_node_with_defaults_loses_nothing_acknowledged(tmp_path):
    _lazyfs_or_skip(tmp_path)
    out = tmp_path / "run"
    code, results, stderr = run_harness(out, *ALL_LOSE_POWER, "--rate", "100")
    assert code == 0 and results["valid"] is True, (stderr, results.get("anomalies"))
    st = results["stats"]
    losses = [e for e in results["schedule"] if e["kind"] == "powerloss"]
    assert losses, results["schedule"]
    assert st["acknowledged_sends"] > 100
    assert all(r["reached"] for r in st["final_reads"].values())
    # write.caching=false: nothing is excused, and nothing was lost
    assert "lost-unsynced" not in st["anomaly_counts"]
    assert "lost" not in st["anomaly_counts"]
    assert all(s.get("full_errors", 0) == 0 for s in st["lazyfs"].values())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ack_before_fsync_is_caught_by_a_power_loss_of_every_node(tmp_path):
    _lazyfs_or_skip(tmp_path)
    out = tmp_path / "run"
    code, results, stderr = run_harness(out, *ALL_LOSE_POWER, "--rate", "500",
                                        "--node-flag", "bug-ack-before-fsync")
    counts = results["stats"]["anomaly_counts"]
    assert code == 1 and results["valid"] is False, (counts, stderr, results["schedule"])
    assert "lost" in counts and "lost-unsynced" not in counts, counts
