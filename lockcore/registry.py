"""Strategy names (as in CONTRACT.md) -> lock classes, imported lazily.

``create("token", client, "stock:sku-1", ttl_ms=10_000)`` is the one way the web app,
the load tests, the labs and the benchmarks build a lock, so all of them can be
switched between strategies by name.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, NamedTuple

from .base import DistributedLock


class StrategyInfo(NamedTuple):
    name: str
    safe: bool
    origin: str
    summary: str


#: name -> "module:Class"; the order is the teaching order, unsafe first
_STRATEGIES: dict[str, str] = {
    "local": "lockcore.strategies.local:LocalLock",
    "naive": "lockcore.strategies.naive:NaiveLock",
    "setnx": "lockcore.strategies.setnx:SetnxLock",
    "setnx-expire": "lockcore.strategies.setnx_expire:SetnxExpireLock",
    "getset": "lockcore.strategies.getset:GetsetLock",
    "token": "lockcore.strategies.token:TokenLock",
    "fair": "lockcore.strategies.fair:FairLock",
    "multi": "lockcore.strategies.multi:MultiLock",
    "redlock": "lockcore.strategies.redlock:RedLock",
    "zookeeper": "lockcore.strategies.zookeeper:ZooKeeperLock",
}


def names() -> list[str]:
    return list(_STRATEGIES)


def lock_class(name: str) -> type[DistributedLock]:
    if not isinstance(name, str):  # a list was "unhashable type: 'list'" (a lockcore audit)
        raise TypeError(f"a lock strategy is named by a string (one of "
                        f"{', '.join(_STRATEGIES)}), not {type(name).__name__} {name!r}")
    try:
        target = _STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown lock strategy {name!r}; choose one of {', '.join(_STRATEGIES)}"
        ) from None
    module_name, _, attr = target.partition(":")
    cls: type[DistributedLock] = getattr(importlib.import_module(module_name), attr)
    return cls


def strategies() -> list[StrategyInfo]:
    """Every strategy with whether it is safe, the seed it comes from and one line on it."""
    infos = []
    for name in _STRATEGIES:
        cls = lock_class(name)
        infos.append(StrategyInfo(name, cls.safe, cls.origin, cls.summary))
    return infos


def create(strategy: str, backend: Any, resource: Any, **options: Any) -> DistributedLock:
    """Build a lock of ``strategy`` on ``backend`` for ``resource``.

    :param backend: a redis-py client; a list of clients for ``redlock``; a kazoo client
        or a hosts string for ``zookeeper``; ignored (may be None) for ``local``.
    :param resource: the name to lock; a list of names for ``multi``.
    :param options: ``ttl_ms``, ``wait`` ("poll", "backoff", "notify"), ``poll_ms``,
        ``max_poll_ms`` (backoff's cap), ``watchdog``, ``on_lost``, ``timeout`` (for
        ``with``; None or -1: no limit), ``clock``, and strategy-specific ones documented
        on each class.
    """
    cls = lock_class(strategy)
    try:
        return cls(backend, resource, **options)
    except TypeError as error:
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unexpected is None:
            raise
        # it named a constructor (``DistributedLock.__init__()``), not the strategy
        known = sorted(_option_names(cls))
        raise TypeError(f"{strategy!r} lock: unknown option {unexpected[1]!r}; its options: "
                        f"{', '.join(known)}") from None


def _option_names(cls: type[DistributedLock]) -> set[str]:
    """The keyword options of ``cls`` and of every class its constructor passes them to,
    less those it sets itself (``fixed_options``): ``token`` was said to take
    ``lease_ms``, its base class's, which it refuses (a lockcore audit)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind is parameter.KEYWORD_ONLY:
                names.add(parameter.name)
    return names - cls.fixed_options
