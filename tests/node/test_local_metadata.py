"""A single node's data dir from before the one-voter quorum keeps working: its topics,
configs, producer-id counter, credentials and ACLs (the ``__meta/`` files the old
``LocalTopicStore`` and ``LocalSecurityState`` wrote) move into the quorum once."""

from __future__ import annotations

import os
import time

import cbor2
import pytest

from raftlog import scram as S
from raftlog.checkpoint import atomic_write, makedirs_durable
from raftlog.client import Admin, Consumer, Producer, TopicPartition
from raftlog.client.conn import BrokerConnection
from raftlog.config import LogConfig
from raftlog.errors import ConfigError
from raftlog.log import PartitionLog
from raftlog.metadata import records as R
from raftlog.metadata.state import MetadataState, apply, snapshot
from raftlog.node import local_metadata as LM
from raftlog.node.partition import partition_dir
from raftlog.protocol import Api
from raftlog.records import encode_batch

from ..conftest import NodeProcess, free_port
from .single_node import close_broker, open_broker

EVENTS_ID = "e" * 32
KEYS_ID = "k" * 32
OLD_TOPICS = [
    {"name": "events", "id": EVENTS_ID, "partitions": 2, "config": {"retention.ms": "86400000"}},
    {"name": "keys", "id": KEYS_ID, "partitions": 1, "config": {"cleanup.policy": "compact"}},
]
ACL = ("User:alice", "topic", "events", "literal", "read", "allow")


def write_old_single_node(data_dir: str) -> None:
    """What a single node of the code before issue 18 left in its data dir, written the
    way it wrote it: LocalTopicStore._save, LocalTopicStore.allocate_producer_ids,
    LocalSecurityState.propose (atomic writes of CBOR), and partition logs appended at
    leader epoch 0 (every partition of a single node was led by it at epoch 0)."""
    meta = os.path.join(data_dir, "__meta")
    makedirs_durable(meta)
    atomic_write(os.path.join(meta, "topics.cbor"), cbor2.dumps({"v": 1, "topics": OLD_TOPICS}))
    atomic_write(os.path.join(meta, "producer_ids.cbor"), cbor2.dumps({"next": 3000}))
    cred = S.derive_credential("SCRAM-SHA-256", "alice-secret")
    state = MetadataState()
    for record in (R.UpsertScramCredential("alice", "SCRAM-SHA-256", cred.salt, cred.iterations,
                                           cred.stored_key, cred.server_key),
                   R.CreateAcls((ACL,))):
        state, result = apply(state, record, term=0)
        assert result.ok
    atomic_write(os.path.join(meta, "security.snapshot"), snapshot(state))
    for topic, partition, values in (("events", 0, [b"a", b"b"]), ("events", 1, [b"c"]),
                                     ("keys", 0, [b"k1"])):
        log = PartitionLog.open(partition_dir(data_dir, topic, partition), LogConfig())
        log.append(encode_batch(values), leader_epoch=0)
        log.flush()
        log.close()


def _read_all(bootstrap: str, tp: TopicPartition, want: int) -> list:
    c = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        c.assign([tp])
        got, deadline = [], time.monotonic() + 20
        while len(got) < want and time.monotonic() < deadline:
            got += [r.value for r in c.poll(timeout_ms=500)]
        return got
    finally:
        c.close()


def _producer_id(node: NodeProcess) -> int:
    conn = BrokerConnection(node.host, node.port, 10)
    try:
        return conn.request(Api.INIT_PRODUCER_ID, {"timeout_ms": 5000}).header["producer_id"]
    finally:
        conn.close()


def _check_migrated(node: NodeProcess) -> None:
    with Admin(node.bootstrap) as admin:
        assert admin.list_topics() == ["events", "keys"]
        events = admin.describe_topic("events")
        assert events.topic_id == EVENTS_ID and len(events.partitions) == 2
        assert events.config["retention.ms"] == "86400000"
        keys = admin.describe_topic("keys")
        assert keys.topic_id == KEYS_ID and keys.config["cleanup.policy"] == "compact"
        assert list(admin.describe_users()) == ["alice"]
        assert ACL in [tuple(a) for a in admin.describe_acls()]
        cluster = admin.describe_cluster()
        assert cluster.controller_id == 1 and cluster.controller_epoch >= 1
    assert _producer_id(node) >= 3000  # never an id the old counter may have handed out


