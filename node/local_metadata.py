"""The metadata a single node kept before it ran a one-voter quorum, and its migration.

Until the one metadata path (issue 18), a node without ``controller.quorum.voters``
kept its metadata in files of ``<data_dir>/__meta/`` (written atomically with fsync):

* ``topics.cbor``: ``{"v": 1, "topics": [{"name", "id", "partitions", "config"}]}``,
  every partition led by the node at leader epoch 0 (``LocalTopicStore``);
* ``producer_ids.cbor``: ``{"next": N}``, the first producer id never handed out;
* ``security.snapshot``: the CBOR snapshot (metadata/state.py ``snapshot``) of a
  metadata state holding SCRAM credentials and ACLs (``LocalSecurityState``).

Such a node now runs the same quorum as a cluster, with itself as the only voter. On
its first start, :func:`migrate` proposes what those files hold (and the quorum lacks)
as ordinary metadata records, each durable in the quorum's journal when proposed; only
then is each file renamed to ``<name>.migrated`` (directory fsynced), so it is never
read again. A crash midway leaves the files in place and the next start proposes only
what is still missing: the migration happens once, whatever the crash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import cbor2

from raftlog.checkpoint import fsync_dir
from raftlog.errors import ConfigError
from raftlog.metadata import records as R
from raftlog.metadata.state import PRODUCER_ID_BLOCK_MAX, MetadataState, restore

#: The directory and files of the pre-quorum metadata (relative to the data dir).
LOCAL_DIR = "__meta"
TOPICS_FILE = "topics.cbor"
PRODUCER_IDS_FILE = "producer_ids.cbor"
SECURITY_FILE = "security.snapshot"
#: A migrated file keeps its name with this suffix (kept for inspection, never read).
MIGRATED_SUFFIX = ".migrated"
#: The only topics.cbor format ever written.
TOPICS_VERSION = 1


@dataclass(frozen=True, slots=True)
class LocalMetadata:
    """What the pre-quorum files of one data dir hold."""

    #: ((name, topic id, partition count, {config key: value}), ...)
    topics: tuple = ()
    #: the first producer id never handed out (None: no counter file)
    next_producer_id: int | None = None
    #: SCRAM credentials and ACLs (None: no security file)
    security: MetadataState | None = None
    #: the files read (renamed once migrated)
    paths: tuple = ()


def _read(path: str, what: str, decode=cbor2.loads):
    try:
        with open(path, "rb") as f:
            return decode(f.read())
    except FileNotFoundError:
        return None
    except Exception as e:
        raise ConfigError(f"{what} {path} is unreadable: {e}") from None


def read_local_metadata(data_dir: str) -> LocalMetadata | None:
    """The pre-quorum metadata of ``data_dir``, or None when there is none to migrate.

    Raises:
        ConfigError: a file exists but cannot be read (nothing is migrated then).
    """
    base = os.path.join(data_dir, LOCAL_DIR)
    paths, topics, next_pid, security = [], (), None, None
    path = os.path.join(base, TOPICS_FILE)
    raw = _read(path, "topic metadata")
    if raw is not None:
        if not isinstance(raw, dict) or raw.get("v") != TOPICS_VERSION:
            raise ConfigError(f"topic metadata {path} has an unknown format")
        topics = tuple((t["name"], t["id"], int(t["partitions"]), dict(t["config"]))
                       for t in raw["topics"])
        paths.append(path)
    path = os.path.join(base, PRODUCER_IDS_FILE)
    raw = _read(path, "producer id counter")
    if raw is not None:
        try:
            next_pid = int(raw["next"])
        except Exception as e:
            raise ConfigError(f"producer id counter {path} is unreadable: {e!r}") from None
        paths.append(path)
    path = os.path.join(base, SECURITY_FILE)
    security = _read(path, "security metadata", restore)
    if security is not None:
        paths.append(path)
    if not paths:
        return None
    return LocalMetadata(topics, next_pid, security, tuple(paths))


def missing_records(local: LocalMetadata, state: MetadataState, node_id: int) -> list:
    """The records that bring into ``state`` what ``local`` holds and it lacks.

    Idempotent: applied, they make the next call return []. A topic is created with
    its old id, its partitions on this node alone (as they were); a topic of the same
    name already in the quorum is left as it is."""
    out: list = []
    for name, topic_id, count, config in local.topics:
        if name not in state.topics and count > 0:
            out.append(R.CreateTopic(name, topic_id, ((node_id,),) * count,
                                     tuple(sorted(config.items()))))
    if local.next_producer_id is not None:
        first = state.next_producer_id
        while first < local.next_producer_id:  # reserve every id the node may have given
            count = min(local.next_producer_id - first, PRODUCER_ID_BLOCK_MAX)
            out.append(R.AllocateProducerIds(node_id, count, first))
            first += count
    if local.security is not None:
        for (user, mech), c in sorted(local.security.scram.items()):
            if state.scram.get((user, mech)) != c:
                out.append(R.UpsertScramCredential(user, mech, c.salt, c.iterations,
                                                   c.stored_key, c.server_key))
        have = set(state.acls)
        new = tuple(b.as_tuple() for b in local.security.acls if b not in have)
        if new:
            out.append(R.CreateAcls(new))
    return out


def migrate(store, data_dir: str, events) -> int:
    """Bring a pre-quorum data dir's metadata into ``store``'s quorum (blocking; this
    node registered). Each record is durable in the quorum when proposed; then every
    file read is renamed to ``*.migrated``. Returns the number of records proposed.

    Raises:
        ConfigError: a file is unreadable, or the quorum refused a record (the files
            stay: the next start tries again).
        ApiError: the quorum did not answer (the files stay).
    """
    local = read_local_metadata(data_dir)
    if local is None:
        return 0
    records = missing_records(local, store.quorum.state, store.node_id)
    for record in records:
        result = store.propose(record)
        if not result.ok:
            raise ConfigError(f"migrating {os.path.join(data_dir, LOCAL_DIR)} into the "
                              f"metadata quorum: {type(record).__name__} refused: "
                              f"{result.error}")
    left = missing_records(local, store.quorum.state, store.node_id)
    assert not left, left  # every record above committed and applied here
    for path in local.paths:
        os.replace(path, path + MIGRATED_SUFFIX)
    fsync_dir(os.path.join(data_dir, LOCAL_DIR))
    events.info("local_metadata_migrated", topics=len(local.topics), records=len(records),
                files=",".join(os.path.basename(p) for p in local.paths))
    return len(records)
