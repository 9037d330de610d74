"""The web app's Lua scripts, shipped as package data (like ``lockcore.scripts``)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any


@functools.cache
def source(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def script(client: Any, name: str) -> Any:
    """A redis-py ``Script`` (EVALSHA, SCRIPT LOAD on NOSCRIPT) for ``name`` on ``client``."""
    return client.register_script(source(name))
