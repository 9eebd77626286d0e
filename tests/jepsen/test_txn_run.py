"""A short real run of the txn workload under kills and pauses: valid, with transactions
committed and aborted, and the faults injected."""

from __future__ import annotations

import pytest

from .runs import run_harness


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_txn_run_with_kills_and_pauses_is_valid(tmp_path):
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "txn", "--nemesis", "kill,pause", "--time", "20",
        "--rate", "50", "--seed", "7", "--hold", "2,3", "--quiet", "1,2")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    st = results["stats"]
    txns = st["transactions"]
    assert txns["committed"] >= 20 and txns["aborted"] >= 5, txns
    faults = [f["fault"] for f in st["nemesis"]]
    assert any(f.startswith("kill") for f in faults), faults
    assert any(f.startswith("pause") for f in faults), faults
    # the read_committed consumers read, and the final read reached every sentinel
    assert st["ops"]["poll"]["ok"] > 50, st["ops"]
    assert all(r["reached"] for r in st["final_reads"].values()), st["final_reads"]
    assert sum(st["final_log"].values()) >= txns["committed_records"]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("flag, anomalies", [
    # read_committed reads up to the high watermark: the consumers read records of
    # transactions still open, some of them aborted later
    ("bug-lso-ignores-open-txn", ("aborted-read", "intermediate-read")),
    # leaders append a transactional batch without KIP-890's check: the workload's sends
    # to partitions its transactions never added (TXN_UNADDED_SHARE) are appended, no
    # marker closes them, and committed writes behind them are never read_committed
    # (on a correct node those sends are refused and their transactions abort: the
    # valid run above has them too)
    ("bug-skip-txn-verification", ("lost-write", "aborted-read")),
])
def test_txn_run_catches_a_planted_bug(tmp_path, flag, anomalies):
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "txn", "--nemesis", "none", "--time", "10",
        "--rate", "50", "--seed", "7", "--node-flag", flag)
    assert rc == 1 and results["valid"] is False, err
    counts = results["stats"]["anomaly_counts"]
    assert sum(counts.get(a, 0) for a in anomalies) > 0, counts


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_coordinator_targets_hit_the_coordinator_the_cluster_names(tmp_path):
    """The txn workload's coordinator targets on a real cluster: the observer finds the
    __transaction_state leader of a workload id (every fault names it: never the random
    fallback), a coordinator-followers pause spares the coordinator, and the run stays
    valid."""
    import re

    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "txn", "--nemesis", "kill,pause", "--targets",
        "coordinator,coordinator-followers", "--time", "12", "--rate", "50", "--seed", "5",
        "--hold", "1.5,2.5", "--quiet", "1,1.5")
    assert rc == 0 and results["valid"] is True, (results.get("anomalies"), err)
    faults = [f["fault"] for f in results["stats"]["nemesis"]]
    assert len(faults) >= 3, faults
    for f in faults:
        m = re.fullmatch(r"(kill|pause) \[([\d, ]+)\] \(coordinator (\d+)\)", f)
        assert m, faults
        victims, coordinator = [int(v) for v in m[2].split(", ")], int(m[3])
        assert victims == [coordinator] or coordinator not in victims, f
