"""The metadata quorum on pysyncobj 0.3.17 -- with raft_rules.py and raft_port.py, the
only modules that import pysyncobj.

What we change in pysyncobj, and why (see ../shared/design.md). Every patch is
applied once per process by :func:`harden_pysyncobj`, in one place:

* Throughput: ``appendEntriesUseBatch=False`` (with True a blocking write waits
  ~100 ms), ``commandsWaitLeader=False`` (fail fast; callers retry with backoff),
  ``leaderFallbackTimeout`` 3 s, no dynamic membership, ``useFork=False`` (never
  fork a threaded process for log compaction).
* Security: pysyncobj unpickles what peers send (``tcp_connection``: after the
  Fernet decrypt when a password is set), its journal's term/vote file, snapshot
  transmissions and its full dump (``syncobj``, ``journal``, ``serializer``), all
  through the module ``pysyncobj.pickle`` (``loads``/``load``; ``journal`` binds
  ``loads`` by name). We replace those three names with
  :class:`RestrictedUnpickler`, which refuses every global except the handful
  pysyncobj's own data needs (:data:`SAFE_GLOBALS`: bytes rebuilt by protocol 2,
  sets, and ``pysyncobj.node.TCPNode``, whose instances the full dump holds --
  building one runs no code: ``__new__`` plus a ``__dict__`` update). A password is
  mandatory with more than one voter, so an unauthenticated packet is dropped
  before it is even unpickled. Replicated calls take only versioned CBOR bytes, of
  at most :data:`ENVELOPE_BYTES_MAX`.
* The Raft port (raft_port.py, raft_hello.py): a peer proves it knows the password
  (an HMAC over a fresh nonce, in a fixed-size hello) before anything it sends is
  buffered; message frames are bounded (``raft_hello.FRAME_BYTES_MAX``) and
  refused from their length prefix; per-address connection limits and a hello
  deadline; pysyncobj's ``assert`` checks of a message's timestamp and connection
  key are real checks. A learner (read-only peer) may only forward writes and
  acknowledge entries (raft_rules.py rule 6). The port may bind another interface
  than the voter address others dial (``raft.listener``: ``bind``).
* Raft's rules (raft_rules.py): AppendEntries truncates only from the first
  conflicting entry and never shortens the log on a re-sent, reordered or stale
  message; the leader's nextIndex never drops below matchIndex; pre-vote and leader
  stickiness, so a node that comes back from a partition disrupts nothing.
* Failover: elections time out after 0.2-0.4 s of silence (heartbeats every
  60 ms, the most pysyncobj allows under a 0.2 s timeout; its defaults 0.4-1.4 s
  and 100 ms), so a dead controller is replaced in about half a second; pre-vote
  keeps the short timeout from causing elections while a leader is alive. The tick
  thread sleeps until its role's next timer (raft_rules.py), so an idle voter costs
  about 1% of a core (the controller 1.6%: it sends the heartbeats). Learners
  (broker-only nodes) hold no elections: an up-to-date learner gets an empty
  AppendEntries every 0.5 s (news at once), about 0.4% of a core idle.
* Durability: pysyncobj syncs nothing. ``FileJournal.add`` is followed by an
  ``msync`` of the journal mmap, so the entry is on disk before the leader counts
  itself toward the commit or a follower acknowledges it (both happen after
  ``add`` returns, on the same thread); the term/vote file is written with
  :func:`raftlog.checkpoint.atomic_write` (fsync, rename, directory fsync); the
  full dump is fsynced before it replaces the old one (the journal is truncated
  after the dump, so an unsynced dump would lose committed entries).

Measured on this machine (2 cores, shared with other test runs; overlay fs;
sequential blocking ``propose(NoOp)`` on the leader; ``tests/metadata/fsync_cost.py``):

============================  =======  ========  ========
voters, journal + meta sync   ops/s    p50 (ms)  p99 (ms)
============================  =======  ========  ========
3, off (pysyncobj as is)      423      2.32      3.74
3, on (ours)                  298      3.27      5.54
1, off                        20       50.6      51.3
1, on                         19       51.1      57.7
============================  =======  ========  ========

So the msync costs about 1 ms per write (one on the leader and one on the
acknowledging follower, in parallel). A single voter is bounded by pysyncobj's
tick period (50 ms: nothing wakes its poller when it commits to itself).

Results reach the caller through pysyncobj's callbacks, which run on its tick
thread: they only set an Event, never block or raise. Each write carries a
request id; results of the last :data:`APPLIED_RESULTS_MAX` applied writes are
kept by id, so a write whose callback was lost (pysyncobj drops callbacks under
overload or on leader changes) is still reported as committed.
"""

