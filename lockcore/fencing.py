"""The storage side of fencing tokens: refuse writes from a holder that has been replaced.

A lock alone cannot stop a holder that was paused past its TTL (GC, SIGSTOP, swap):
when it wakes it still *believes* it holds the lock and writes. Martin Kleppmann's
answer is to number every acquisition (``lock.fencing_token``, strictly increasing) and
make the *storage* remember the highest number it has accepted::

    A: acquire -> token 33;  A pauses past its TTL
    B: acquire -> token 34;  B writes stock=9 with token 34   (highest seen: 34)
    A: wakes, writes stock=10 with token 33                   -> FencingTokenRejected

The check and the write must be atomic, or a stale writer slips in between them, so
they are one Lua script (``fenced_set.lua``). A token equal to the highest is accepted:
the same holder may write more than once in its critical section.

Only the storage can do this: the lock cannot, because the paused client has not
talked to anyone since it woke. (RedLock has no such counter, which is one reason it
is not enough on its own; see ``redlock.py``.)
"""

from __future__ import annotations

import logging
from typing import Any

from . import scripts
from .errors import FencingTokenRejected

logger = logging.getLogger(__name__)


class FencedStore:
    """Keys in Redis whose writes must carry a fencing token no older than the last one."""

    def __init__(self, client: Any, prefix: str = "fenced:") -> None:
        self.client = client
        self.prefix = prefix
        self._script = scripts.script(client, "fenced_set")

    def key(self, name: str) -> str:
        return f"{self.prefix}{{{name}}}"  # hash tag: value and fence share a cluster slot

    def write(self, name: str, value: str | int | float | bytes, fencing_token: int) -> None:
        """Store ``value`` under ``name`` unless a newer token has written there.

        :raises FencingTokenRejected: ``fencing_token`` is older than the highest seen.
        """
        if isinstance(fencing_token, bool) or not isinstance(fencing_token, int):
            raise TypeError("fencing_token must be an int (lock.fencing_token)")
        key = self.key(name)
        ok, seen = self._script(keys=[key, f"{key}:fence"], args=[fencing_token, value])
        if not ok:
            logger.warning("rejected write to %r with token %d (highest seen %d)",
                           name, fencing_token, seen)
            raise FencingTokenRejected(
                f"fencing token {fencing_token} is older than {seen}", name,
                token=fencing_token, highest_seen=int(seen))

    def read(self, name: str) -> bytes | None:
        value: bytes | None = self.client.get(self.key(name))
        return value

    def highest_token(self, name: str) -> int | None:
        """The highest fencing token accepted for ``name`` so far (None: never written)."""
        value = self.client.get(f"{self.key(name)}:fence")
        return None if value is None else int(value)


def fenced_write(client: Any, name: str, value: str | int | float | bytes,
                 fencing_token: int) -> None:
    """One-shot ``FencedStore(client).write(name, value, fencing_token)``."""
    FencedStore(client).write(name, value, fencing_token)


def raise_counter(client: Any, fence_key: str, issued: int) -> int:
    """Raise the fencing counter at ``fence_key`` to at least ``issued``
    (``fence_at_least.lua``); returns the counter after it."""
    return int(scripts.script(client, "fence_at_least")(keys=[fence_key], args=[issued]))
