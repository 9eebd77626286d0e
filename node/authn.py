"""Authentication of a connection: SASL state per connection, failure rate limits. No I/O.

On a SASL listener a connection must authenticate before any API but ApiVersions:

    SASL_HANDSHAKE {mechanism}      -> {mechanisms}      (once)
    SASL_AUTHENTICATE {auth: bytes} -> {auth: bytes}     (SCRAM: twice; PLAIN: once)

:class:`SaslSession` follows those steps and raises :class:`ApiError` (ILLEGAL_SASL_STATE,
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED) on anything else; the server
answers with the error and closes the connection. :class:`FailureLimiter` counts
failed authentications per peer address and refuses new connections from an address
that failed too often lately (bounded memory: oldest addresses are forgotten first).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from raftlog import scram
from raftlog.errors import ApiError, ErrorCode
from raftlog.protocol import Api

ANONYMOUS = "User:ANONYMOUS"
#: Failed authentications from one address within FAILURE_WINDOW_S before it is blocked.
MAX_FAILURES_PER_ADDRESS = 5
FAILURE_WINDOW_S = 60.0
BLOCK_S = 30.0
#: Addresses remembered at most (the oldest is forgotten first).
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
                 fake_secret: Callable[[], bytes] | None = None):
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self._fake_secret = fake_secret
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
                mechanism, lambda user: self._lookup(user, mechanism), fake_secret=fake_secret)
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

    def _plain(self, data: bytes) -> bool:
        _, user, password = scram.parse_plain(data)
        for mech in (scram.SCRAM_SHA_512, scram.SCRAM_SHA_256):
            cred = self._lookup(user, mech)
            if cred is not None:
                if scram.verify_plain(cred, password):
                    self.principal = "User:" + user
                    return True
                break
        raise scram.ScramError("invalid credentials")


class FailureLimiter:
    """Failed authentications per address: ``blocked(addr, now)`` after too many."""

    def __init__(self, max_failures: int = MAX_FAILURES_PER_ADDRESS,
                 window_s: float = FAILURE_WINDOW_S, block_s: float = BLOCK_S,
                 max_addresses: int = MAX_TRACKED_ADDRESSES):
        assert max_failures >= 1 and max_addresses >= 1
        self.max_failures, self.window_s, self.block_s = max_failures, window_s, block_s
        self.max_addresses = max_addresses
        #: addr -> (failure times within the window, blocked until)
        self._seen: collections.OrderedDict[str, tuple[collections.deque, float]] = (
            collections.OrderedDict())

    def blocked(self, addr: str, now: float) -> bool:
        entry = self._seen.get(addr)
        return entry is not None and entry[1] > now

    def record_failure(self, addr: str, now: float) -> bool:
        """Count a failure; True when the address is blocked from now on."""
        entry = self._seen.pop(addr, None)
        times, until = entry if entry is not None else (
            collections.deque(maxlen=self.max_failures), 0.0)
        while times and times[0] <= now - self.window_s:
            times.popleft()
        times.append(now)
        if len(times) >= self.max_failures:
            until = now + self.block_s
            times.clear()
        self._seen[addr] = (times, until)
        while len(self._seen) > self.max_addresses:
            self._seen.popitem(last=False)
        return until > now