from __future__ import annotations

import collections
import io
import logging
import os
import pickle
import threading
import time
import uuid

import cbor2
import pysyncobj.journal as _journal
import pysyncobj.pickle as _pspickle
import pysyncobj.serializer as _serializer
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as raft_monotonic
from pysyncobj.syncobj import _RAFT_STATE

from raftlog.checkpoint import atomic_write, fsync_dir, makedirs_durable
from raftlog.dirlock import DirLock
from raftlog.errors import ConfigError, ErrorCode, StorageError

from . import raft_port, raft_rules
from . import records as R
from .errors import NotControllerError, QuorumError, QuorumTimeoutError, RecordTooLargeError
from .state import MetadataState, Result, apply, restore, snapshot

logger = logging.getLogger(__name__)

#: Election timeout range and heartbeat period (seconds): see the module docstring.
RAFT_MIN_TIMEOUT_S = 0.2
RAFT_MAX_TIMEOUT_S = 0.4
HEARTBEAT_S = 0.06
#: pysyncobj's tick thread wakes at least this often (heartbeats go out on ticks).
TICK_S = 0.02
#: How often a voter retries a peer it is not connected to (pysyncobj: 5 s). A voter
#: restarted just before the controller dies must be back in touch with the others
#: well within an election timeout, or there is no majority to elect anyone.
RECONNECT_S = 0.25
#: A write waits in slices of this long, watching for a controller election.
AWAIT_SLICE_S = 0.05
#: After an election, how long a write in flight may still be answered before the
#: caller hears that its outcome is unknown (and retries on the new controller).
LEADER_CHANGE_GRACE_S = 0.3
#: How long a single proposal waits for its commit by default (seconds).
DEFAULT_PROPOSE_TIMEOUT_S = 5.0
#: How long the quorum thread may take to create the SyncObj (bind its port).
START_TIMEOUT_S = 30.0
#: Results of applied writes kept by request id (lost-callback detection).
APPLIED_RESULTS_MAX = 4096
#: Commit subscribers per quorum.
SUBSCRIBERS_MAX = 16
ENVELOPE_VERSION = 1
#: Largest replicated envelope (one metadata record and its header): what one Raft
#: message frame must carry (raft_hello.FRAME_BYTES_MAX leaves room for it and a
#: 64 KiB batch of others). A 10,000-partition topic's CreateTopic is ~100 KB.
ENVELOPE_BYTES_MAX = 1024 * 1024
_RAFT_LEADER = _RAFT_STATE.LEADER


# --------------------------------------------------------------------------- pysyncobj hardening


