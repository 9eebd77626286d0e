"""The metadata quorum on pysyncobj 0.3.17 -- the only module that imports pysyncobj.

What we change in pysyncobj, and why (see ../shared/design.md):

* Throughput: ``appendEntriesUseBatch=False`` (with True a blocking write waits
  ~100 ms), ``commandsWaitLeader=False`` (fail fast; callers retry with backoff),
  ``leaderFallbackTimeout`` 3 s, no dynamic membership, ``useFork=False`` (never
  fork a threaded process for log compaction).
* Security: peers' messages are pickles. A password is mandatory with more than
  one voter (pysyncobj then authenticates and encrypts every message with Fernet,
  so an unauthenticated packet is dropped before it is unpickled), and every
  unpickle goes through :class:`RestrictedUnpickler`, which refuses all globals:
  Raft messages and our replicated values are plain dicts, lists, tuples, bytes and
  numbers. Replicated calls take only versioned CBOR bytes.
* Durability: pysyncobj syncs nothing. ``FileJournal.add`` is followed by an
  ``msync`` of the journal before the entry counts (the append happens before a
  follower answers and before the leader counts itself), and the term/vote file is
  written with :func:`raftlog.checkpoint.atomic_write` (fsync, rename, dir fsync).

Results reach the caller through pysyncobj's callbacks, which run on its tick
thread: they only set an Event, never block or raise.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import threading
import uuid

import cbor2
import pysyncobj.journal as _journal
import pysyncobj.pickle as _pspickle
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from raftlog.checkpoint import atomic_write
from raftlog.errors import ConfigError

from . import records as R
from .errors import NotControllerError, QuorumTimeoutError
from .state import MetadataState, Result, apply, restore, snapshot

#: Records a single proposal may wait for at most (seconds).
DEFAULT_PROPOSE_TIMEOUT_S = 5.0
ENVELOPE_VERSION = 1


# --------------------------------------------------------------------------- pysyncobj hardening


#: The only globals a pysyncobj pickle may name. Protocol 2 (which pysyncobj uses)
#: rebuilds bytes with _codecs.encode(str, "latin1"); nothing else is needed.
SAFE_GLOBALS = frozenset({("_codecs", "encode"), ("builtins", "bytes"), ("builtins", "bytearray"),
                          ("builtins", "set"), ("builtins", "frozenset")})


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any global outside SAFE_GLOBALS is refused."""

    def find_class(self, module, name):
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle global {module}.{name}")


def _restricted_loads(data):
    return RestrictedUnpickler(io.BytesIO(bytes(data))).load()


def _restricted_load(f):
    return RestrictedUnpickler(f).load()


def _durable_add(orig):
    def add(self, command, idx, term):
        orig(self, command, idx, term)
        self.flush()  # msync: the entry is on disk before it is acknowledged or counted

    return add


def _durable_store_meta(self, meta):
    atomic_write(self.getPath(), _pspickle.dumps(meta))


class _DivergenceCounter(logging.Filter):
    """Counts pysyncobj's CRITICAL "truncating already-applied log entries" line (a
    replica's applied state may have diverged: seen when voters restart without a
    durable journal). The count is exported as ``MetadataQuorum.divergences``."""

    count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "truncating already-applied" in record.getMessage():
            _DivergenceCounter.count += 1
        return True


_PATCHED = False


