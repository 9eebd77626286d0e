"""raftlog.jepsen."""
