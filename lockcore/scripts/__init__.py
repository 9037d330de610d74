"""Lua scripts shipped as package data, loaded once per client.

Each ``*.lua`` file starts with a header naming ``KEYS``, ``ARGV`` and return values.
``script(client, "token_acquire")`` returns a redis-py ``Script`` registered on that
client; calling it uses EVALSHA and falls back to SCRIPT LOAD on NOSCRIPT.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

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


def script(client: Any, name: str) -> Any:
    """The ``Script`` for ``name`` registered on ``client`` (cached per client)."""
    return registered(client, name, lambda: source(name))


def registered(client: Any, name: str, text: Callable[[], str]) -> Any:
    """The ``Script`` of ``text()`` on ``client``, made once per client and name:
    making one hashes the text (SHA-1). Other packages' scripts use it with a name of
    their own (the web app's: ``webapp/<name>``)."""
    try:
        per_client = _registered[client]
    except KeyError:
        per_client = _registered[client] = {}
    except TypeError:  # a client that cannot be weakly referenced: no cache
        return client.register_script(text())
    found = per_client.get(name)
    if found is None:
        found = per_client[name] = client.register_script(text())
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
