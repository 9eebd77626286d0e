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
