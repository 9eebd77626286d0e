"""#32: a second quorum on a journal in use would map it and overwrite its entries
(pysyncobj's "mmap slice assignment is wrong size"): it is refused before it opens it."""

from __future__ import annotations

import pytest

from raftlog.dirlock import DataDirInUse
from raftlog.localnode import free_port
from raftlog.metadata.quorum import MetadataQuorum


def test_a_second_quorum_on_the_same_files_is_refused_and_the_first_keeps_working(tmp_path):
    d = str(tmp_path / "raft")
    voters = {1: ("127.0.0.1", free_port())}
    first = MetadataQuorum(1, voters, d, listen=False)
    try:
        with pytest.raises(DataDirInUse, match=r"in use by pid \d+ \(metadata quorum of node 1\)"):
            MetadataQuorum(1, {1: ("127.0.0.1", free_port())}, d, listen=False)
    finally:
        first.close()
    again = MetadataQuorum(1, voters, d, listen=False)  # released by close()
    again.close()
