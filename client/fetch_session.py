"""The SDK consumer's side of a fetch session (KIP-227) with one node, pure state.

One :class:`ClientFetchSession` per leader connection (client/consumer.py's
``_Fetcher``). The first fetch on a connection is full (``session_epoch`` 0: every
partition, with the id of a session to close if there was one); the node's answer
gives the new session's id. Later fetches carry that id and the next epoch, name only
the partitions whose (offset, max bytes, leader epoch) differ from what the node's
session holds, and ``forgotten`` the ones no longer wanted here (unassigned, paused,
moved to another leader). The node keeps the partitions it was told and answers only
rows with news (node/consumer_fetch_session.py).

The epoch moves on, and what the node's session holds is updated, when a fetch is
*sent*: the node applies a connection's fetches in order, so a fetch sent while an
earlier one is still unanswered (after a seek or a pause, the consumer sends the next
at once and the node answers the earlier one, which the consumer drops) names what
differs from the earlier one. Anything that leaves the two sides unsure of each other
starts over with a full fetch: FETCH_SESSION_ID_NOT_FOUND or
INVALID_FETCH_SESSION_EPOCH, a failed fetch, a new connection (:meth:`reset`), or an
answer of session id 0 to a full fetch (an older node or a full session cache: each
fetch is full). The node reads a partition again only when a fetch names it (or its
high watermark moves), so every partition an answer brought records (or an error) of is
named by the next fetch even when its position is the same (:meth:`discarded`): a seek
back to that position, or records the consumer dropped (a seek or pause meanwhile).
"""

from __future__ import annotations

#: ``session_epoch``: a full fetch that opens a session / a fetch without one
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (1 after the int32 max, as Kafka's)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ClientFetchSession:
    """What the node's session for this connection holds, as this client told it."""

    __slots__ = ("session_id", "epoch", "told", "_close_id", "full_fetches",
                 "incremental_fetches")

    def __init__(self) -> None:
        #: the node's session id (0: none yet; the next fetch is full)
        self.session_id = 0
        #: the epoch the next fetch carries
        self.epoch = INITIAL_EPOCH
        #: {key: (offset, max_bytes, leader_epoch)} the node's session holds once it
        #: has the fetches sent
        self.told: dict = {}
        #: a session to close with the next full fetch (the node frees its slot)
        self._close_id = 0
        self.full_fetches = 0
        self.incremental_fetches = 0

    def build(self, wanted: dict) -> tuple[int, int, list, list]:
        """The next fetch of ``wanted`` ({key: (offset, max_bytes, leader_epoch)}, key a
        (topic, partition) pair or anything that has them as [0] and [1]):
        (session_id, session_epoch, [(key, (offset, max_bytes, leader_epoch))] to name,
        [keys] forgotten)."""
        if self.session_id == 0:
            self.told = dict(wanted)
            self.full_fetches += 1
            sid, self._close_id = self._close_id, 0
            return sid, INITIAL_EPOCH, list(wanted.items()), []
        told = self.told
        named = [(k, v) for k, v in wanted.items() if told.get(k) != v]
        forgotten = [k for k in told if k not in wanted]
        self.told = dict(wanted)
        self.incremental_fetches += 1
        epoch = self.epoch
        self.epoch = next_epoch(epoch)
        return self.session_id, epoch, named, forgotten

    @property
    def open(self) -> bool:
        """Whether the node's session is known (a fetch may follow one in flight)."""
        return self.session_id != 0

    def answered(self, session_id: int) -> None:
        """The node answered a fetch without error; ``session_id`` is the answer
        header's. The answer to a full fetch opens the session (0: none, the next
        fetch is full again); an incremental one's without the id closes it here."""
        if session_id == 0:
            self._reset()
        elif self.session_id == 0:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)

    def discarded(self, keys) -> None:
        """An answer brought records (or an error) of ``keys``: the next fetch names
        them whatever their position (the node reads them again only if told)."""
        for k in keys:
            self.told.pop(k, None)

    def session_error(self) -> None:
        """FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH: the next fetch is
        full (closing this session id on the node, if it still has it)."""
        self._close_id = self.session_id
        self._reset()

    def reset(self) -> None:
        """A new connection, or a fetch that failed: the next fetch is full (the node
        closed the old connection's session with it)."""
        self._close_id = 0
        self._reset()

    def _reset(self) -> None:
        self.session_id, self.epoch, self.told = 0, INITIAL_EPOCH, {}
