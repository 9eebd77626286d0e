"""Creating an internal compacted topic (``__consumer_offsets``, ``__transaction_state``)
on first use: replication factor ``wanted`` bounded by the live brokers, created through
the metadata quorum off the event loop, logged; an existing topic is not an error."""

from __future__ import annotations

import trio

from raftlog.errors import ApiError, ErrorCode


async def create_internal_topic(store, replicas, events, name: str, partitions: int,
                                wanted_rf: int, event: str, *,
                                min_insync_from_3: bool = False) -> None:
    """``event``: the log event's stem (``<event>_created`` / ``<event>_create_failed``).
    ``min_insync_from_3``: min.insync.replicas 2 when 3 or more replicas."""
    try:
        live = [b for b in store.brokers() if not b.fenced]
        rf = max(1, min(wanted_rf, len(live)))
        config = {"cleanup.policy": "compact"}
        if min_insync_from_3 and rf >= 3:
            config["min.insync.replicas"] = "2"
        await trio.to_thread.run_sync(store.create, name, partitions, config, rf)
        replicas.reconcile()
        events.info(f"{event}_created", partitions=partitions, replication_factor=rf)
    except ApiError as e:
        if e.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
            events.warning(f"{event}_create_failed", error=e.message)
