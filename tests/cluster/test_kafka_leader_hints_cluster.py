"""KIP-951 on a 3-node cluster: a Produce (v10+) or Fetch (v16+) sent to a node that
does not lead the partition is refused with NOT_LEADER_OR_FOLLOWER and told who leads
(``current_leader``) and where its Kafka listener is (``node_endpoints``), so a client
goes there without asking Metadata first."""

from __future__ import annotations

from raftlog.kafka import batch as kb

from ..conftest import free_ports
from ..node.test_kafka_new_versions import _Conn
from .cluster import LocalCluster, until

NOT_LEADER_OR_FOLLOWER = 6


class _At:
    def __init__(self, kafka: str):
        self.kafka = kafka


def test_refused_produce_and_fetch_name_the_leader_and_its_endpoint(tmp_path):
    cluster = LocalCluster(tmp_path, 3)
    kports = free_ports(3)
    brokers = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(kports, 1))
    for n, kport in zip(cluster.nodes, kports):
        n.extra.update({"kafka.listener": f"127.0.0.1:{kport}", "kafka.brokers": brokers})
    cluster.start()
    try:
        until(lambda: _connects(kports[1]), timeout_s=20)
        other = _Conn(_At(f"127.0.0.1:{kports[1]}"))  # node 2; the topic lives on node 1
        got = other.call(19, 7, {"topics": [{"name": "hint", "num_partitions": -1,
                                             "replication_factor": -1, "assignments": [
                                                 {"partition_index": 0, "broker_ids": [1]}],
                                             "configs": []}],
                                 "timeout_ms": 10_000, "validate_only": False})
        assert got["topics"][0]["error_code"] == 0
        until(lambda: cluster.partition("hint", 0).leader == 1, timeout_s=20)
        epoch = cluster.partition("hint", 0).leader_epoch
        md = other.call(3, 12, {"topics": [{"topic_id": bytes(16), "name": "hint"}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
        topic_id = md["topics"][0]["topic_id"]
        records = kb.encode_batch([b"x"], timestamps=[1])
        leader = {"leader_id": 1, "leader_epoch": epoch}
        endpoint = [{"node_id": 1, "host": "127.0.0.1", "port": kports[0], "rack": None}]
        for version, topic in ((10, {"name": "hint"}), (13, {"topic_id": topic_id})):
            got = other.call(0, version, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                          "topic_data": [{**topic, "partition_data": [
                                              {"index": 0, "records": records}]}]})
            row = got["responses"][0]["partition_responses"][0]
            assert row["error_code"] == NOT_LEADER_OR_FOLLOWER
            assert row["current_leader"] == leader and got["node_endpoints"] == endpoint
        got = other.call(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                "topic_data": [{"name": "hint", "partition_data": [
                                    {"index": 0, "records": records}]}]})
        row = got["responses"][0]["partition_responses"][0]  # v9: no hints (not in it)
        assert row["error_code"] == NOT_LEADER_OR_FOLLOWER and row["current_leader"] is None
        got = other.call(1, 16, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        (t,) = got["responses"]
        assert t["topic_id"] == topic_id
        row = t["partitions"][0]
        assert row["error_code"] == NOT_LEADER_OR_FOLLOWER and row["current_leader"] == leader
        assert got["node_endpoints"] == endpoint
        got = other.call(1, 15, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        row = got["responses"][0]["partitions"][0]  # v15: no hints, as Kafka
        assert row["error_code"] == NOT_LEADER_OR_FOLLOWER
        assert row["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
        # and the leader itself takes the produce
        at_leader = _Conn(_At(f"127.0.0.1:{kports[0]}"))
        got = at_leader.call(0, 13, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                     "topic_data": [{"topic_id": topic_id, "partition_data": [
                                         {"index": 0, "records": records}]}]})
        assert got["responses"][0]["partition_responses"][0]["error_code"] == 0
        other.close()
        at_leader.close()
    finally:
        cluster.stop()


def _connects(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
