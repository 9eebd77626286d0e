"""InitProducerId: hands out producer ids from blocks reserved durably.

Blocks of :data:`~raftlog.producer_state.PRODUCER_ID_BLOCK_SIZE` ids come from the
metadata quorum (``AllocateProducerIds``; a single node is the only voter of its
own quorum), durable before an id of the block is handed out, so no id is ever given
twice, even across restarts and controller failover. The
next block is fetched in the background when the current one runs low.
"""

from __future__ import annotations

import trio

from raftlog.errors import ApiError, ErrorCode, StorageError
from raftlog.producer_state import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlocks


class ProducerIdService:
    """Runs on the trio thread; the store's allocation runs in a worker thread."""

    def __init__(self, store, events):
        self.store = store
        self.events = events
        self.blocks = ProducerIdBlocks()
        self._lock = trio.Lock()

    async def _allocate(self) -> None:
        try:
            first = await trio.to_thread.run_sync(
                self.store.allocate_producer_ids, PRODUCER_ID_BLOCK_SIZE)
        except StorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"producer id block: {e}") from None
        except ApiError as e:
            if e.code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT):
                raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"no producer id block from the metadata quorum: {e.message}") from None
            raise
        self.blocks.add_block(first, PRODUCER_ID_BLOCK_SIZE)
        self.events.info("producer_id_block", first=first, count=PRODUCER_ID_BLOCK_SIZE)

    async def init_producer_id(self, fields: dict) -> dict:
        async with self._lock:
            pid = self.blocks.next_id()
            if pid is None:
                await self._allocate()
                pid = self.blocks.next_id()
            assert pid is not None and pid >= 0
            if self.blocks.wants_prefetch:
                self.blocks.prefetch_pending = True
                try:
                    await self._allocate()
                except ApiError:
                    self.blocks.prefetch_pending = False
        return {"producer_id": pid, "producer_epoch": 0}