#: The only globals a pysyncobj pickle may name. Protocol 2 (which pysyncobj uses)
#: rebuilds bytes with _codecs.encode(str, "latin1"); the full dump holds the
#: cluster's TCPNode objects.
SAFE_GLOBALS = frozenset(
    {
        ("_codecs", "encode"),
        ("builtins", "bytes"),
        ("builtins", "bytearray"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("copyreg", "_reconstructor"),
        ("builtins", "object"),
        ("pysyncobj.node", "TCPNode"),
    }
)


_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any global outside SAFE_GLOBALS is refused."""

    def find_class(self, module, name):
        # Protocol 2 names Python 2 modules; Unpickler maps them (fix_imports).
        module = _PY2_MODULES.get(module, module)
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle global {module}.{name}")


def _restricted_loads(data):
    return RestrictedUnpickler(io.BytesIO(bytes(data))).load()


def _restricted_load(f):
    return RestrictedUnpickler(f).load()


#: The unpatched functions, so a benchmark can measure the cost of our fsyncs.
ORIGINALS = {
    "FileJournal.add": _journal.FileJournal.add,
    "MetaStorer.storeMeta": _journal.MetaStorer.storeMeta,
    "serializer.atomicReplace": _serializer.atomicReplace,
    "FileJournal.onOneSecondTimer": _journal.FileJournal.onOneSecondTimer,
}


#: Bytes a journal record takes besides its command: u32 size, u64 index, u64 term, u32 size.
JOURNAL_RECORD_OVERHEAD = 4 + 8 + 8 + 4


def _durable_add(self, command, idx, term):
    reserve_journal_space(self, command)
    ORIGINALS["FileJournal.add"](self, command, idx, term)
    self.flush()  # msync: on disk before it is acknowledged or counted toward commit


def reserve_journal_space(journal, command) -> None:
    """Allocate the disk blocks the next journal record will occupy, before pysyncobj
    adds it.

    pysyncobj's journal is a file mapped into memory and grown with ftruncate, which
    allocates nothing: on a full disk the first write into a grown region kills the
    process with SIGBUS, without a line logged (seen with the harness's diskfull
    nemesis: a node whose data dir is full died at its next metadata write). With the
    blocks reserved first, a full disk is an OSError (ENOSPC) raised before the entry
    joins pysyncobj's in-memory log: it is neither stored nor acknowledged (pysyncobj
    logs the failed tick), the node stays up, and the leader sends the entry again
    once there is room."""
    jfile = journal._FileJournal__journalFile
    start = journal._FileJournal__currentOffset
    size = JOURNAL_RECORD_OVERHEAD + len(_journal.to_bytes(command))
    try:
        # grow the file and its mapping first, as ResizableFile.write would (the
        # mapping must cover the file: pysyncobj sizes it by the file's size)
        while start + size > jfile._ResizableFile__mm.size():
            mm = jfile._ResizableFile__mm
            new = max(int(mm.size() * jfile._ResizableFile__resizeFactor), start + size)
            try:
                mm.resize(new)
            except (SystemError, ValueError):
                jfile._ResizableFile__extand(new - mm.size())
        # inside the file now: allocates its blocks, changes no size
        os.posix_fallocate(jfile._ResizableFile__f.fileno(), start, size)
    except OSError as e:
        why = os.strerror(e.errno).lower() if e.errno else str(e)
        raise OSError(e.errno, f"metadata journal {jfile._ResizableFile__fileName}: cannot "
                               f"reserve {size} bytes at {start}: {why}") from e


_meta_store_failing = threading.Event()


def _quiet_one_second_timer(self):
    """pysyncobj stores the commit index (only advisory: a restarted voter learns it
    from the leader again) once a second; on a full disk that raised on its tick thread
    every second, a traceback each time, and cut that tick short. One warning when it
    starts failing, one when it works again; the current term and vote, which Raft
    needs durable, are stored (and fail loudly) where they change, not here."""
    try:
        ORIGINALS["FileJournal.onOneSecondTimer"](self)
    except (OSError, StorageError) as e:
        _meta_failed(e)
    else:
        if _meta_store_failing.is_set():
            _meta_store_failing.clear()
            logger.warning("metadata journal: storing the commit index works again")


def _meta_failed(e: Exception) -> None:
    if not _meta_store_failing.is_set():
        _meta_store_failing.set()
        logger.error("metadata journal: cannot store the commit index (retried every "
                     "second): %s", e)


def _durable_store_meta(self, meta):
    atomic_write(self.getPath(), _pspickle.dumps(meta))


def _durable_replace(tmp_path, path):
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp_path, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    return True


class _DivergenceCounter(logging.Filter):
    """Counts pysyncobj's CRITICAL lines: ``critical`` all of them, ``count`` the
    "truncating already-applied log entries" one (a replica's applied state may have
    diverged), which it also repeats on our logger. Exported as
    ``MetadataQuorum.critical_log_lines`` and ``MetadataQuorum.divergences``."""

    count = 0
    critical = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.CRITICAL:
            _DivergenceCounter.critical += 1
        if "truncating already-applied" in record.getMessage():
            _DivergenceCounter.count += 1
            logger.critical("pysyncobj: %s", record.getMessage())
        return True


#: pysyncobj's module loggers (a filter sees only its own logger's records).
PYSYNCOBJ_LOGGERS = ("pysyncobj.syncobj", "pysyncobj.serializer", "pysyncobj.dns_resolver")


_PATCH_LOCK = threading.Lock()
_PATCHED = False


def harden_pysyncobj() -> None:
    """Apply the patches described in the module docstring once per process."""
    global _PATCHED
    with _PATCH_LOCK:
        if _PATCHED:
            return
        _pspickle.loads = _restricted_loads
        _pspickle.load = _restricted_load
        _journal.loads = _restricted_loads
        _journal.FileJournal.add = _durable_add
        _journal.MetaStorer.storeMeta = _durable_store_meta
        _journal.FileJournal.onOneSecondTimer = _quiet_one_second_timer
        _serializer.atomicReplace = _durable_replace
        counter = _DivergenceCounter()
        for name in PYSYNCOBJ_LOGGERS:
            logging.getLogger(name).addFilter(counter)
        raft_rules.apply()
        _PATCHED = True


# --------------------------------------------------------------------------- the replicated object


class _SnapshotOnDump:
    """The state as pysyncobj's full dump stores it: pickled as the CBOR bytes of
    :func:`~raftlog.metadata.state.snapshot`, encoded only when a dump is written
    (not after every applied record, which would cost O(state) per write). A dump
    loads back as plain bytes (``bytes`` is among :data:`SAFE_GLOBALS`)."""

    __slots__ = ("state",)

    def __init__(self, state: MetadataState):
        self.state = state

    def __reduce__(self):
        return (bytes, (snapshot(self.state),))


class _UnboundTransport(raft_port.HardenedTransport):
    """The transport of a quorum of one that no node ever joins (a node without
    controller.quorum.voters): it talks to nobody, so it binds no port -- none that a
    port picked for the node's own listener could lose to, none to reach from outside."""

    def _maybeBind(self):
        if not self._ready:
            self._ready = True
            self._bindOverEvent.set()


