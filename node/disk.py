"""The health of a node's data dir: writable, or not (full disk, I/O errors).

A write that fails (an append as leader or follower, a flush) marks the data dir
*unwritable* and logs one ERROR line naming the errno text, the data dir and the
partition that hit it; the next append that succeeds marks it *writable* again and
logs one line that it recovered. In between nothing more is logged, however many
produce requests are refused: an operator sees two lines per incident, not a flood.

Appends are always attempted, never refused up front because of this state: an
append that succeeds once space returns ends the incident by itself (a failed append
leaves the log unchanged, see ``LogSegment.append``). A flush that succeeds does not
count as recovery: on a full disk an fsync of data already written still succeeds
while every new append fails, so only an append proves there is room. Nor does an
append within RECOVERY_QUIET_S of the last failure: on a nearly full file system a
small append may still fit in a file's last block while larger ones fail, and the
incident must not flap into pairs of lines.

Produce requests refused meanwhile carry :func:`storage_error_message`, which clients
show as is: ``STORAGE_ERROR: no space left on device on node 2 (data dir /d)``.

Thread-safe: appends run on the trio thread, flushes in a worker thread.
"""

from __future__ import annotations

import os
import threading
import time

from raftlog.errors import StorageError

#: An append counts as recovery only this long after the last failed write.
RECOVERY_QUIET_S = 1.0


def errno_text(err: StorageError) -> str:
    """The operating system's words for ``err`` ("no space left on device"), or the
    error's own message when it carries no errno."""
    if err.errno:
        return os.strerror(err.errno).lower()
    return str(err)


def storage_error_message(node_id: int, data_dir: str, err: StorageError) -> str:
    """The message a refused produce carries (KAFKA_STORAGE_ERROR)."""
    return f"STORAGE_ERROR: {errno_text(err)} on node {node_id} (data dir {data_dir})"


class DiskHealth:
    """Writable-or-not state of one data dir, with one log line per transition.

    ``stats`` is a small dict of counters for metrics (see :meth:`stats`)."""

    def __init__(self, node_id: int, data_dir: str, events, clock=time.monotonic):
        self.node_id = node_id
        self.data_dir = data_dir
        self.events = events
        self._clock = clock
        self._failed_at = 0.0
        #: the error that made the dir unwritable; None while writable
        self.last_error: StorageError | None = None
        self._lock = threading.Lock()
        self._write_errors = 0
        self._incidents = 0

    @property
    def writable(self) -> bool:
        return self.last_error is None

    def write_failed(self, err: StorageError, partition, op: str = "append") -> str:
        """Record a failed write of ``partition``; returns the message for clients.
        Logs one ERROR line if the dir was writable until now."""
        with self._lock:
            self._write_errors += 1
            self._failed_at = self._clock()
            first = self.last_error is None
            self.last_error = err
            if first:
                self._incidents += 1
        if first:
            self.events.error("log_dir_unwritable", data_dir=self.data_dir,
                              error=errno_text(err), partition=partition, op=op,
                              detail=str(err))
        return storage_error_message(self.node_id, self.data_dir, err)

    def write_ok(self, partition) -> None:
        """An append of ``partition`` succeeded. Cheap when nothing was wrong (one
        attribute read): the caller may call it after every append."""
        if self.last_error is None or self._clock() - self._failed_at < RECOVERY_QUIET_S:
            return
        with self._lock:
            err, self.last_error = self.last_error, None
        if err is not None:
            self.events.warning("log_dir_recovered", data_dir=self.data_dir, partition=partition,
                              was=errno_text(err))

    def stats(self) -> dict:
        """Counters for metrics: ``log_dir_writable`` (1/0), ``storage_write_errors``
        (failed writes), ``log_dir_unwritable_incidents``."""
        return {"log_dir_writable": int(self.writable),
                "storage_write_errors": self._write_errors,
                "log_dir_unwritable_incidents": self._incidents}
