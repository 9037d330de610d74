"""The web app's Lua scripts, shipped as package data (like ``lockcore.scripts``)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from lockcore import scripts as lockcore_scripts


@functools.cache
def source(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def script(client: Any, name: str) -> Any:
    """A redis-py ``Script`` (EVALSHA, SCRIPT LOAD on NOSCRIPT) for ``name`` on ``client``,
    made once per client (``lockcore.scripts.registered``)."""
    return lockcore_scripts.registered(client, f"webapp/{name}", lambda: source(name))
