"""The receive buffer under both wire codecs' frame splitters (raftlog.protocol for
the native protocol, raftlog.kafka.wire for Kafka's): bytes go in as they arrive,
whole frames come out, and the consumed prefix is dropped once it is half the buffer
(amortized O(1) per byte, no copy per frame of what follows it)."""

from __future__ import annotations


class FrameBuffer:
    """Bytes received and not yet split into frames: ``_buf[_pos:]``."""

    def __init__(self, max_frame_bytes: int):
        assert max_frame_bytes > 0
        self.max_frame_bytes = max_frame_bytes
        #: what sets max_frame_bytes, named in the error for a larger frame
        self.limit_name = "max.frame.bytes"
        self._buf = bytearray()
        self._pos = 0

    def receive_data(self, data) -> None:
        """Append what the socket gave (copied: a reused receive buffer is fine)."""
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._buf) - self._pos

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes not yet returned in a frame (fewer if fewer are here)."""
        return bytes(self._buf[self._pos : self._pos + n])

    def _consumed(self, end: int) -> None:
        """Frames up to ``end`` are out; an emptied buffer starts over."""
        self._pos = end
        if end == len(self._buf):
            self._buf.clear()
            self._pos = 0