def harden_pysyncobj() -> None:
    """Apply the patches above once per process (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    _pspickle.loads = _restricted_loads
    _pspickle.load = _restricted_load
    _journal.loads = _restricted_loads
    _journal.FileJournal.add = _durable_add(_journal.FileJournal.add)
    _journal.MetaStorer.storeMeta = _durable_store_meta
    logging.getLogger("pysyncobj.syncobj").addFilter(_DivergenceCounter())
    _PATCHED = True


# --------------------------------------------------------------------------- the replicated object


class _MetadataLog(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf, on_commit):
        # Attributes set before SyncObj.__init__ are not part of pysyncobj's snapshot;
        # the snapshot holds only `_snapshot_bytes` (CBOR), set afterwards.
        self._state = MetadataState()
        self._state_from = b""
        self._on_commit = on_commit
        self._results: dict[str, Result] = {}
        super().__init__(self_addr, partners, conf)
        self._snapshot_bytes = snapshot(self._state)

    def current_state(self) -> MetadataState:
        if self._state_from is not self._snapshot_bytes:  # restored from a pysyncobj dump
            self._state = restore(self._snapshot_bytes)
            self._state_from = self._snapshot_bytes
        return self._state

    @replicated
    def apply_envelope(self, envelope: bytes):
        try:
            version, term, request_id, data = cbor2.loads(envelope)
            if version != ENVELOPE_VERSION:
                raise R.MetadataRecordError(f"unknown envelope version {version}")
            record = R.decode(data)
        except Exception as e:  # never let garbage kill the tick thread
            return Result(False, f"undecodable metadata record: {e}")
        state, result = apply(self.current_state(), record, term=term)
        self._state = state
        self._snapshot_bytes = self._state_from = snapshot(state)
        if self._on_commit is not None:
            try:
                self._on_commit(state, record, result)
            except Exception:
                pass
        return result


class MetadataQuorum:
    """One voter of the metadata quorum.

    Args:
        node_id: this voter's id (a key of ``voters``).
        voters: {node_id: (host, port)} Raft addresses of every voter.
        data_dir: where the journal and snapshot live (created).
        password: required when there is more than one voter.
        on_commit: called as ``on_commit(state, record, result)`` from pysyncobj's
            thread after each committed record; must be cheap and never block.
    """

    def __init__(self, node_id: int, voters: dict, data_dir: str, password: str | None = None,
                 on_commit=None, leader_fallback_timeout_s: float = 3.0):
        if node_id not in voters:
            raise ConfigError(f"node {node_id} is not among the voters {sorted(voters)}")
        if len(voters) > 1 and not password:
            raise ConfigError("a raft password is required when the quorum has more than one voter")
        harden_pysyncobj()
        os.makedirs(data_dir, exist_ok=True)
        self.node_id = node_id
        self.voters = dict(voters)
        self._addr_to_id = {f"{h}:{p}": nid for nid, (h, p) in voters.items()}
        host, port = voters[node_id]
        conf = SyncObjConf(
            appendEntriesUseBatch=False,
            commandsWaitLeader=False,
            leaderFallbackTimeout=leader_fallback_timeout_s,
            dynamicMembershipChange=False,
            useFork=False,
            journalFile=os.path.join(data_dir, "metadata.journal"),
            fullDumpFile=os.path.join(data_dir, "metadata.snapshot"),
            password=password,
            bindAddress=f"{host}:{port}",
            autoTick=True,
        )
        partners = [f"{h}:{p}" for nid, (h, p) in sorted(voters.items()) if nid != node_id]
        self._obj = _MetadataLog(f"{host}:{port}", partners, conf, on_commit)

    # ------------------------------------------------------------------ reads

    @property
    def state(self) -> MetadataState:
        return self._obj.current_state()

    @property
    def is_leader(self) -> bool:
        return self._obj._isLeader()

    @property
    def leader_id(self) -> int | None:
        leader = self._obj._getLeader()
        if leader is None:
            return None
        return self._addr_to_id.get(getattr(leader, "address", str(leader)))

    @property
    def divergences(self) -> int:
        """How often pysyncobj truncated already-applied entries in this process."""
        return _DivergenceCounter.count

    @property
    def term(self) -> int:
        return self._obj.raftCurrentTerm

    # ------------------------------------------------------------------ writes

    def propose(self, record, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S, *,
                require_leader: bool = False) -> Result:
        """Replicate ``record`` and wait until it is committed and applied here.

        Durable when it returns: on a majority of voters' disks.

        Raises:
            NotControllerError: no leader is known, or ``require_leader`` and this
                voter does not lead (``leader_id`` says who does).
            QuorumTimeoutError: not committed within ``timeout_s``; the outcome is
                unknown (it may still commit).
        """
        if require_leader and not self.is_leader:
            raise NotControllerError(self.leader_id)
        term = self.term
        envelope = cbor2.dumps([ENVELOPE_VERSION, term, uuid.uuid4().hex, R.encode(record)])
        done = threading.Event()
        outcome: list = []

        def callback(result, error):
            outcome.append((result, error))
            done.set()

        self._obj.apply_envelope(envelope, callback=callback)
        if not done.wait(timeout_s):
            raise QuorumTimeoutError(f"{type(record).__name__} not committed within {timeout_s}s")
        result, error = outcome[0]
        if error == FAIL_REASON.SUCCESS:
            return result
        if error in (FAIL_REASON.MISSING_LEADER, FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED,
                     FAIL_REASON.DISCARDED):
            raise NotControllerError(self.leader_id, f"write failed: {_reason(error)}")
        raise QuorumTimeoutError(f"write failed: {_reason(error)}")

    def close(self) -> None:
        self._obj.destroy()


def _reason(code) -> str:
    for name in dir(FAIL_REASON):
        if not name.startswith("_") and getattr(FAIL_REASON, name) == code:
            return name
    return str(code)
