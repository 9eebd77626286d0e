"""Authentication of a connection: SASL state per connection, failure rate limits. No I/O.

On a SASL listener a connection must authenticate before any API but ApiVersions:

    SASL_HANDSHAKE {mechanism}      -> {mechanisms}      (once)
    SASL_AUTHENTICATE {auth: bytes} -> {auth: bytes}     (SCRAM: twice; PLAIN: once)

:class:`SaslSession` follows those steps and raises :class:`ApiError` (ILLEGAL_SASL_STATE,
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED) on anything else; the server
answers with the error and closes the connection. :class:`FailureLimiter` counts
failed logins per (address, user) and per address; a login blocked by it is refused
before its password is checked, with a message saying for how long (bounded memory:
the oldest entries are forgotten first).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

from raftlog import scram
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

ANONYMOUS = "User:ANONYMOUS"
#: Failed logins as one user from one address within FAILURE_WINDOW_S before that user
#: is blocked from that address (connection.failed.authentication.max).
MAX_FAILURES_PER_USER = 5
#: Failed logins from one address, whatever the users, before the whole address is
#: blocked (connection.failed.authentication.max.per.address): above the per-user
#: bound, so one client's wrong password does not lock out the others on its host.
MAX_FAILURES_PER_ADDRESS = 20
FAILURE_WINDOW_S = 60.0
BLOCK_S = 30.0
#: (address, user) pairs, and addresses, remembered at most (the oldest is forgotten
#: first).
MAX_TRACKED_ADDRESSES = 10_000
#: Steps of one exchange at most (SCRAM takes two authenticate requests).
MAX_SASL_STEPS = 4
#: APIs a connection may use before it has authenticated.
PRE_AUTH_APIS = frozenset({Api.API_VERSIONS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE})

#: (user, mechanism) -> the user's stored credential for it, or None.
Lookup = Callable[[str, str], "scram.ScramCredential | None"]


def _failed(message: str) -> ApiError:
    return ApiError(ErrorCode.SASL_AUTHENTICATION_FAILED, message)


class SaslSession:
    """The SASL state of one connection (see the module docstring)."""

    def __init__(self, mechanisms: tuple, lookup: Lookup, *,
                 fake_secret: Callable[[], bytes] | None = None,
                 admit: Callable[[str], None] | None = None):
        """``fake_secret()``: the key of unknown users' fake SCRAM salts (b"": not known
        yet, the handshake answers BROKER_NOT_AVAILABLE; None: a random one, for tests).
        ``admit(user)``: raises ApiError when ``user`` may not try to log in now
        (FailureLimiter.check_login); called before the password is checked, possibly
        from a worker thread."""
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._admit = admit
        #: the user name the client gave (None until it gave one)
        self.user: str | None = None
        self.mechanism: str | None = None
        self.principal: str | None = None  # "User:<name>" once authenticated
        self._scram: scram.ScramServer | None = None
        self._steps = 0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def check_api(self, api: Api) -> None:
        """Raise ILLEGAL_SASL_STATE for an API used before authentication."""
        if self.principal is None and api not in PRE_AUTH_APIS:
            raise ApiError(ErrorCode.ILLEGAL_SASL_STATE,
                           f"{api.name} before SASL authentication: authenticate first")

    def handshake(self, mechanism: str) -> dict:
        if self.mechanism is not None or self.principal is not None:
            raise ApiError(ErrorCode.ILLEGAL_SASL_STATE, "SASL handshake was already done")
        if mechanism not in self.mechanisms:
            raise ApiError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                           f"SASL mechanism {mechanism!r} is not enabled here (enabled: "
                           f"{', '.join(self.mechanisms)})")
        if mechanism in scram.SCRAM_MECHANISMS:
            fake_secret = b""
            if self._fake_secret is not None:
                # never a per-process random salt: it would tell which users exist
                fake_secret = self._fake_secret()
                if not fake_secret:
                    raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE,
                                   "this node does not know the cluster secret yet: retry")
            self._scram = scram.ScramServer(
                mechanism, lambda user: self._login(user, mechanism), fake_secret=fake_secret)
        self.mechanism = mechanism
        return {"mechanisms": list(self.mechanisms)}

    def authenticate(self, data: bytes) -> dict:
        """One SASL_AUTHENTICATE step -> the response fields. May take milliseconds
        (PLAIN derives the salted password): call it off the event loop."""
        if self.mechanism is None:
            raise ApiError(ErrorCode.ILLEGAL_SASL_STATE, "SASL authenticate before the handshake")
        if self.principal is not None:
            raise ApiError(ErrorCode.ILLEGAL_SASL_STATE, "already authenticated")
        self._steps += 1
        if self._steps > MAX_SASL_STEPS:
            raise _failed("too many SASL steps")
        try:
            if self._scram is None:
                return {"auth": b"", "done": self._plain(data)}
            if self._steps == 1:
                return {"auth": self._scram.first(data), "done": False}
            out = self._scram.final(data)
        except scram.ScramError as e:
            msg = str(e)
            raise _failed(msg if msg.startswith("authentication failed")
                          else f"authentication failed ({self.mechanism}): {msg}") from None
        self.principal = "User:" + self._scram.username
        return {"auth": out, "done": True}

    def _login(self, user: str, mechanism: str):
        """The stored credential of ``user`` once the limiter admits them."""
        self.user = user
        if self._admit is not None:
            self._admit(user)
        return self._lookup(user, mechanism)

    def _plain(self, data: bytes) -> bool:
        _, user, password = scram.parse_plain(data)
        for mech in (scram.SCRAM_SHA_512, scram.SCRAM_SHA_256):
            cred = self._login(user, mech)
            if cred is not None:
                if scram.verify_plain(cred, password):
                    self.principal = "User:" + user
                    return True
                break
        raise scram.ScramError("invalid credentials")


class _Counter:
    """Failures per key within a sliding window; a key that reaches the bound is
    blocked for block_s. At most max_keys keys (the least recently failed is forgotten
    first). Reads (:meth:`blocked_for`) may come from a worker thread: they only look
    up one key."""

    def __init__(self, max_failures: int, window_s: float, block_s: float, max_keys: int):
        assert max_failures >= 1 and max_keys >= 1 and window_s > 0 and block_s >= 0
        self.max_failures, self.window_s, self.block_s = max_failures, window_s, block_s
        self.max_keys = max_keys
        #: key -> (failure times within the window, blocked until)
        self._seen: collections.OrderedDict = collections.OrderedDict()

    def blocked_for(self, key, now: float) -> float:
        entry = self._seen.get(key)
        return max(0.0, entry[1] - now) if entry is not None else 0.0

    def add(self, key, now: float) -> bool:
        """Count a failure; True when ``key`` is blocked from now on."""
        entry = self._seen.pop(key, None)
        times, until = entry if entry is not None else (
            collections.deque(maxlen=self.max_failures), 0.0)
        while times and times[0] <= now - self.window_s:
            times.popleft()
        times.append(now)
        if len(times) >= self.max_failures:
            until = now + self.block_s
            times.clear()
        self._seen[key] = (times, until)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
        assert len(self._seen) <= self.max_keys
        return until > now


class FailureLimiter:
    """Failed logins per (address, user), and per address with its own bound.

    ``max_failures`` failed logins as one user from one address within ``window_s``
    block that user from that address for ``block_s``; other users from the address
    (an admin next to a misconfigured client) are not collateral. Separately,
    ``max_failures_per_address`` failed logins from one address, whatever the users
    (one client trying many names), block the whole address. A login refused because
    of a block is not counted again. :meth:`check_login` raises the error that tells
    the client it is blocked and for how long.
    """

    def __init__(self, max_failures: int = MAX_FAILURES_PER_USER,
                 window_s: float = FAILURE_WINDOW_S, block_s: float = BLOCK_S,
                 max_addresses: int = MAX_TRACKED_ADDRESSES,
                 max_failures_per_address: int = MAX_FAILURES_PER_ADDRESS):
        self._users = _Counter(max_failures, window_s, block_s, max_addresses)
        self._addresses = _Counter(max_failures_per_address, window_s, block_s, max_addresses)

    def blocked(self, addr: str, now: float) -> bool:
        """Whether the whole address is blocked."""
        return self._addresses.blocked_for(addr, now) > 0

    def blocked_for(self, addr: str, user: str, now: float) -> float:
        """Seconds ``user`` stays blocked from ``addr`` (0: may try)."""
        return max(self._addresses.blocked_for(addr, now),
                   self._users.blocked_for((addr, user), now))

    def check_login(self, addr: str, user: str, now: float) -> None:
        """Raise SASL_AUTHENTICATION_FAILED saying for how long, when ``user`` may not
        log in from ``addr`` now (checked before the password is)."""
        left = self._addresses.blocked_for(addr, now)
        if left > 0:
            raise _failed(f"too many failed logins from {addr}: blocked for "
                          f"{math.ceil(left)} s")
        left = self._users.blocked_for((addr, user), now)
        if left > 0:
            raise _failed(f"too many failed logins for user {user} from {addr}: blocked "
                          f"for {math.ceil(left)} s")

    def record_failure(self, addr: str, now: float, user: str | None = None) -> bool:
        """Count a failed login (``user``: None when the client never named one);
        True when this failure starts a block of ``user`` (or of the address)."""
        if self.blocked_for(addr, user or "", now) > 0:
            return False  # refused because blocked: not a new guess, not counted
        blocked = self._addresses.add(addr, now)
        if user is not None:
            blocked = self._users.add((addr, user), now) or blocked
        return blocked
