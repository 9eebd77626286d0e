"""Named listeners and their security protocols (Kafka's listener keys), pure.

Kafka's four keys, with Kafka's meaning::

    listeners=CLIENTS://0.0.0.0:9093,REPLICATION://10.0.0.1:9094
    advertised.listeners=CLIENTS://node1.example.com:9093,REPLICATION://10.0.0.1:9094
    listener.security.protocol.map=CLIENTS:SASL_SSL,REPLICATION:SSL
    inter.broker.listener.name=REPLICATION

A listener without a name in the map must be named after its protocol
(``SASL_SSL://host:port``). ``host:port`` without a name is a PLAINTEXT listener
(raftlog's older form). The inter-broker listener defaults to the first listener.

A listener that is not encrypted (PLAINTEXT, SASL_PLAINTEXT) on an address other
than loopback is refused unless ``allow.plaintext.listeners=true``: records and (with
SASL/PLAIN) passwords would cross the network in the clear.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

from raftlog.errors import ConfigError


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = {p.value: p for p in SecurityProtocol}
MAX_LISTENERS = 16


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _address(key: str, item: str) -> tuple[str, int]:
    host, sep, port = item.rpartition(":")
    if not sep:
        raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
    host = host.strip("[]")
    if not host or any(c in host for c in " /\\,"):
        raise ConfigError(f"{key}: bad host in {item!r}")
    if host[0].isdigit() or ":" in host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{key}: {host!r} is not a valid IP address") from None
    try:
        n = int(port)
    except ValueError:
        raise ConfigError(f"{key}: port {port!r} is not an integer") from None
    if not 0 <= n <= 65535:
        raise ConfigError(f"{key}: port {n} is outside 0..65535")
    return host, n


def parse_protocol_map(key: str, value: str | None) -> dict[str, SecurityProtocol]:
    """'A:SSL,B:PLAINTEXT' -> {name: protocol}; None or '' -> protocols named after themselves."""
    if not value or not value.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, SecurityProtocol] = {}
    for item in filter(None, (x.strip() for x in value.split(","))):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(f"{key}: {item!r} is not NAME:PROTOCOL")
        if proto not in DEFAULT_PROTOCOL_MAP:
            raise ConfigError(f"{key}: {proto!r} is not one of "
                              f"{', '.join(DEFAULT_PROTOCOL_MAP)}")
        if name in out:
            raise ConfigError(f"{key}: listener {name} appears twice")
        out[name] = DEFAULT_PROTOCOL_MAP[proto]
    return out


def parse_listeners(key: str, value: str, protocols: dict[str, SecurityProtocol]) -> tuple:
    """'NAME://host:port,...' -> (Listener, ...). Names unique, every name mapped."""
    out: list[Listener] = []
    for item in filter(None, (x.strip() for x in str(value).split(","))):
        if "://" in item:
            name, _, addr = item.partition("://")
            name = name.strip().upper()
        else:
            name, addr = "PLAINTEXT", item
        if not name:
            raise ConfigError(f"{key}: {item!r} has an empty listener name")
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(f"{key}: listener {name} has no security protocol (add it to "
                              "listener.security.protocol.map)")
        host, port = _address(key, addr)
        if any(x.name == name for x in out):
            raise ConfigError(f"{key}: listener {name} appears twice")
        out.append(Listener(name, proto, host, port))
    if not out:
        raise ConfigError(f"{key}: names no listener")
    if len(out) > MAX_LISTENERS:
        raise ConfigError(f"{key}: more than {MAX_LISTENERS} listeners")
    ports = [(x.host, x.port) for x in out if x.port]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"{key}: two listeners share one address")
    return tuple(out)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """The validated listener keys of a node."""

    listeners: tuple  # of Listener, where the node binds
    advertised: tuple  # of Listener, what clients and peers are told (same names, order)
    inter_broker: str  # the listener name brokers use to reach each other

    def by_name(self, name: str) -> Listener:
        return next(x for x in self.listeners if x.name == name)

    def advertised_by_name(self, name: str) -> Listener:
        return next(x for x in self.advertised if x.name == name)

    @property
    def inter_broker_protocol(self) -> SecurityProtocol:
        return self.by_name(self.inter_broker).protocol


def resolve(listeners: str, advertised: str | None = None, protocol_map: str | None = None,
            inter_broker_name: str | None = None, *,
            allow_plaintext: bool = False) -> ListenerConfig:
    """Validate the four keys together. Raises ConfigError: one line naming the key."""
    protocols = parse_protocol_map("listener.security.protocol.map", protocol_map)
    bound = parse_listeners("listeners", listeners, protocols)
    if not allow_plaintext:
        for x in bound:
            if not x.protocol.tls and not is_loopback(x.host):
                raise ConfigError(
                    f"listeners: {x} is {x.protocol.value} (unencrypted) on a non-loopback "
                    "address: use SSL or SASL_SSL, or set allow.plaintext.listeners=true")
    if advertised:
        adv = parse_listeners("advertised.listeners", advertised, protocols)
        names = {x.name for x in bound}
        for x in adv:
            if x.name not in names:
                raise ConfigError(f"advertised.listeners: {x.name} is not in listeners")
        by_name = {x.name: x for x in adv}
        for x in adv:
            if x.host in ("0.0.0.0", "::"):
                raise ConfigError(f"advertised.listeners: {x} is not an address peers can "
                                  "reach")
        adv = tuple(by_name.get(x.name, x) for x in bound)
    else:
        adv = bound
    name = (inter_broker_name or "").strip().upper() or bound[0].name
    if name not in {x.name for x in bound}:
        raise ConfigError(f"inter.broker.listener.name: {name} is not in listeners")
    return ListenerConfig(bound, adv, name)
