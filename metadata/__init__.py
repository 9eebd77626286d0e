"""raftlog.metadata."""
