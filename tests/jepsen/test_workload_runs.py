"""Short real runs of the idempotent and groups workloads under kills: both valid."""

from __future__ import annotations

import pytest

from .runs import run_harness


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_idempotent_run_with_kills_is_valid(tmp_path):
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "idempotent", "--nemesis", "kill", "--time", "10",
        "--rate", "200", "--seed", "5", "--hold", "2,3", "--quiet", "1,2")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    st = results["stats"]
    assert st["acknowledged_sends"] > 200
    assert any(f["fault"].startswith("kill") for f in st["nemesis"]), st["nemesis"]
    assert all(r["reached"] for r in st["final_reads"].values())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_groups_run_with_kills_is_valid(tmp_path):
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "groups", "--nemesis", "kill", "--time", "10",
        "--rate", "100", "--seed", "3", "--hold", "2,3", "--quiet", "1,2",
        "--member-lifetime", "3,6")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    st = results["stats"]
    assert st["acknowledged_sends"] > 100
    assert any(f["fault"].startswith("kill") for f in st["nemesis"]), st["nemesis"]
    assert st["drain"]["complete"], st["drain"]
    ops = st["ops"]
    # the members polled, committed by hand (the odd group), were closed and came back
    # (rebalances), and the committed offsets were read from outside the groups
    assert ops["poll"]["ok"] > 50 and ops["commit"]["ok"] > 10, ops
    assert ops["close"]["ok"] >= 6 and ops["committed"]["ok"] >= 10, ops


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_queue_run_with_reassignments_and_kills_is_valid(tmp_path):
    """Replicas moved to the node that had none, dropped and given back empty (they
    catch up from the log start under acks=all load), moves cancelled half-way, nodes
    killed: nothing acknowledged is lost. Replication factor 2 on 3 nodes, so that a
    move has somewhere to go."""
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "queue", "--nemesis", "reassign,kill",
        "--targets", "move,shrink-grow,cancel,one", "--replication-factor", "2", "--time", "15", "--rate", "200",
        "--seed", "18", "--hold", "2,3", "--quiet", "1,2")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    st = results["stats"]
    faults = [f["fault"] for f in st["nemesis"]]
    # seed 18: kill, shrink-grow, cancel, move
    assert sum(f.startswith("reassign") for f in faults) >= 3, faults
    assert any(f.endswith(" cancelled") for f in faults), faults
    assert st["acknowledged_sends"] > 200
    assert all(r["reached"] for r in st["final_reads"].values())
    # shrunk partitions got their replica back: every one ends with two in sync
    assert all(len(v["replicas"]) == 2 and v["isr"] == v["replicas"]
               for v in st["replicas_at_end"].values()), st["replicas_at_end"]
