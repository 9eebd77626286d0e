"""The checkers fire on real runs: nodes started with a planted bug (``--node-flag``,
node config ``test.flags``) under a fault schedule that exposes it must come out invalid.

The tests run the queue workload on 3 nodes for 16 s (about 22 s each) under one seeded
schedule: a kill of a partition leader, then an isolation of a partition leader, each
held 6-7 s -- longer than it takes the majority to fence the node and elect new leaders
(a fault healed before leadership moved exposes neither bug). Tuned on an idle 2-core
machine: 3 of 3 runs invalid for each, and each run without the flag valid.
``bug-serve-beyond-hw`` and ``bug-skip-truncation`` run the isolation alone
(``ISOLATION``, 12 s): after the kill each was missed now and then (CI failed on each).

The isolation used to hit, now and then, the node that was also the controller (the
target picked any partition leader): cut off, that node keeps its partitions until the
other two have elected a controller and it has fenced the node (up to ~5 s), so a
5-6 s isolation sometimes healed before any leadership moved and
test_ack_before_replication_loses_acknowledged_sends came out valid. The
``partition-leader`` targets now prefer a leader that is not the controller (see
LeaderObserver.partition_leader), and the holds are a second longer.

- ``bug-ack-before-replication``: the isolated leader keeps acknowledging acks=all
  sends that nobody replicates (thousands lost per run); kills alone lose only what
  was acknowledged in the milliseconds before the kill (about 3 runs in 4 of this
  length show it);
- ``bug-serve-beyond-hw``: consumers read what only the isolated leader has, cut when it
  rejoins as a follower (read-not-committed). Kills alone practically never show it
  (followers are woken by the append itself, consumers fetch after it), and neither
  does the userspace proxy (it cuts Raft links only; replica fetches still flow): the
  test needs kernel partitions.
- ``bug-skip-truncation``: the isolated leader appends what its clients still send
  (never acknowledged); back as a follower it keeps that tail instead of truncating to
  the new leader's epoch end, then fetches after it, so offsets below the HW hold other
  values on it than on the leader (replica-divergence, from the replicas' files after the
  run). Needs kernel partitions for the same reason.
"""

from __future__ import annotations

import pytest

from .runs import iptables_available, node_events, run_harness

#: node log events that show who led what during the faults
LEADERSHIP = ("became_controller", "controller_decision", "controller_decision_failed",
              "partition_role", "registered")

SCHEDULE = ("--nemesis", "kill,partition", "--targets", "partition-leader,isolate-partition-leader",
            "--time", "16", "--seed", "22", "--hold", "6,7", "--quiet", "1,1.5",
            # leadership stays where the kill moved it: a preferred-leader election right
            # after the killed node returns could take it from the node about to be cut off
            "--node-config", "auto.leader.rebalance.enable=false")
#: The partitioned-leader bugs': the isolation alone, as the first fault (12 s). After
#: SCHEDULE's kill the senders were often still settling on the new leaders when the
#: isolation came, so the isolated leader took one record or none past its HW: 1 run in
#: 4-5 read none of it (bug-serve-beyond-hw), and a fresh-clone CI run found no divergent
#: tail (bug-skip-truncation). From a steady workload every sender's next record lands
#: there: 4 of 4 runs invalid for each (read-not-committed 18-26; replica-divergence 2-3,
#: loaded machine), and runs without the flag valid.
ISOLATION = ("--nemesis", "partition", "--targets", "isolate-partition-leader",
             "--time", "12", "--seed", "22", "--hold", "6,7", "--quiet", "1,1.5",
             "--node-config", "auto.leader.rebalance.enable=false")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ack_before_replication_loses_acknowledged_sends(tmp_path):
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "queue", *SCHEDULE, "--rate", "1000", "--senders", "8",
        "--node-flag", "bug-ack-before-replication")
    counts = results["stats"]["anomaly_counts"]
    assert rc == 1 and results["valid"] is False, (
        counts, err, results["schedule"], node_events(tmp_path / "run", *LEADERSHIP))
    assert "lost" in counts, counts
    assert results["config"]["node_flag"] == ["bug-ack-before-replication"]
    assert any("planted bugs" in w for w in results["warnings"])


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag, anomaly, schedule", [
    ("bug-serve-beyond-hw", "read-not-committed", ISOLATION),
    ("bug-skip-truncation", "replica-divergence", ISOLATION),
])
def test_partitioned_leader_bugs_are_reported(tmp_path, flag, anomaly, schedule):
    if not iptables_available():
        pytest.skip("needs kernel network partitions (root, iptables, cgroup v2): the "
                    "userspace proxy cuts Raft links only, replica fetches still flow")
    rc, results, err = run_harness(
        tmp_path / "run", "--workload", "queue", *schedule, "--net", "iptables",
        "--rate", "500", "--senders", "8", "--node-flag", flag)
    counts = results["stats"]["anomaly_counts"]
    assert rc == 1 and results["valid"] is False, (
        counts, err, results["schedule"], node_events(tmp_path / "run", *LEADERSHIP))
    assert anomaly in counts, counts