def test_an_old_single_node_data_dir_is_migrated_once_and_keeps_its_data(tmp_path):
    data_dir = str(tmp_path / "node-1")
    write_old_single_node(data_dir)
    node = NodeProcess(data_dir, free_port()).start()
    try:
        _check_migrated(node)
        assert _read_all(node.bootstrap, TopicPartition("events", 0), 2) == [b"a", b"b"]
        assert _read_all(node.bootstrap, TopicPartition("keys", 0), 1) == [b"k1"]
        with Producer(node.bootstrap) as p:
            assert p.send("events", b"new", partition=0).result(10).offset == 2
        meta = os.path.join(data_dir, "__meta")
        assert sorted(os.listdir(meta)) == ["producer_ids.cbor.migrated",
                                            "security.snapshot.migrated",
                                            "topics.cbor.migrated"]
        assert "local_metadata_migrated" in node.log_text()
        # from now on the quorum alone holds the metadata: a restart reads no old file
        with Admin(node.bootstrap) as admin:
            admin.delete_topic("keys")
        node.restart()
        with Admin(node.bootstrap) as admin:
            assert admin.list_topics() == ["events"]
        assert _read_all(node.bootstrap, TopicPartition("events", 0), 3) == [b"a", b"b", b"new"]
        assert _read_all(node.bootstrap, TopicPartition("events", 1), 1) == [b"c"]
        assert node.log_text().count("local_metadata_migrated") == 1
    finally:
        node.stop()


def test_a_migration_cut_short_is_finished_by_the_next_start(tmp_path):
    """A crash after some records committed (or after all, before the renames): the next
    start proposes only what the quorum still lacks, and nothing twice."""
    broker = open_broker(tmp_path)
    data_dir = broker.config.data_dir
    try:
        write_old_single_node(data_dir)
        local = LM.read_local_metadata(data_dir)
        todo = LM.missing_records(local, broker.store.quorum.state, 1)
        assert [type(r).__name__ for r in todo] == [
            "CreateTopic", "CreateTopic", "AllocateProducerIds", "UpsertScramCredential",
            "CreateAcls"]
        assert broker.store.propose(todo[0]).ok  # then the crash
        events = broker.events
        assert LM.migrate(broker.store, data_dir, events) == len(todo) - 1
        assert LM.read_local_metadata(data_dir) is None  # renamed: never read again
        state = broker.store.quorum.state
        assert sorted(state.topics) == ["events", "keys"]
        assert state.topics["events"].topic_id == EVENTS_ID
        assert state.next_producer_id == 3000
        # a crash between the last commit and the renames: nothing left to propose
        for name in os.listdir(os.path.join(data_dir, "__meta")):
            path = os.path.join(data_dir, "__meta", name)
            os.replace(path, path[:-len(LM.MIGRATED_SUFFIX)])
        assert LM.migrate(broker.store, data_dir, events) == 0
        assert broker.store.quorum.state.next_producer_id == 3000
        broker.replicas.reconcile()
        assert broker.replicas.partitions[("events", 0)].log.log_end_offset == 2
    finally:
        close_broker(broker)


@pytest.mark.parametrize("name, data, why", [
    ("topics.cbor", b"\xff not cbor", "topic metadata .*topics.cbor is unreadable"),
    ("topics.cbor", cbor2.dumps({"v": 99, "topics": []}), "topics.cbor has an unknown format"),
    ("producer_ids.cbor", cbor2.dumps({"nxt": 5}), "producer id counter .*producer_ids.cbor"),
    ("security.snapshot", b"garbage", "security metadata .*security.snapshot is unreadable"),
])
def test_an_unreadable_old_file_is_named_and_left_in_place(tmp_path, name, data, why):
    meta = tmp_path / "__meta"
    meta.mkdir()
    (meta / name).write_bytes(data)
    with pytest.raises(ConfigError, match=why):
        LM.read_local_metadata(str(tmp_path))
    assert (meta / name).read_bytes() == data  # nothing renamed, nothing lost
    assert LM.read_local_metadata(str(tmp_path / "nothing-here")) is None
