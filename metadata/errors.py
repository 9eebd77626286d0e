"""Errors of the metadata quorum."""

from __future__ import annotations

from raftlog.errors import RaftlogError


class QuorumError(RaftlogError):
    """A metadata write did not complete."""


class NotControllerError(QuorumError):
    """This voter is not the Raft leader (or no leader is known). ``leader_id`` may say who is."""

    def __init__(self, leader_id: int | None, message: str = ""):
        super().__init__(message or f"not the controller; the controller is {leader_id}")
        self.leader_id = leader_id


class QuorumTimeoutError(QuorumError):
    """A metadata write was not committed in time; its outcome is unknown."""


class RaftPortError(RaftlogError):
    """A peer on the Raft port broke its rules; its connection is closed (never retried
    by us: the peer reconnects if it is one of ours)."""


class HelloError(RaftPortError):
    """A Raft connection's hello was malformed, late or not signed with the password."""


class FrameError(RaftPortError):
    """A Raft message frame was too large, undecryptable, stale or not of this connection."""


class RecordTooLargeError(QuorumError):
    """A metadata record too large to replicate (quorum.ENVELOPE_BYTES_MAX); nothing
    was proposed."""
