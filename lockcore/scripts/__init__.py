"""Lua scripts shipped as package data, loaded once per client.

Each ``*.lua`` file starts with a header naming ``KEYS``, ``ARGV`` and return values.
``script(client, "token_acquire")`` returns a ``LaneScript`` made once per client:
calling it sends EVALSHA on the client's lane (``lockcore.wire``: one send, one read,
none of redis-py's per-command machinery) and falls back to SCRIPT LOAD on NOSCRIPT.
A client without a lane (a pipeline, a cluster client) gets redis-py's ``Script``.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from .. import wire

#: Return codes shared by the release/extend scripts, mapped to exceptions by the callers.
OK = 1
NOT_OWNED = 0

_registered: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


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
        self.lockcore_loaded = False

    def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        try:
            return self.lane.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:  # Redis restarted or flushed its scripts
            self.lane.call("SCRIPT", "LOAD", self.text)
            return self.lane.call("EVALSHA", self.sha, len(keys), *keys, *args)


def script(client: Any, name: str) -> Any:
    """The script ``name`` on ``client`` (cached per client): a ``LaneScript``, or
    redis-py's ``Script`` for a client without a lane."""
    return registered(client, name, lambda: source(name), make=lambda text: _made(client, text))


def _made(client: Any, text: str) -> Any:
    lane = wire.lane(client)
    return _script_of(client, text) if lane is None else LaneScript(client, lane, text)


def _script_of(client: Any, text: str) -> Any:
    """``client.register_script(text)`` (redis-py's ``Script``), made to hold its client
    weakly: the cache keeps the script as long as the client lives, and a script holding
    its client kept both alive for good (every short-lived client leaked, with its
    connections)."""
    made = client.register_script(text)
    if getattr(made, "registered_client", None) is client:
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
    """``script(client, name)``, made sure to be in Redis's script cache (once per client).

    For a script sent inside a pipeline ahead of a BLPOP: a NOSCRIPT there is only seen
    after the BLPOP has blocked in vain.
    """
    found = script(client, name)
    if not getattr(found, "lockcore_loaded", False):
        client.script_load(source(name))
        found.lockcore_loaded = True
    return found
