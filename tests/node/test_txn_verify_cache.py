"""TxnHost's cache of KIP-890 verifications (node/txn_host.py): a yes of the coordinator
is remembered per producer and epoch, and forgotten at the producer's marker; a yes
answered while a marker of that producer was appended is not remembered (with
transaction version 1 the epoch outlives the transaction, so that yes may be about the
transaction the marker closed). The coordinator's answer is stubbed: no sockets."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from raftlog.node.txn_host import TxnHost


def _host() -> TxnHost:
    config = SimpleNamespace(node_id=1, transaction_state_log_num_partitions=2,
                             transaction_state_log_replication_factor=1,
                             transaction_abort_timed_out_check_ms=1000,
                             transaction_max_timeout_ms=900_000)
    return TxnHost(SimpleNamespace(), store=None, events=None, nursery=None, peers=None,
                   producer_ids=None, config=config, offsets_partitions=2)


async def test_a_yes_across_a_marker_of_the_producer_is_not_remembered():
    host = _host()
    marker_of = {"pid": None}

    async def coordinator_says_yes(tid, pid, epoch, tps):
        await trio.sleep(0)
        if marker_of["pid"] is not None:  # a marker appended while the call was out
            host._forget_verified(marker_of["pid"])
        return {tp: True for tp in tps}

    host.verify = coordinator_says_yes
    await host.verify_and_remember("t", 7, 0, [("a", 0)])
    assert host.is_verified(7, 0, "a", 0) and not host.is_verified(7, 1, "a", 0)
    host._forget_verified(7)  # the transaction's marker
    assert not host.is_verified(7, 0, "a", 0)
    marker_of["pid"] = 8  # another producer's marker meanwhile: no matter
    await host.verify_and_remember("t", 7, 0, [("a", 1)])
    assert host.is_verified(7, 0, "a", 1)
    marker_of["pid"] = 7  # its own: the yes may be stale
    await host.verify_and_remember("t", 7, 0, [("a", 2)])
    assert not host.is_verified(7, 0, "a", 2)
    assert host._verifying == {}  # (bounded: nothing left once no call is out)
