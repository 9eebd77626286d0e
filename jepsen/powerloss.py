"""Power loss for a node that was SIGKILLed: drop every write after its last fsync.

A process crash keeps what the OS received (the page cache survives SIGKILL); a power
loss does not. raftlog records, in each partition's checkpoint (written atomically
and fsynced), the *recovery point*: everything below it was fsynced. So after a
SIGKILL, cutting every partition log back to the recovery point its checkpoint held
at that moment leaves the data directory exactly as the worst power loss would:
unsynced appends gone, indexes rebuilt on the next start. The metadata quorum's
journal and vote (fsynced per write) and the checkpoints themselves are durable and
stay as they are.

Run only on the data directory of a node that is not running.
"""

from __future__ import annotations

import os

from raftlog.checkpoint import PartitionCheckpoint
from raftlog.config import LogConfig
from raftlog.log import CHECKPOINT_FILE, PartitionLog
from raftlog.segment import parse_segment_name


def lose_unsynced_writes(data_dir: str) -> dict[str, int]:
    """Cut every partition log in ``data_dir`` to its checkpointed recovery point.

    Returns ``{partition directory name: records dropped}`` for the logs that lost
    anything.
    """
    lost: dict[str, int] = {}
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        cp_path = os.path.join(path, CHECKPOINT_FILE)
        if not os.path.isdir(path) or not (os.path.isfile(cp_path) or any(
                parse_segment_name(f) is not None for f in os.listdir(path))):
            continue
        # read before opening: opening recovers the log and moves the recovery point;
        # a log never flushed has no checkpoint: nothing of it was synced
        cp = PartitionCheckpoint.read(cp_path)
        synced = cp.recovery_point if cp is not None else 0
        log = PartitionLog.open(path, LogConfig())
        try:
            leo = log.log_end_offset
            if synced < leo:
                log.truncate_to(synced)
                lost[name] = leo - log.log_end_offset
        finally:
            log.close()
    return lost
