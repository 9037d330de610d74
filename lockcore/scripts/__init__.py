"""Lua scripts shipped as package data, loaded once per client.

Each ``*.lua`` file starts with a header naming ``KEYS``, ``ARGV`` and return values.
``script(client, "token_acquire")`` returns a ``LaneScript`` made once per client:
calling it sends EVALSHA on the client's lane (``lockcore.wire``: one send, one read,
none of redis-py's per-command machinery) and falls back to SCRIPT LOAD on NOSCRIPT.
A client without a lane (a pipeline, a cluster client) gets redis-py's ``Script``
(``NoticingScript``). Either forgets ``loaded``'s marks when Redis answers NOSCRIPT.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from .. import wire

#: Return codes shared by the release/extend scripts, mapped to exceptions by the callers.
OK = 1
NOT_OWNED = 0

_registered: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
#: per connection pool (a cluster client: per client): the scripts ``loaded`` made sure
#: of, cleared by any NOSCRIPT one of ours meets there (``loaded`` says why)
_loaded: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


@functools.cache
def source(name: str) -> str:
    """The text of ``lockcore/scripts/<name>.lua``."""
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every script shipped with the package."""
    return sorted(
        p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".lua")
    )


class LaneScript:
    """One of our scripts on one client, sent on the client's lane. It keeps no
    reference to the client (the cache below is keyed by it: a dropped client must be
    freed, with its connections)."""

    def __init__(self, client: Any, lane: wire.Lane, text: str) -> None:
        self.text = text
        # the sha of the bytes the lane's connections send: the client's encoding
        self.sha: str = hashlib.sha1(client.get_encoder().encode(text)).hexdigest()
        self.lane = lane
        self.marks = loaded_marks(client)

    def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        try:
            return self.lane.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:  # Redis restarted or flushed its scripts: all of them
            self.marks.clear()
            self.lane.call("SCRIPT", "LOAD", self.text)
            return self.lane.call("EVALSHA", self.sha, len(keys), *keys, *args)


def script(client: Any, name: str) -> Any:
    """The script ``name`` on ``client`` (cached per client): a ``LaneScript``, or
    redis-py's ``Script`` for a client without a lane."""
    return registered(client, name, lambda: source(name), make=lambda text: _made(client, text))


def _made(client: Any, text: str) -> Any:
    lane = wire.lane(client)
    return _script_of(client, text) if lane is None else LaneScript(client, lane, text)


class NoticingScript(Script):
    """redis-py's ``Script`` that clears ``loaded``'s marks when Redis answers NOSCRIPT
    (redis-py's own loads the script again, saying nothing)."""

    def __init__(self, client: Any, text: str) -> None:
        super().__init__(client, text)
        self.marks = loaded_marks(client)

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        target = self.registered_client if client is None else client
        if isinstance(target, Pipeline):  # NOSCRIPT is handled at its execute
            return super().__call__(keys, args, client)
        keys, args = keys or [], args or []
        try:
            return target.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:  # Redis restarted or flushed its scripts: all of them
            self.marks.clear()
            self.sha = target.script_load(self.script)
            return target.evalsha(self.sha, len(keys), *keys, *args)


def _script_of(client: Any, text: str) -> Any:
    """A ``NoticingScript`` (a stand-in's ``register_script``), holding its client
    weakly: the cache keeps the script as long as the client lives, and a script holding
    its client kept both alive for good (every short-lived client leaked, with its
    connections)."""
    redis_py = isinstance(client, (Redis, RedisCluster))  # not a stand-in (unit tests')
    made: Any = NoticingScript(client, text) if redis_py else client.register_script(text)
    if getattr(made, "registered_client", None) is not client:
        return made
    try:
        made.registered_client = weakref.proxy(client)
    except TypeError:  # cannot be weakly referenced (nor is it cached)
        pass
    return made


def registered(client: Any, name: str, text: Callable[[], str],
               make: Callable[[str], Any] | None = None) -> Any:
    """The ``Script`` of ``text()`` on ``client`` (or ``make(text())``), made once per
    client and name: making one hashes the text (SHA-1). Other packages' scripts use it
    with a name of their own (the web app's: ``webapp/<name>``). What ``make`` returns
    must not refer to ``client`` strongly (``_script_of``)."""
    try:
        per_client = _registered[client]
    except KeyError:
        per_client = _registered[client] = {}
    except TypeError:  # a client that cannot be weakly referenced: no cache
        return (make or functools.partial(_script_of, client))(text())
    found = per_client.get(name)
    if found is None:
        build = make or functools.partial(_script_of, client)
        found = per_client[name] = build(text())
    return found


def loaded(client: Any, name: str) -> Any:
    """``script(client, name)``, made sure to be in Redis's script cache.

    For a script sent inside a pipeline ahead of a BLPOP: a NOSCRIPT there is only seen
    after the BLPOP has blocked in vain (and the FIFO hand-off's join answers nothing at
    all: ``CLIENT REPLY SKIP``). It is loaded once, then marked loaded for the client's
    pool, until any of our scripts on that pool meets NOSCRIPT (``LaneScript``,
    ``NoticingScript``) or a caller says so (``forget_loaded``): a restarted Redis, or
    ``SCRIPT FLUSH``, has lost them all. The mark was once per client for good, and the
    first notify-waiter after a flush blocked its whole second in vain, on a wake list
    no release would push (a lockcore audit).
    """
    found = script(client, name)
    marks = loaded_marks(client)
    if name not in marks:
        client.script_load(source(name))
        marks.add(name)
    return found


def loaded_marks(client: Any) -> set[str]:
    """The names ``loaded`` made sure of on ``client``'s pool (a cluster client's own)."""
    pool = getattr(client, "connection_pool", None)
    try:
        return _loaded.setdefault(client if pool is None else pool, set())
    except TypeError:  # cannot be weakly referenced: nothing is remembered
        return set()


def forget_loaded(client: Any) -> None:
    """Redis answered NOSCRIPT: ``loaded`` loads each script again before its next use."""
    loaded_marks(client).clear()
