"""lost-unsynced: what a power loss of every node explains under the default flush
policy, and nothing else."""

from __future__ import annotations

from raftlog.jepsen import checkers as c
from raftlog.jepsen.history import History
from raftlog.jepsen.runner import check, node_config_key, unsynced_loss_documented


def _send(h: History, p: int, key: str, v: int, offset: int) -> None:
    op = h.invoke(p, "send", [key, v])
    h.ok(op, offset=offset)


def _power_loss(h: History, nodes: list[int], everyone: bool) -> None:
    op = h.invoke("nemesis", "start", {"kind": "powerloss", "target": "all"})
    h.ok(op, f"powerloss {nodes}", power_loss={"nodes": nodes, "all": everyone})


def _history(everyone: bool = True) -> tuple[list[dict], dict]:
    """Values 1-3 acknowledged at offsets 0-2; a power loss; the log kept only offset 0,
    and value 4 then got offset 1 again."""
    h = History()
    for v in (1, 2, 3):
        _send(h, 0, "t-0", v, v - 1)
    poll = h.invoke(9, "poll")
    h.ok(poll, {"t-0": [[0, 1], [1, 2], [2, 3]]})
    _power_loss(h, [1, 2, 3], everyone)
    _send(h, 0, "t-0", 4, 1)
    poll = h.invoke(9, "poll")
    h.ok(poll, {"t-0": [[1, 4]]})  # the consumer went back from offset 2 to 1
    return h.ops, {"t-0": [[0, 1], [1, 4]]}


def test_loss_by_a_power_loss_of_every_node_is_the_documented_one():
    ops, final = _history()
    plain = check("queue", ops, final, None, [])
    assert {"lost", "inconsistent-offsets", "nonmonotonic-send", "read-not-committed",
            "nonmonotonic-poll"} <= set(plain)
    an = check("queue", ops, final, None, [], unsynced_loss=True)
    assert set(an) == {"lost-unsynced"}
    assert {ex["was"] for ex in an["lost-unsynced"]} == set(plain)
    assert sorted(ex["value"] for ex in an["lost-unsynced"] if ex["was"] == "lost") == [2, 3]
    valid, _, counts = c.summarize(an, "queue")
    assert valid and counts == {"lost-unsynced": len(an["lost-unsynced"])}


def test_power_loss_of_some_nodes_explains_nothing():
    ops, final = _history(everyone=False)
    an = check("queue", ops, final, None, [], unsynced_loss=True)
    assert "lost-unsynced" not in an and "lost" in an
    assert not c.summarize(an, "queue")[0]


def test_records_acknowledged_after_the_power_loss_stay_lost():
    ops, final = _history()
    h = History()
    h.ops = [dict(o) for o in ops]
    _send(h, 0, "t-0", 5, 2)  # acknowledged after the power loss, then missing
    an = check("queue", h.ops, final, None, [], unsynced_loss=True)
    assert [ex["value"] for ex in an["lost"]] == [5]
    assert not c.summarize(an, "queue")[0]


def test_other_anomalies_stay_invalid():
    ops, final = _history()
    replicas = {"t-0": {2: [[0, 99]]}}  # a replica holding another value below the HW
    an = check("queue", ops, final, {"t-0": {"hw": 2, "reached": True}}, [], replicas,
               unsynced_loss=True)
    assert "replica-divergence" in an
    assert not c.summarize(an, "queue")[0]
    dup = c.explain_power_loss({"duplicate": [{"key": "t-0", "value": 2, "count": 2}]},
                               ops, final)
    assert set(dup) == {"duplicate"}


def test_flush_per_batch_documents_no_loss():
    assert node_config_key("flush.messages") == "log.flush.messages"
    assert node_config_key("min.insync.replicas") == "min.insync.replicas"
    assert node_config_key("auto.leader.rebalance.enable") == "auto.leader.rebalance.enable"
    # write.caching=false (the default, #34): an acknowledged record lost is never excused
    assert not unsynced_loss_documented({})
    assert not unsynced_loss_documented({"log.flush.messages": "100"})
    # write.caching=true (node default, or the workload topic's): excused unless per batch
    cached = {"log.write.caching": "true"}
    assert unsynced_loss_documented(cached)
    assert unsynced_loss_documented({"write.caching.default": "true"})
    assert unsynced_loss_documented({"log.flush.messages": "100", **cached})
    assert not unsynced_loss_documented({"log.flush.messages": "1", **cached})
    assert unsynced_loss_documented({}, {"write.caching": "true"})
    assert not unsynced_loss_documented(cached, {"write.caching": "false"})
    assert node_config_key("write.caching") == "log.write.caching"
