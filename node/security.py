"""Where a node keeps SCRAM credentials and ACLs, and the admin APIs over them.

They live in the metadata quorum (records UpsertScramCredential,
DeleteScramCredential, CreateAcls, DeleteAcls; see metadata/state.py), a single
node's too (the only voter of its own quorum; what such a node kept in
``<data_dir>/__meta/security.snapshot`` before is migrated by
node/local_metadata.py). Every write is durable when its method returns.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from raftlog import acl as A
from raftlog import scram as S
from raftlog.errors import ApiError, ErrorCode
from raftlog.metadata import records as R
from raftlog.metadata.state import MetadataState
from raftlog.protocol import NamedResult

from .config import NodeConfig

#: Bytes of a new cluster secret (metadata/records.py SetClusterSecret).
CLUSTER_SECRET_BYTES = 32
#: What the fake-salt key is derived for (the cluster secret may key other things).
FAKE_SALT_LABEL = b"raftlog: fake SCRAM salts of unknown users"


class Security:
    """Credentials and ACLs of the node, and the admin API handlers over them."""

    def __init__(self, config: NodeConfig, store):
        self.config = config
        self._quorum_store = store  # node/quorum_store.py
        self._authorizer: tuple = (None, None)  # (acls tuple, Authorizer)

    @property
    def state(self) -> MetadataState:
        return self._quorum_store.quorum.state

    def credential(self, user: str, mechanism: str) -> S.ScramCredential | None:
        return self.state.scram.get((user, mechanism))

    def authorizer(self) -> A.Authorizer:
        """The authorizer of the current ACLs (rebuilt only when they change)."""
        acls = self.state.acls
        cached_acls, authorizer = self._authorizer
        if cached_acls is not acls:
            authorizer = A.Authorizer(acls, super_users=self.config.super_users,
                                      allow_if_no_acls=self.config.allow_everyone_if_no_acl_found)
            self._authorizer = (acls, authorizer)
        return authorizer

    def propose(self, record):
        """Apply a record durably (blocking: a quorum write). Raises ApiError."""
        result = self._quorum_store.propose(record)
        if not result.ok:
            raise ApiError(ErrorCode(result.code or ErrorCode.INVALID_REQUEST), result.error)
        return result

    def ensure_inter_broker_user(self) -> None:
        """Store the inter-broker user's credential unless the one stored matches the
        configured password (blocking). Nodes must agree on the password."""
        user, password = self.config.inter_broker_sasl_username, self.config.inter_broker_sasl_password
        if not user or not password:
            return
        for mech in self.config.sasl_enabled_mechanisms:
            if mech not in S.SCRAM_MECHANISMS:
                continue
            cred = self.credential(user, mech)
            if cred is not None and S.verify_plain(cred, password):
                continue
            c = S.derive_credential(mech, password)
            self.propose(R.UpsertScramCredential(user, mech, c.salt, c.iterations,
                                                 c.stored_key, c.server_key))

    def ensure_cluster_secret(self) -> None:
        """Write the cluster's secret unless one is stored (blocking: a quorum write;
        when two nodes race, the first committed wins on every node). Raises ApiError."""
        if not self.state.cluster_secret:
            self.propose(R.SetClusterSecret(secrets.token_bytes(CLUSTER_SECRET_BYTES)))

    def fake_scram_secret(self) -> bytes:
        """The key of unknown users' fake SCRAM salts (raftlog/scram.py ScramServer):
        derived from the replicated cluster secret, so every node of the cluster, before
        and after a restart, answers an unknown user alike and nobody can tell which
        users exist by comparing answers. b"" until the cluster secret is known."""
        secret = self.state.cluster_secret
        if not secret:
            return b""
        return hmac.new(secret, FAKE_SALT_LABEL, hashlib.sha256).digest()

    # ------------------------------------------------------------------ admin handlers

    def describe_users(self, req):
        wanted = req.fields["users"]
        rows: dict[str, list] = {}
        for (user, mech), cred in sorted(self.state.scram.items()):
            if wanted is None or user in wanted:
                rows.setdefault(user, []).append([mech, cred.iterations])
        return {"users": [[u, m] for u, m in rows.items()]}, []

    def alter_users(self, req):
        """Upsert and delete credentials: one result per user, in request order."""
        results = []
        for user, mech, salt, iterations, stored, server in req.fields["upsertions"]:
            results.append(self._one(user, R.UpsertScramCredential(
                user, mech, salt, iterations, stored, server)))
        for user, mech in req.fields["deletions"]:
            results.append(self._one(user, R.DeleteScramCredential(user, mech)))
        return {"results": results}, []

    def _one(self, name: str, record) -> NamedResult:
        try:
            self.propose(record)
        except ApiError as e:
            return NamedResult(name, int(e.code), e.message)
        return NamedResult(name, 0, "")

    def describe_acls(self, req):
        matching = self._matching(req.fields)
        return {"acls": [list(b.as_tuple()) for b in matching]}, []

    def _matching(self, fields) -> list:
        try:
            return [b for b in self.state.acls if A.matches_filter(
                b, principal=fields["principal"], resource_type=fields["resource_type"],
                resource_name=fields["resource_name"], pattern_type=fields["pattern_type"],
                operation=fields["operation"], permission=fields["permission"])]
        except A.AclError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None

    def create_acls(self, req):
        try:
            bindings = tuple(A.from_tuple(t).as_tuple() for t in req.fields["acls"])
        except A.AclError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        result = self.propose(R.CreateAcls(bindings))
        return {"created": result.value}, []

    def delete_acls(self, req):
        """Delete every binding matching the filter (fields left out match anything)."""
        matching = self._matching(req.fields)
        if matching:
            self.propose(R.DeleteAcls(tuple(b.as_tuple() for b in matching)))
        return {"deleted": [list(b.as_tuple()) for b in matching]}, []
