"""SCRAM credentials and ACL bindings in the metadata state machine and its snapshots."""

from __future__ import annotations

from raftlog import scram
from raftlog.acl import binding
from raftlog.errors import ErrorCode
from raftlog.metadata import records as R
from raftlog.metadata.state import MetadataState, apply, restore, snapshot


def upsert(user, password, mech=scram.SCRAM_SHA_256):
    c = scram.derive_credential(mech, password)
    return R.UpsertScramCredential(user, mech, c.salt, c.iterations, c.stored_key, c.server_key)


def test_credentials_upsert_delete_and_survive_snapshots():
    s = MetadataState()
    s, res = apply(s, R.decode(R.encode(upsert("alice", "pw1"))), term=1)
    assert res.ok
    s, res = apply(s, upsert("alice", "pw2", scram.SCRAM_SHA_512), term=1)
    cred = s.scram[("alice", scram.SCRAM_SHA_512)]
    assert scram.verify_plain(cred, "pw2") and not scram.verify_plain(cred, "pw1")
    assert b"pw2" not in snapshot(s)
    assert restore(snapshot(s)) == s
    s, res = apply(s, R.DeleteScramCredential("alice", scram.SCRAM_SHA_256), term=1)
    assert res.ok and ("alice", scram.SCRAM_SHA_256) not in s.scram
    s2, res = apply(s, R.DeleteScramCredential("alice", scram.SCRAM_SHA_256), term=1)
    assert not res.ok and res.code == ErrorCode.RESOURCE_NOT_FOUND and s2 is s


def test_bad_credentials_are_rejected_with_reasons():
    good = upsert("u", "pw")
    for bad, why in [
        (R.UpsertScramCredential("", good.mechanism, good.salt, good.iterations,
                                 good.stored_key, good.server_key), "user name"),
        (R.UpsertScramCredential("u", "MD5", good.salt, 4096, good.stored_key,
                                 good.server_key), "unknown SCRAM"),
        (R.UpsertScramCredential("u", good.mechanism, good.salt, 100, good.stored_key,
                                 good.server_key), "iteration"),
        (R.UpsertScramCredential("u", good.mechanism, b"", 4096, good.stored_key,
                                 good.server_key), "salt"),
        (R.UpsertScramCredential("u", good.mechanism, good.salt, 4096, b"short",
                                 good.server_key), "keys"),
    ]:
        s, res = apply(MetadataState(), bad, term=1)
        assert not res.ok and why in res.error and not s.scram


def test_acls_create_delete_idempotent_and_sorted():
    a = binding("User:a", "topic", "t", operation="read").as_tuple()
    b = binding("User:b", "group", "g-", "prefixed", "read").as_tuple()
    s, res = apply(MetadataState(), R.CreateAcls((b, a)), term=1)
    assert res.ok and res.value == 2
    s, res = apply(s, R.decode(R.encode(R.CreateAcls((a,)))), term=1)
    assert res.ok and res.value == 0 and len(s.acls) == 2
    assert [x.as_tuple() for x in s.acls] == sorted([a, b])
    assert restore(snapshot(s)) == s
    s, res = apply(s, R.DeleteAcls((a, a)), term=1)
    assert res.ok and res.value == 1 and [x.as_tuple() for x in s.acls] == [b]


def test_invalid_acl_is_rejected_whole():
    good = binding("User:a", "topic", "t").as_tuple()
    s, res = apply(MetadataState(), R.CreateAcls((good, ("User:a", "group", "g", "literal",
                                                          "write", "allow"))), term=1)
    assert not res.ok and "does not apply to a group" in res.error and s.acls == ()


def test_snapshot_without_security_is_unchanged():
    assert b"scram" not in snapshot(MetadataState()) and b"acls" not in snapshot(MetadataState())


def test_the_cluster_secret_is_written_once_and_kept_in_snapshots():
    s = MetadataState()
    assert b"cluster_secret" not in snapshot(s)
    s1, res = apply(s, R.SetClusterSecret(b"a" * 32), term=1)
    assert res.ok and s1.cluster_secret == b"a" * 32
    s2, res = apply(s1, R.SetClusterSecret(b"b" * 32), term=1)  # a racing second node
    assert res.ok and s2.cluster_secret == b"a" * 32
    _, res = apply(s, R.SetClusterSecret(b"short"), term=1)
    assert not res.ok and "16..64 bytes" in res.error
    assert restore(snapshot(s2)) == s2
    assert R.decode(R.encode(R.SetClusterSecret(b"x" * 16))) == R.SetClusterSecret(b"x" * 16)
