"""``raftlog-jepsen rates`` without running clusters: its table and its command line."""

from __future__ import annotations

from raftlog.jepsen import rates
from raftlog.jepsen.runner import build_parser


def test_summary_counts_caught_missed_and_failed_runs():
    rows = [
        {"bug": "bug-serve-beyond-hw", "seed": 1, "caught": True, "expected": True,
         "out": "o/1", "faults": ["kill [1]"], "acknowledged": 10},
        {"bug": "bug-serve-beyond-hw", "seed": 2, "caught": False, "expected": False,
         "out": "o/2", "faults": ["pause [2]", "drop 1->3"], "acknowledged": 12},
        {"bug": "bug-serve-beyond-hw", "seed": 3, "caught": None, "out": "o/3"},
        {"bug": "bug-serve-beyond-hw", "seed": 4, "caught": True, "expected": False,
         "out": "o/4", "faults": [], "acknowledged": 9},
    ]
    t = rates.summarize(rows, ["bug-serve-beyond-hw"])["bug-serve-beyond-hw"]
    assert (t["caught"], t["runs"]) == (2, 4)
    assert t["seeds_missed"] == [2] and t["seeds_failed"] == [3]
    assert t["caught_without_expected_anomaly"] == [4]
    text = rates.format_table({"bug-serve-beyond-hw": t})
    assert "caught 2/4" in text and "missed seed 2 (o/2): pause [2]; drop 1->3" in text


def test_command_line():
    a = build_parser().parse_args(["rates", "--bug", "bug-skip-truncation", "--seed", "5",
                                   "--seed", "6", "--time", "30", "--json"])
    assert (a.bug, a.seed, a.time, a.json, a.seeds) == (["bug-skip-truncation"], [5, 6],
                                                          30.0, True, 10)
    assert set(rates.BUGS) == {"bug-ack-before-replication", "bug-serve-beyond-hw",
                               "bug-skip-truncation", "bug-ack-before-fsync",
                               "bug-skip-txn-verification", "bug-lso-ignores-open-txn",
                               "bug-marker-before-prepare-durable"}
    assert set(rates.DEFAULT_BUGS) < set(rates.BUGS)
    # the txn bugs run the txn workload unless --workload says otherwise
    a = build_parser().parse_args(["rates", "--bug", "bug-lso-ignores-open-txn",
                                   "--workload", "txn"])
    assert a.workload == "txn"
    assert all(rates.BUG_WORKLOAD[b] == "txn" for b in rates.BUGS if "txn" in b)


def test_every_bug_is_a_flag_run_accepts():
    from raftlog.jepsen.runner import PLANTED_BUGS

    assert set(rates.BUGS) <= PLANTED_BUGS


def test_a_bug_may_expect_any_of_several_anomalies():
    assert rates._names("lost") == ("lost",)
    assert "aborted-read" in rates._names(rates.BUGS["bug-marker-before-prepare-durable"])
    # it runs on 5 nodes: the smallest cluster where its faults bite (rates.BUG_RUN_ARGS)
    assert rates.BUG_RUN_ARGS["bug-marker-before-prepare-durable"] == ["--nodes", "5"]
