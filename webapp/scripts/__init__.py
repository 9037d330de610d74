"""The web app's Lua scripts, shipped as package data (like ``lockcore.scripts``)."""

from __future__ import annotations

import functools
import weakref
from importlib import resources
from typing import Any

_registered: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


@functools.cache
def source(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def script(client: Any, name: str) -> Any:
    """A redis-py ``Script`` (EVALSHA, SCRIPT LOAD on NOSCRIPT) for ``name`` on ``client``,
    made once per client: making one hashes the script's text (SHA-1), per purchase it
    showed in the profile."""
    try:
        per_client = _registered.setdefault(client, {})
    except TypeError:  # a client that cannot be weakly referenced: no cache
        return client.register_script(source(name))
    found = per_client.get(name)
    if found is None:
        found = per_client[name] = client.register_script(source(name))
    return found
