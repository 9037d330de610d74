"""Redis connections whose check-out costs one ``poll`` syscall, not a gevent watcher.

redis-py checks every connection it takes out of a pool: ``can_read()`` polls the
socket with a zero timeout, for a connection holding unread replies or closed by the
server. (redis-py 8 acts on the answer only with its maintenance notifications off; on,
their default, it still asks.) The check calls ``select.poll()``; in a gevent worker
that is gevent's ``poll``, which starts an event-loop watcher per socket, waits on an
``Event`` with a zero timeout and closes the watcher again. Measured here
(``BlockingConnectionPool`` get + release under gevent, docs/performance.md, session
6): **56 us with gevent's poll, 12 us with the original one**. A zero-timeout poll
never blocks, so the original system call is safe inside the event loop: it neither
waits nor touches the loop's own registration of the socket.

Every Redis command outside the purchase auto-pipeline pays this check: a lock
acquisition, the section's GET and SET, the release.

Only the zero-timeout check takes the short way, and only when the parser holds no
buffered reply; anything else (a readable socket, a blocking wait, TLS with its own
buffer) is redis-py's own ``can_read``, unchanged.
"""

from __future__ import annotations

import select
import sys
from typing import Any
from urllib.parse import urlsplit

from redis.connection import Connection, UnixDomainSocketConnection


def _system_poll() -> Any:
    """``select.poll`` as the OS provides it, even after gevent patched the module."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return monkey.get_original("select", "poll")
    return select.poll


class _QuickCheck:
    """Mixed into a redis-py connection class: the pool's zero-timeout check as one
    ``poll(2)`` call. ``_sock`` and ``_parser`` are the connection's own attributes."""

    _sock: Any
    _parser: Any

    def can_read(self, timeout: float = 0) -> bool:
        if timeout == 0 and self._quiet():
            return False
        return super().can_read(timeout)  # type: ignore[misc, no-any-return]

    def _quiet(self) -> bool:
        """True only if nothing can be read: no buffered reply, nothing on the socket."""
        sock, reader = self._sock, getattr(self._parser, "_reader", None)
        if sock is None or reader is None or hasattr(sock, "pending"):
            return False  # not connected, another parser, or TLS: redis-py decides
        if reader.has_data():
            return False
        poller = _system_poll()()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)


class QuickCheckConnection(_QuickCheck, Connection):
    """A TCP connection (``redis://``)."""


class QuickCheckUnixConnection(_QuickCheck, UnixDomainSocketConnection):
    """A Unix socket connection (``unix://``)."""


def connection_options(url: str) -> dict[str, Any]:
    """``from_url`` keywords choosing a quick-check class for ``url``'s scheme; none for
    TLS (``rediss://``), whose connections keep redis-py's class."""
    scheme = urlsplit(url).scheme
    if scheme == "redis":
        return {"connection_class": QuickCheckConnection}
    if scheme == "unix":
        return {"connection_class": QuickCheckUnixConnection}
    return {}
