"""The keyword options of Producer, Consumer and Admin: a misspelt one is an error that
names it and the nearest valid option (``Producer(lingr_ms=5)`` -> ``unknown option
'lingr_ms' (did you mean 'linger_ms'?)``), raised at construction, before any I/O."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from raftlog.errors import did_you_mean

from .errors import ClientError
from .security import OPTION_NAMES


class UnknownOptionError(ClientError, TypeError):
    """A keyword option the class does not have (a TypeError, as Python's own for an
    unexpected keyword argument)."""


class InvalidOptionError(ClientError, TypeError):
    """An option given a value of the wrong kind (``fetch_sessions="no"``, which Python
    would take as true)."""


def option_names(cls: type) -> frozenset:
    """Every keyword option ``cls`` takes: its named parameters and the security options."""
    params = inspect.signature(cls.__init__).parameters.values()
    named = {p.name for p in params
             if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(named | set(OPTION_NAMES))


def check_options(cls: type, given: Mapping) -> None:
    """Raise UnknownOptionError naming every option of ``given`` that ``cls`` does not
    take, each with the nearest valid name when one is near."""
    valid = option_names(cls)
    unknown = sorted(set(given) - valid)
    if unknown:
        what = "; ".join(f"unknown option {name!r}{did_you_mean(name, valid)}" for name in unknown)
        raise UnknownOptionError(f"{cls.__name__}: {what}")


def check_option_types(cls: type, values: Mapping) -> None:
    """Raise InvalidOptionError for a yes/no option (annotated ``bool``, or ``bool |
    None`` where None picks the default) given anything but True, False, 0 or 1: a
    string such as ``"false"`` is truthy, so it would turn the option on silently."""
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.annotation in ("bool", bool, "bool | None") and p.name in values:
            v = values[p.name]
            if v is None and p.annotation == "bool | None":
                continue  # (None: the default chosen from other options)
            if not isinstance(v, (bool, int)) or v not in (0, 1):
                raise InvalidOptionError(
                    f"{cls.__name__}: option {p.name!r} takes True or False, not {v!r}")
