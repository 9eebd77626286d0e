"""A partition replica hosted by this node: its log, its role and its waiters.

All methods run on the trio thread. Waiters (long-poll fetches, and later acks=all
produces) are plain ``trio.Event`` objects registered per partition and woken when
the high watermark moves -- the purgatory, kept as small as it can be.
"""

from __future__ import annotations

import os
import shutil
import time

import trio

from raftlog.errors import ApiError, CorruptRecordError, ErrorCode, StorageError
from raftlog.log import PartitionLog

#: Waiters one partition may hold before new long-polls answer at once.
MAX_WAITERS_PER_PARTITION = 10_000


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, f"{topic}-{partition}")


class Partition:
    """One replica. ``leader_epoch`` and leadership come from metadata."""

    def __init__(self, topic: str, partition: int, log: PartitionLog, leader_epoch: int = 0):
        self.topic = topic
        self.partition = partition
        self.log = log
        self.leader_epoch = leader_epoch
        self.is_leader = True
        self._waiters: set[trio.Event] = set()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append_as_leader(self, data: bytes, max_message_bytes: int) -> tuple[int, int]:
        """Append client batches; the caller answers the producer.

        Durable when it returns: written to the OS (page cache); fsynced per
        ``flush.messages``/``flush.ms`` or by the node's periodic flush.

        Raises:
            ApiError: NOT_LEADER_OR_FOLLOWER, MESSAGE_TOO_LARGE, CORRUPT_MESSAGE,
                KAFKA_STORAGE_ERROR.
        """
        if not self.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not the leader of {self}")
        if not data:
            raise ApiError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
        if len(data) > max_message_bytes:
            raise ApiError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record set of {len(data)} bytes exceeds max.message.bytes {max_message_bytes}",
            )
        try:
            base, last = self.log.append(data, leader_epoch=self.leader_epoch)
        except CorruptRecordError as e:
            raise ApiError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
        except StorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)) from None
        self.log.maybe_flush(int(time.time() * 1000))
        return base, last

    def maybe_increment_high_watermark(self, hw: int) -> bool:
        """Move the HW forward to ``hw`` (never back); wake waiters if it moved."""
        if hw <= self.log.high_watermark:
            return False
        self.log.high_watermark = hw
        self.wake_waiters()
        return True

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for ev in waiters:
            ev.set()

    def add_waiter(self, ev: trio.Event) -> bool:
        if len(self._waiters) >= MAX_WAITERS_PER_PARTITION:
            return False
        self._waiters.add(ev)
        return True

    def remove_waiter(self, ev: trio.Event) -> None:
        self._waiters.discard(ev)

    def close(self) -> None:
        self.wake_waiters()
        self.log.close()

    def delete(self) -> None:
        self.wake_waiters()
        path = getattr(self.log, "path", None) or getattr(self.log, "dir", None)
        self.log.delete()
        if path and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}"