class _MetadataLog(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf, publish,
                 listen: bool = True):
        # Attributes set before SyncObj.__init__ are not part of pysyncobj's snapshot;
        # the snapshot holds only `_snapshot_bytes` (CBOR), set afterwards.
        self._state = MetadataState()
        self._state_from = b""
        self._publish = publish
        self._applied: collections.OrderedDict[str, Result] = collections.OrderedDict()
        super().__init__(self_addr, partners, conf,
                         transportClass=raft_port.HardenedTransport if listen
                         else _UnboundTransport)
        # pysyncobj's tick thread is running already: it may have loaded a dump into
        # `_snapshot_bytes` (or applied entries) before we get here, and an assignment
        # would throw that state away (a restart after log compaction came back with
        # only the entries after the dump). So set it only where nothing did.
        snap = _SnapshotOnDump(self._state)
        if self.__dict__.setdefault("_snapshot_bytes", snap) is snap:
            self._state_from = snap

    def current_state(self) -> MetadataState:
        snap = self.__dict__.get("_snapshot_bytes")
        if snap is None:  # (the tick thread, before __init__ ends and before any dump)
            return self._state
        if isinstance(snap, _SnapshotOnDump):
            # (read off the tick thread while apply_envelope replaces it: the state it
            # holds is whole either way -- never the restore() of a wrapper)
            return snap.state
        if self._state_from is not snap:  # restored from a pysyncobj dump: CBOR bytes
            self._state = restore(snap)
            self._state_from = snap
        return self._state

    def applied_result(self, request_id: str) -> Result | None:
        return self._applied.get(request_id)

    @replicated
    def apply_envelope(self, envelope: bytes):
        try:
            version, term, request_id, data = cbor2.loads(envelope)
            if version != ENVELOPE_VERSION:
                raise R.MetadataRecordError(f"unknown envelope version {version}")
            record = R.decode(data)
        except Exception as e:  # never let garbage kill the tick thread
            return Result(False, f"undecodable metadata record: {e}")
        try:
            state, result = apply(self.current_state(), record, term=term)
        except Exception as e:
            # A broken invariant is our bug; every replica hits it alike, so the
            # record is skipped everywhere rather than killing the tick thread.
            logger.critical("metadata apply failed on %r", record, exc_info=True)
            state, result = self.current_state(), Result(False, f"internal error: {e!r}")
        self._state = state
        self._snapshot_bytes = self._state_from = _SnapshotOnDump(state)
        self._remember(str(request_id), result)
        self._publish(state, record, result)
        return result

    def _remember(self, request_id: str, result: Result) -> None:
        self._applied[request_id] = result
        while len(self._applied) > APPLIED_RESULTS_MAX:
            self._applied.popitem(last=False)


