"""A full disk (a real write failure: RLIMIT_FSIZE makes writes past the limit fail with
EFBIG) gives StorageError, leaves the log consistent, and loses nothing written before."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from raftlog.config import LogConfig
from raftlog.errors import StorageError
from raftlog.log import PartitionLog
from raftlog.records import encode_batch
log = PartitionLog.open(sys.argv[1], LogConfig(segment_bytes=10 * 1024 * 1024))
resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, resource.RLIM_INFINITY))
batch = encode_batch([b"x" * 1000] * 10)
appended, failed = 0, False
for _ in range(20):
    try:
        log.append(batch)
        appended += 10
    except StorageError as e:
        failed = True
        assert "append" in str(e)
        break
assert failed, "the write limit was never hit"
assert log.log_end_offset == appended, (log.log_end_offset, appended)
recs = log.read_records(0, 1 << 20)
assert [r.offset for r in recs] == list(range(appended))
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
assert log.append(batch) == (appended, appended + 9)  # the disk has room again: offsets continue
log.close()
log = PartitionLog.open(sys.argv[1])
assert log.log_end_offset == appended + 10
print("ok", appended)
"""


def test_write_failure_is_a_storage_error_and_loses_nothing(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "p")], capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.startswith(b"ok ")
