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