class MetadataQuorum:
    """One voter of the metadata quorum.

    The SyncObj lives on a dedicated long-lived thread (``raftlog-quorum-<id>``)
    which creates it and destroys it on :meth:`close`; pysyncobj's own tick thread
    does the Raft work and is never blocked by us.

    Args:
        node_id: this voter's id (a key of ``voters``).
        voters: {node_id: (host, port)} Raft addresses of every voter; this voter
            binds its own address only.
        data_dir: where the journal, the term/vote file and the full dump live.
        password: required when there is more than one voter.
        on_commit: subscribed at once (see :meth:`subscribe`).
        leader_fallback_timeout_s: a leader that hears from no majority for this
            long steps down.
        listen: False for a lone voter that no other node joins (a node without
            controller.quorum.voters): it binds no Raft port; its address only names it.
        bind: (host, port) the Raft port binds (``raft.listener``) when not this
            voter's address in ``voters`` (which the others still dial).

    Raises:
        ConfigError: the voter set is inconsistent or a password is missing.
        QuorumError: the SyncObj could not be created (e.g. the port is taken).
    """

    def __init__(
        self,
        node_id: int,
        voters: dict,
        data_dir: str,
        password: str | None = None,
        on_commit=None,
        leader_fallback_timeout_s: float = 3.0,
        voter: bool = True,
        listen: bool = True,
        bind: tuple | None = None,
    ):
        _check_voters(node_id, voters, password, voter)
        if not listen and (len(voters) != 1 or not voter):
            raise ConfigError("only a lone voter may run without a Raft port")
        if bind is not None and (not voter or not listen):
            raise ConfigError("only a voter with a Raft port binds it (raft.listener)")
        self._listen = listen
        harden_pysyncobj()
        makedirs_durable(data_dir)  # its name too: the whole metadata log is in it
        # one process per journal: two would both map it and overwrite each other's
        # entries (raftlog/dirlock.py); held until close()
        self._lock = DirLock.acquire(data_dir, f"metadata quorum of node {node_id}")
        try:
            self._start(node_id, voters, data_dir, password, on_commit,
                        leader_fallback_timeout_s, voter, bind)
        except BaseException:
            self._lock.release()
            raise

    def _start(self, node_id, voters, data_dir, password, on_commit,
               leader_fallback_timeout_s, voter, bind) -> None:
        _check_voter_set(data_dir, voters)
        self.node_id = node_id
        #: False for a learner (a broker-only node): it follows the committed log
        #: (pysyncobj's read-only node: connects to every voter, never votes, is not
        #: counted for commits) and forwards its writes to the leader.
        self.voter = voter
        self.voters = dict(voters)
        self._addr_to_id = {f"{h}:{p}": nid for nid, (h, p) in voters.items()}
        self._subscribers: list = []
        self.callback_errors = 0
        self.controller_elections = 0
        if on_commit is not None:
            self.subscribe(on_commit)
        conf = _conf((bind or voters[node_id]) if voter else None, data_dir, password,
                     leader_fallback_timeout_s)
        conf.onStateChanged = self._on_raft_state_changed
        self._obj: _MetadataLog | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(conf,), name=f"raftlog-quorum-{node_id}", daemon=True
        )
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or self._obj is None:
            raise QuorumError(f"metadata quorum did not start: {self._start_error!r}")

    def _run(self, conf: SyncObjConf) -> None:
        partners = [
            f"{h}:{p}" for nid, (h, p) in sorted(self.voters.items())
            if nid != self.node_id or not self.voter
        ]
        if self.voter:
            host, port = self.voters[self.node_id]
            self_addr = f"{host}:{port}"
        else:
            self_addr = None  # pysyncobj's read-only node
        try:
            self._obj = _MetadataLog(self_addr, partners, conf, self._publish, self._listen)
        except BaseException as e:  # reported by __init__
            self._start_error = e
            return
        finally:
            self._started.set()
        self._stop.wait()
        self._obj.destroy_synchronous()

    # ------------------------------------------------------------------ reads

    @property
    def state(self) -> MetadataState:
        """The state after the last record applied here (may lag the leader)."""
        return self._obj.current_state()

    @property
    def is_leader(self) -> bool:
        """Whether this voter is the Raft leader, i.e. the active controller, now."""
        return self._obj._isLeader()

    @property
    def leader_id(self) -> int | None:
        """The voter this one believes leads, or None."""
        leader = self._obj._getLeader()
        if leader is None:
            return None
        return self._addr_to_id.get(getattr(leader, "address", str(leader)))

    def leader_contact(self) -> tuple[int | None, float | None]:
        """(the voter whose AppendEntries this one last took as its leader's, the
        time.monotonic() it came): a new controller's best knowledge of when the old one
        was last alive (node/heartbeat.py starts its broker session there)."""
        node = getattr(self._obj, "_rl_leader_contact_node", None)
        at = getattr(self._obj, "_rl_leader_contact", None)
        if node is None or at is None:
            return None, None
        return self._addr_to_id.get(getattr(node, "address", str(node))), at

    @property
    def term(self) -> int:
        """The current Raft term: the controller epoch of decisions made now."""
        return self._obj.raftCurrentTerm

    def status(self) -> dict:
        """The quorum as this voter sees it (Kafka's DescribeQuorum): ``leader_id``
        (-1: none known), ``leader_epoch`` (the term), ``high_watermark`` (the commit
        index), ``is_leader``, and per voter ``[id, log end offset, ms since the leader
        last heard from it, ms since it was last caught up]`` -- the leader knows every
        voter's (its match index); another voter knows only its own (-1 for the rest).
        Read off pysyncobj's thread: a snapshot, not exact."""
        obj = self._obj
        get = lambda name: getattr(obj, "_SyncObj__" + name)  # noqa: E731
        leader = self.is_leader
        now = raft_monotonic()  # (pysyncobj's clock: its response times are on it)
        log_end = get("getCurrentLogIndex")()
        match = dict(get("raftMatchIndex")) if leader else {}
        heard = dict(get("lastResponseTime")) if leader else {}
        by_addr = {getattr(n, "address", None): n for n in list(get("otherNodes"))}
        voters = []
        for nid, (h, p) in sorted(self.voters.items()):
            if nid == self.node_id:
                voters.append([nid, log_end, 0 if leader else -1, 0 if leader else -1])
                continue
            node = by_addr.get(f"{h}:{p}")
            end = match.get(node, 0) if node is not None else 0
            end = end if end > 0 else -1  # (0: not acknowledged since this leader's election)
            ago = int((now - heard[node]) * 1000) if node in heard else -1
            voters.append([nid, end, ago, ago if end >= log_end else -1])
        leader_id = self.leader_id
        return {"leader_id": -1 if leader_id is None else leader_id,
                "leader_epoch": self.term, "high_watermark": obj.raftCommitIndex,
                "is_leader": leader, "voters": voters}

    def describe(self) -> str:
        """This voter's view of the quorum in one line, for an error that says why no
        controller answers: its role and term, the leader it knows, which peers it is
        connected to, and its log (read from another thread: a snapshot, not exact)."""
        try:
            st = self._obj.getStatus()
        except Exception as e:  # (pysyncobj internals, read off its thread)
            return f"quorum status unavailable ({e!r})"
        state = {0: "follower", 1: "candidate", 2: "leader"}.get(st.get("state"), st.get("state"))
        peers = [f"{k.rsplit('_', 1)[-1]}={'up' if v == 2 else 'down'}"
                 for k, v in sorted(st.items()) if k.startswith("partner_node_status_server_")]
        leader = st.get("leader")
        return (f"this voter is a {state} in term {st.get('raft_term')}, leader "
                f"{getattr(leader, 'address', leader) or 'none'}, peers {' '.join(peers) or '-'}, "
                f"log {st.get('log_len')} entries, commit {st.get('commit_idx')}, "
                f"applied {st.get('last_applied')}")

    @property
    def divergences(self) -> int:
        """How often pysyncobj truncated already-applied entries in this process."""
        return _DivergenceCounter.count

    @property
    def critical_log_lines(self) -> int:
        """pysyncobj CRITICAL log lines in this process (0 in a healthy cluster)."""
        return _DivergenceCounter.critical

    def read_linearizable(self, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> MetadataState:
        """Commit a NoOp, then return the state: it includes every write committed
        before this call. Raises as :meth:`propose`."""
        self.propose(R.NoOp(uuid.uuid4().hex), timeout_s)
        return self.state

    def _on_raft_state_changed(self, old_state, new_state) -> None:
        """On pysyncobj's tick thread. A new controller commits a NoOp stamped with
        its term at once, so the state machine learns the new controller epoch
        and rejects compare-and-set records a deposed controller still has in
        flight, even before the new controller decides anything."""
        try:
            if new_state != _RAFT_LEADER or self._obj is None:
                return
            self.controller_elections += 1
            self._submit(R.NoOp("controller-epoch"), lambda *_: None)
        except Exception:
            logger.exception("metadata quorum state-change handler failed")

    # ------------------------------------------------------------------ commit subscribers

    def subscribe(self, callback):
        """Call ``callback(state, record, result)`` after each record applied here.

        It runs on pysyncobj's tick thread: it must be cheap and never block (hand
        the state to trio with ``token.run_sync_soon``). Exceptions are logged and
        counted in ``callback_errors``, never propagated. Returns an unsubscribe
        function.
        """
        if len(self._subscribers) >= SUBSCRIBERS_MAX:
            raise ConfigError(f"at most {SUBSCRIBERS_MAX} commit subscribers")
        self._subscribers = [*self._subscribers, callback]

        def unsubscribe() -> None:
            self._subscribers = [c for c in self._subscribers if c is not callback]

        return unsubscribe

    def _publish(self, state, record, result) -> None:
        for callback in self._subscribers:
            try:
                callback(state, record, result)
            except Exception:
                self.callback_errors += 1
                logger.exception("metadata commit subscriber failed")

    # ------------------------------------------------------------------ writes

    def propose(
        self, record, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S, *, require_leader: bool = False
    ) -> Result:
        """Replicate ``record`` and wait until it is committed and applied here.

        The record is stamped with the current Raft term; the state machine
        rejects compare-and-set records whose epoch is stale when applied, and
        says why in the returned :class:`~raftlog.metadata.state.Result`.

        Durable when it returns: in the journal of a majority of voters, fsynced.

        Raises:
            NotControllerError: no leader is known, the leader changed before the
                write committed, or ``require_leader`` and this voter does not lead
                (``leader_id`` on the error says who does, if known).
            QuorumTimeoutError: not committed within ``timeout_s``; the outcome is
                unknown (it may still commit).
        """
        if require_leader and not self.is_leader:
            raise NotControllerError(self.leader_id)
        done = threading.Event()
        outcome: list = []

        def callback(result, error):
            outcome.append((result, error))
            done.set()

        term = self.term
        try:
            request_id = self._submit(record, callback)
        except RecordTooLargeError as e:  # nothing was proposed
            return Result(False, str(e), None, int(ErrorCode.INVALID_REQUEST))
        return self._await(record, request_id, done, outcome, timeout_s, term)

    def _submit(self, record, callback) -> str:
        """Hand one envelope to pysyncobj without waiting; returns its request id."""
        request_id = uuid.uuid4().hex
        envelope = cbor2.dumps([ENVELOPE_VERSION, self.term, request_id, R.encode(record)])
        if len(envelope) > ENVELOPE_BYTES_MAX:
            raise RecordTooLargeError(
                f"{type(record).__name__} is {len(envelope)} bytes as a metadata record, "
                f"above the limit of {ENVELOPE_BYTES_MAX}: split the request (fewer "
                "partitions, ACLs or configs at a time)")
        self._obj.apply_envelope(envelope, callback=callback)
        return request_id

    def _await(self, record, request_id, done, outcome, timeout_s: float,
               term: int | None = None) -> Result:
        deadline = time.monotonic() + timeout_s
        moved_at = None  # when a new term (election) was first seen while waiting
        while not done.wait(min(AWAIT_SLICE_S, max(0.0, deadline - time.monotonic()))):
            now = time.monotonic()
            if moved_at is None and term is not None and self.term != term:
                moved_at = now
            # pysyncobj drops the callbacks of writes in flight when the leader dies: a
            # write not answered soon after an election is reported now (the caller
            # retries on the new controller) instead of after the whole timeout.
            timed_out = now >= deadline
            if timed_out or (moved_at is not None and now - moved_at >= LEADER_CHANGE_GRACE_S):
                applied = self._obj.applied_result(request_id)
                if applied is not None:  # committed, but its callback was lost
                    logger.warning("metadata write %s committed without a callback", request_id)
                    return applied
                why = (f"not committed within {timeout_s}s" if timed_out else
                       "not answered after a controller election")
                raise QuorumTimeoutError(
                    f"{type(record).__name__} (request {request_id}) {why}; "
                    "it may or may not commit")
        result, error = outcome[0]
        if error == FAIL_REASON.SUCCESS:
            return result
        if error in _NOT_CONTROLLER:
            raise NotControllerError(self.leader_id, f"write failed: {_reason(error)}")
        raise QuorumTimeoutError(f"write failed: {_reason(error)}")

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop this voter: its thread, its tick thread and its sockets. Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if not self._thread.is_alive():  # (else the journal may still be written)
            self._lock.release()


_NOT_CONTROLLER = (
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.LEADER_CHANGED,
    FAIL_REASON.DISCARDED,
)


def _check_voters(node_id: int, voters: dict, password: str | None, voter: bool = True) -> None:
    if not voters:
        raise ConfigError("the metadata quorum needs at least one voter")
    if voter and node_id not in voters:
        raise ConfigError(f"node {node_id} is not among the voters {sorted(voters)}")
    if not voter and node_id in voters:
        raise ConfigError(f"node {node_id} is a voter: it cannot join as a learner")
    if not voter and len(voters) == 1 and not password:
        raise ConfigError("a raft password is required when learners follow the quorum")
    if len(set(voters.values())) != len(voters):
        raise ConfigError(f"two voters share a raft address: {voters}")
    if len(voters) > 1 and not password:
        raise ConfigError("a raft password is required when the quorum has more than one voter")


VOTER_SET_FILE = "voters"


def _check_voter_set(data_dir: str, voters: dict) -> None:
    """Refuse to start with voter ids other than the ones this data dir's log was
    written with. pysyncobj's dynamic membership is off: changing the voter set by
    restarting with another ``controller.quorum.voters`` could elect a leader that
    lacks committed entries. Addresses may change (a voter moved with its data)."""
    path = os.path.join(data_dir, VOTER_SET_FILE)
    want = sorted(voters)
    try:
        with open(path, encoding="utf-8") as f:
            had = [int(x) for x in f.read().split(",") if x.strip()]
    except FileNotFoundError:
        atomic_write(path, ",".join(map(str, want)).encode())
        return
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the voter set of {data_dir}: {e}") from None
    if had != want:
        raise ConfigError(
            f"controller.quorum.voters names the voters {want}, but this node's metadata log "
            f"({data_dir}) belongs to a quorum of the voters {had}: the voter set cannot "
            "change (pysyncobj's dynamic membership is off). A voter may move to another "
            "address with its data dir; see README 'Moving partitions, adding and removing "
            "brokers'")


def _conf(address, data_dir: str, password, leader_fallback_timeout_s: float) -> SyncObjConf:
    """pysyncobj's configuration; ``address`` None for a learner (binds nothing)."""
    return SyncObjConf(
        appendEntriesUseBatch=False,
        commandsWaitLeader=False,
        leaderFallbackTimeout=leader_fallback_timeout_s,
        dynamicMembershipChange=False,
        useFork=False,
        raftMinTimeout=RAFT_MIN_TIMEOUT_S,
        raftMaxTimeout=RAFT_MAX_TIMEOUT_S,
        appendEntriesPeriod=HEARTBEAT_S,
        autoTickPeriod=TICK_S,
        connectionRetryTime=RECONNECT_S,
        journalFile=os.path.join(data_dir, "metadata.journal"),
        fullDumpFile=os.path.join(data_dir, "metadata.snapshot"),
        password=password,
        bindAddress=None if address is None else f"{address[0]}:{address[1]}",
        autoTick=True,
    )


def _reason(code) -> str:
    for name in dir(FAIL_REASON):
        if not name.startswith("_") and getattr(FAIL_REASON, name) == code:
            return name
    return str(code)
