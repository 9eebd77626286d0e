"""raftlog.client."""
