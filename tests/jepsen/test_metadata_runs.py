"""The metadata workload on real nodes: several clients create, delete, grow and describe
topics under kill, pause and partition, and the history is linearizable per topic; with
the planted quorum bug ``bug-ack-before-commit`` (metadata writes answered before the
quorum commits them) the same kind of run is not."""

from __future__ import annotations

import pytest

from .runs import run_harness

COMMON = ("--workload", "metadata", "--topics", "3", "--senders", "4")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_metadata_run_with_kill_pause_and_partition_is_linearizable(tmp_path):
    # the schedule of test_harness_run's queue run: every kind of fault, each injected
    rc, results, err = run_harness(tmp_path / "run", *COMMON, "--nemesis",
                                   "kill,pause,partition", "--time", "25", "--rate", "40",
                                   "--seed", "7", "--hold", "2,4", "--quiet", "1.5,3")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    st = results["stats"]
    assert {e["kind"] for e in results["schedule"]} == {"kill", "pause", "partition"}
    ops = st["ops"]
    assert ops["create"]["ok"] > 5 and ops["delete"]["ok"] > 2, ops
    assert ops["grow"]["ok"] > 2 and ops["describe"]["ok"] > 10, ops


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_acknowledging_metadata_writes_before_commit_is_caught(tmp_path):
    rc, results, err = run_harness(tmp_path / "run", *COMMON, "--nemesis", "kill,partition",
                                   "--targets", "leader,isolate-leader", "--time", "20",
                                   "--rate", "60", "--seed", "11", "--hold", "1.5,3",
                                   "--quiet", "1,2", "--node-flag", "bug-ack-before-commit")
    counts = results["stats"]["anomaly_counts"]
    assert rc == 1 and results["valid"] is False, (counts, err)
    assert "nonlinearizable-metadata" in counts, counts
