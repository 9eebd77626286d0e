"""raftlog.node."""
