"""Group API handlers over the pure :class:`~raftlog.node.groups.GroupCoordinator`.

Each handler takes the parsed request fields (``Request.fields``, validated by
``raftlog.protocol.REQUEST_SCHEMAS``) and returns the response fields; a
whole-request failure raises :class:`ApiError` (the server answers with its code),
as the handlers in broker.py do. Join, Sync, OffsetCommit and DeleteGroups wait (for
the rebalance, the leader, or the ``__consumer_offsets`` append), so every handler
is async for uniformity.

The node provides two callables:

* ``persist(partition, records) -> awaitable``: append ``records`` ((key bytes,
  value bytes or None), ...) to ``__consumer_offsets``-``partition`` with acks=all
  and return once they are committed; raise ApiError on failure.
  :func:`encode_offsets_batches` builds the batches.
* ``locate(partition) -> (node_id, host, port)``: the leader of that partition,
  the group's coordinator; raise ApiError(COORDINATOR_NOT_AVAILABLE) if none.

and runs :meth:`GroupService.run` in a nursery (timeouts and rebalance deadlines),
plus ``coordinator.begin_loading / replay / finish_loading / unload`` when it gains
or loses leadership of a ``__consumer_offsets`` partition.

Responses (header fields):

* FIND_COORDINATOR ``{"node_id", "host", "port"}``
* JOIN_GROUP ``{"member_id", "generation", "protocol_type", "protocol", "leader",
  "members": [[member_id, group_instance_id, metadata], ...]}`` (members: leader only)
* SYNC_GROUP ``{"assignment", "protocol_type", "protocol"}``
* HEARTBEAT, LEAVE_GROUP ``{}``
* OFFSET_COMMIT ``{"parts": [[topic, partition, error, message], ...]}``
* OFFSET_FETCH ``{"parts": [[topic, partition, offset (-1 none), metadata, leader epoch
  (-1 unknown)], ...]}``

SYNC_GROUP, HEARTBEAT, LEAVE_GROUP and OFFSET_COMMIT take a static member's
``group_instance_id`` (KIP-345): a member replaced by a new instance gets
FENCED_INSTANCE_ID.
* LIST_GROUPS ``{"groups": [[group, protocol_type, state], ...]}``
* DESCRIBE_GROUPS ``{"groups": [{"group", "error", "message", "state", "protocol_type",
  "protocol", "generation", "leader", "members": [[member_id, instance_id, client_id,
  client_host, metadata, assignment], ...]}, ...]}``
* DELETE_GROUPS ``{"results": [[group, error, message], ...]}``
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable

import trio

from raftlog import records as batch_format
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api, NamedResult, PartitionResult

from .clock import SteadyWallClock
from .groups import GroupCoordinator, Outcome, Persist, Reply

#: Longest a JoinGroup or SyncGroup waits beyond the group's own deadlines.
WAIT_MARGIN_S = 5.0
#: Longest the ticker sleeps while groups are loaded: a new deadline is noticed at
#: least this often. With no group at all it sleeps until a group API call or a load.
TICK_MAX_S = 0.1
#: Bound on records per __consumer_offsets batch (a commit of many partitions).
RECORDS_PER_BATCH_MAX = 10_000

Persister = Callable[[int, tuple], Awaitable[None]]
Locator = Callable[[int], tuple[int, str, int]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


def encode_offsets_batches(records: tuple) -> list[bytes]:
    """Record batches (keys and values) for a Persist effect's records; tombstones
    have a None value. One batch per RECORDS_PER_BATCH_MAX records."""
    out = []
    for i in range(0, len(records), RECORDS_PER_BATCH_MAX):
        chunk = records[i : i + RECORDS_PER_BATCH_MAX]
        out.append(batch_format.encode_batch([v for _, v in chunk], [k for k, _ in chunk],
                                             timestamp=_wall_ms()))
    return out


class _Waiter:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.reply: Reply | None = None


class GroupService:
    """Runs the coordinator for the node: answers group APIs, persists, ticks."""

    def __init__(self, coordinator: GroupCoordinator, *, persist: Persister, locate: Locator,
                 clock_ms: Callable[[], int] | None = None,
                 deleted_topic: Callable[[str], bool] | None = None,
                 partition_exists: Callable[[str, int], bool] | None = None):
        """``clock_ms``: the coordinator's clock (default a SteadyWallClock: sessions
        and rebalance deadlines unmoved by steps of the wall clock, see node/clock.py).
        ``deleted_topic(name)``: True for a topic deleted (and not re-created): offset
        commits for it are refused with UNKNOWN_TOPIC_OR_PARTITION, as Kafka's, so a
        consumer still running does not bring back the offsets its deletion removed.
        ``partition_exists(topic, partition)``: False for a partition the metadata does
        not have: its commit is refused with UNKNOWN_TOPIC_OR_PARTITION too (Kafka's)."""
        self.coordinator = coordinator
        self._deleted_topic = deleted_topic
        self._partition_exists = partition_exists
        self._persist = persist
        self._locate = locate
        self._clock_ms = clock_ms if clock_ms is not None else SteadyWallClock()
        self._tokens = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        # Effects run one list at a time, in the order they were made: appends to
        # __consumer_offsets keep the order of the state changes they record.
        self._effects_lock = trio.Lock()
        #: set by :meth:`poke`: a group may exist now (the ticker sleeps on it when none does)
        self._poked = trio.Event()

    def now_ms(self) -> int:
        """The coordinator's clock (what every operation of it is given)."""
        return self._clock_ms()

    # ------------------------------------------------------------------ plumbing

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Tick the coordinator forever: session expiry, rebalance deadlines."""
        task_status.started()
        while True:
            now = self._clock_ms()
            await self.run_effects(self.coordinator.tick(now))  # failures went to the replies
            deadline = self.coordinator.next_deadline_ms()
            if deadline is None and not self.coordinator.groups:
                # nothing can time out until a group exists: an idle node does not wake
                await self._poked.wait()
                self._poked = trio.Event()
                continue
            wait_s = TICK_MAX_S if deadline is None else (deadline - now) / 1000
            await trio.sleep(min(max(wait_s, 0.001), TICK_MAX_S))

    def poke(self) -> None:
        """A group may exist now (a group API call, a loaded partition): the ticker
        looks again."""
        self._poked.set()

    async def run_effects(self, effects) -> ApiError | None:
        """Persist, then deliver replies; replies after a failed persist get its error,
        which is also returned."""
        if not effects:
            return None
        async with self._effects_lock:
            failure: ApiError | None = None
            for e in effects:
                if isinstance(e, Persist):
                    if failure is None:
                        try:
                            await self._persist(e.partition, e.records)
                            self.coordinator.persisted(e)
                        except ApiError as err:
                            failure = _coordinator_error(err)
                elif failure is not None and e.error is ErrorCode.NONE:
                    self._deliver(Reply(e.token, failure.code, None, failure.message))
                else:
                    self._deliver(e)
            return failure

    def _deliver(self, reply: Reply) -> None:
        w = self._waiters.get(reply.token)
        if w is not None:  # else the request was cancelled (client went away)
            w.reply = reply
            w.event.set()

    async def _wait(self, token: int, outcome: Outcome, timeout_s: float) -> dict:
        try:
            failure = await self.run_effects(outcome.effects)
            if failure is not None and outcome.response is not None:
                raise failure
            if outcome.response is not None:
                return outcome.response
            w = self._waiters[token]
            with trio.move_on_after(timeout_s):
                await w.event.wait()
            if w.reply is None:
                raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS, "the rebalance did not finish in time")
            if w.reply.error is not ErrorCode.NONE:
                raise ApiError(w.reply.error, w.reply.message)
            return w.reply.response
        finally:
            self._waiters.pop(token, None)

    def _token(self) -> int:
        t = next(self._tokens)
        self._waiters[t] = _Waiter()
        return t

    # ------------------------------------------------------------------ handlers

    async def find_coordinator(self, fields: dict) -> dict:
        key = fields["key"]
        if not key:
            raise ApiError(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        node_id, host, port = self._locate(self.coordinator.partition_for(key))
        return {"node_id": node_id, "host": host, "port": port}

    async def join_group(self, fields: dict) -> dict:
        t = self._token()
        try:
            outcome = self.coordinator.join(
                fields["group"], fields["member_id"], token=t, now_ms=self._clock_ms(),
                protocols=fields["protocols"], session_timeout_ms=fields["session_timeout_ms"],
                rebalance_timeout_ms=fields["rebalance_timeout_ms"],
                group_instance_id=fields["group_instance_id"],
                # (the native JOIN_GROUP carries client_id; the server adds client_host)
                protocol_type=fields.get("protocol_type", "consumer"),
                client_id=fields.get("client_id", ""), client_host=fields.get("client_host", ""),
            )
        except ApiError:
            self._waiters.pop(t, None)
            raise
        timeout_s = fields["rebalance_timeout_ms"] / 1000 + \
            self.coordinator.config.initial_rebalance_delay_ms / 1000 + WAIT_MARGIN_S
        return await self._wait(t, outcome, timeout_s)

    async def sync_group(self, fields: dict) -> dict:
        t = self._token()
        try:
            outcome = self.coordinator.sync(
                fields["group"], fields["member_id"], fields["generation"], token=t,
                now_ms=self._clock_ms(), assignments=dict(fields["assignments"]) or None,
                group_instance_id=fields.get("group_instance_id"),
            )
        except ApiError:
            self._waiters.pop(t, None)
            raise
        g = self.coordinator.groups.get(fields["group"])
        rebalance_ms = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) if g else 0
        return await self._wait(t, outcome, rebalance_ms / 1000 + WAIT_MARGIN_S)

    async def heartbeat(self, fields: dict) -> dict:
        out = self.coordinator.heartbeat(fields["group"], fields["member_id"],
                                         fields["generation"], now_ms=self._clock_ms(),
                                         group_instance_id=fields.get("group_instance_id"))
        return out.response

    async def leave_group(self, fields: dict) -> dict:
        out = self.coordinator.leave(fields["group"], fields["member_id"], now_ms=self._clock_ms(),
                                     group_instance_id=fields.get("group_instance_id"))
        await self.run_effects(out.effects)
        return out.response

    async def offset_commit(self, fields: dict) -> dict:
        offsets, refused, missing = fields["offsets"], [], []
        if self._deleted_topic is not None:
            refused = [o for o in offsets if self._deleted_topic(o[0])]
            if refused:
                offsets = [o for o in offsets if not self._deleted_topic(o[0])]
        if self._partition_exists is not None:
            missing = [o for o in offsets if not self._partition_exists(o[0], o[1])]
            if missing:
                offsets = [o for o in offsets if self._partition_exists(o[0], o[1])]
        out = self.coordinator.commit_offsets(
            fields["group"], fields["member_id"], fields["generation"], offsets,
            now_ms=self._clock_ms(), group_instance_id=fields.get("group_instance_id"),
        )
        failure = await self.run_effects(out.effects)
        parts = out.response["parts"]
        if failure is not None:
            # nothing was committed: every partition that passed validation gets the error
            parts = [r if r.error else r._replace(error=int(failure.code), message=failure.message)
                     for r in parts]
        return {"parts": parts + [
            PartitionResult(o[0], o[1], int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            f"topic {o[0]!r} was deleted: its offsets were deleted with it")
            for o in refused] + [
            PartitionResult(o[0], o[1], int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            f"there is no partition {o[0]}-{o[1]}: commit offsets only for "
                            "partitions of existing topics")
            for o in missing]}

    async def offset_fetch(self, fields: dict) -> dict:
        return {"parts": self.coordinator.fetch_offsets(fields["group"], fields["parts"])}

    async def list_groups(self, fields: dict) -> dict:
        return {"groups": self.coordinator.list_groups()}

    async def describe_groups(self, fields: dict) -> dict:
        out = []
        for gid in fields["groups"]:
            try:
                out.append({**self.coordinator.describe(gid), "error": 0, "message": ""})
            except ApiError as e:
                out.append({"group": gid, "error": int(e.code), "message": e.message,
                            "state": "", "protocol_type": "", "protocol": "", "generation": -1,
                            "leader": None, "members": []})
        return {"groups": out}

    async def delete_groups(self, fields: dict) -> dict:
        results = []
        for gid in fields["groups"]:
            try:
                out = self.coordinator.delete_group(gid, self._clock_ms())
                failure = await self.run_effects(out.effects)
                if failure is not None:
                    raise failure
                results.append(NamedResult(gid, 0, ""))
            except ApiError as e:
                results.append(NamedResult(gid, int(e.code), e.message))
        return {"results": results}

    async def offset_delete(self, fields: dict) -> dict:
        out = self.coordinator.delete_offsets(fields["group"], fields["parts"])
        failure = await self.run_effects(out.effects)
        if failure is not None:
            raise failure
        return out.response

    async def handle(self, api: Api, fields: dict) -> dict:
        """Dispatch one group API (see :data:`GROUP_APIS`)."""
        handler = _HANDLERS.get(api)
        if handler is None:
            raise ApiError(ErrorCode.UNKNOWN_API, f"api {Api(api).name} is not a group api")
        self.poke()  # (the ticker runs once the handler waits: the group exists by then)
        try:
            return await handler(self, fields)
        finally:
            self.poke()


def _coordinator_error(err: ApiError) -> ApiError:
    """An append failure as the client of the group APIs should see it."""
    if err.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR):
        return ApiError(ErrorCode.NOT_COORDINATOR, err.message)
    if err.code is ErrorCode.REQUEST_TIMED_OUT:
        return err
    return ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, err.message)


_HANDLERS = {
    Api.FIND_COORDINATOR: GroupService.find_coordinator,
    Api.JOIN_GROUP: GroupService.join_group,
    Api.SYNC_GROUP: GroupService.sync_group,
    Api.HEARTBEAT: GroupService.heartbeat,
    Api.LEAVE_GROUP: GroupService.leave_group,
    Api.OFFSET_COMMIT: GroupService.offset_commit,
    Api.OFFSET_FETCH: GroupService.offset_fetch,
    Api.LIST_GROUPS: GroupService.list_groups,
    Api.DESCRIBE_GROUPS: GroupService.describe_groups,
    Api.DELETE_GROUPS: GroupService.delete_groups,
    Api.OFFSET_DELETE: GroupService.offset_delete,
}

#: The APIs this module serves (routed to it by node/routes.py).
GROUP_APIS = frozenset(_HANDLERS)
