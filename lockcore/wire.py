"""One round trip of raw commands, for what redis-py's ``Pipeline`` cannot express.

``Pipeline`` reads one reply per command and wraps every call in its own retry and
response callbacks. Two callers need less, or other: the FIFO hand-off sends its join
with ``CLIENT REPLY SKIP`` (so one command answers nothing: ``handoff.py``), and the
web app's auto-pipeline sends many purchases' scripts whose replies go to different
callers (``webapp/pipelining.py``). ``round_trip`` writes the commands in one ``send``
and reads as many replies as asked, each Redis error returned as a value, so one
failed command neither hides the replies after it nor leaves them unread.

A connection whose replies may not all have been read (a timeout, a dropped socket)
is disconnected before it goes back to the pool: reused, it would hand the next caller
the previous caller's answer. So is one whose batch silenced a reply with ``CLIENT
REPLY`` and met an error: the CLIENT itself may have been refused (an ACL user's
``-client``), and then every command answered, one more than was read. Those replies
may sit in the parser's buffer already, where the pool's and the lane's peek at the
socket does not see them (a lockcore audit: a holder's release read a waiter's reply
and raised ``LockNotOwned``). Nothing is retried: whether a command ran is unknown once
its reply is lost, and a lock or a purchase must not run twice.

**Lanes: lockcore's own connections** (``lane``). redis-py 8 wraps every command in
about 150 Python calls (retries, event dispatch, observability recorders, a poll of the
socket when the pool hands a connection out): an EVALSHA took 86 us (75 us of CPU) in
the session 8 profile (docs/performance.md), where the same bytes written and read on
one connection took 25 us. A lock pays that twice per acquisition, on the critical
path of every waiter. So lockcore keeps a few connections of the client's pool checked
out for good (a *lane*) and talks to Redis on them directly: one ``send``, one read.

* A lane belongs to a pool, whichever clients share it, and holds at most
  ``LANE_SIZE`` connections, and at most a quarter of the pool's ``max_connections``;
  a call that finds them all busy borrows one from the pool the usual way and gives it
  back. A blocking pool gets no lane: its callers wait for a connection, and a lane
  would make them wait longer. A pool no client uses any more is freed with its lane
  and the lane's connections, as redis-py frees a dropped client's.
* An idle connection is checked before use with one non-blocking peek (a server
  restart closed it: reconnect; bytes nobody asked for: reconnect), which is what the
  pool's checkout checks, without its layers.
* A single command's reply is waited for by spinning first (``lockcore.spin``): a near
  Redis answers sooner than a sleeping process wakes up.
* What a lane gives up is what a lock must not use anyway: a retry of a command whose
  reply was lost (an acquire could run twice).
* The connections stay the pool's: ``client.close()`` disconnects them, and they
  reconnect on next use. A child process after ``fork`` starts a lane of its own, as
  redis-py's pool does.
"""

from __future__ import annotations

import _socket
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from redis import BlockingConnectionPool, ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .spin import Spinner, readable


def round_trip(client: Any, commands: list[tuple[Any, ...]], replies: int) -> list[Any]:
    """Send ``commands`` at once on one connection of ``client`` (its lane if it has
    one); read ``replies`` answers (a ``ResponseError`` as a value, in its place)."""
    found = lane(client)
    if found is not None:
        return found.exchange(commands, replies)
    return _exchange(client, lambda connection: connection.pack_commands(commands), replies,
                     commands)


def round_trip_packed(client: Any, packed: bytes, replies: int) -> list[Any]:
    """``round_trip`` for commands already in the Redis protocol (``packed``), for a
    caller that encodes its own: ``webapp/pipelining.py`` (redis-py's ``pack_commands``
    was a fifth of its leader's work)."""
    return _exchange(client, lambda connection: [packed], replies)


def _exchange(client: Any, chunks: Callable[[Any], list[bytes]], replies: int,
              commands: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
    """Send ``chunks(connection)`` (``commands``, if known) on one pooled connection,
    read ``replies`` answers."""
    pool = client.connection_pool
    connection: Any = pool.get_connection()  # redis-py leaves Connection untyped
    try:
        connection.send_packed_command(chunks(connection))
        answers = _read_replies(connection, replies)
        if _maybe_out_of_step(commands, answers):
            connection.disconnect()
    except BaseException:
        connection.disconnect()  # replies may still be on their way: never reuse it
        raise
    finally:
        pool.release(connection)
    return answers


def _read_replies(connection: Any, replies: int) -> list[Any]:
    """``replies`` answers off ``connection``, a Redis error as a value in its place."""
    answers: list[Any] = []
    for _ in range(replies):
        try:
            answers.append(connection.read_response())
        except ResponseError as exc:  # read whole: the next reply is still in step
            answers.append(exc)
    return answers


def _maybe_out_of_step(commands: Sequence[tuple[Any, ...]], answers: list[Any]) -> bool:
    """Whether replies of ``commands`` may be left unread after ``answers``: one of
    them is an error, and the batch silences a reply with ``CLIENT REPLY`` (refused,
    it silenced nothing: module docstring). A batch without commands (the shop's packed
    purchase scripts) has nothing silenced: no scan of its answers."""
    return bool(commands) and any(
        isinstance(answer, ResponseError) for answer in answers) and any(
        str(command[0]).upper() == "CLIENT" and len(command) > 1
        and str(command[1]).upper() == "REPLY" for command in commands)


class Lane:
    """Connections of one pool kept checked out for lockcore: no per-command machinery."""

    def __init__(self, pool: ConnectionPool, size: int, *, weak: bool = False,
                 connect_later: bool = False) -> None:
        #: the pool, or a function returning it (``weak``: a lane kept beside its pool
        #: in ``_lanes`` must not keep it alive)
        self._pool: Callable[[], ConnectionPool | None] = (
            weakref.ref(pool) if weak else lambda: pool)
        self.size = size
        #: a new connection of the lane's own is handed out unconnected, for the caller
        #: to connect within its own deadline (RedLock's nodes: redis-py's checkout
        #: connects, and a frozen node's handshake took the whole socket timeout)
        self.connect_later = connect_later
        self._idle: list[Any] = []  # the lane's connections no call is using now
        self._held = 0  # connections the lane has taken from the pool
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self.spinner = Spinner()

    def call(self, *args: Any) -> Any:
        """One command, one round trip: its reply (a Redis error is raised)."""
        connection, ours = self.take()
        try:  # a failed write or read disconnects the connection itself (redis-py)
            connection.send_packed_command(connection.pack_command(*args))
            self.spinner.wait(connection)  # a near Redis answers sooner than we would wake
            return connection.read_response()
        finally:
            self.give_back(connection, ours)

    def exchange(self, commands: list[tuple[Any, ...]], replies: int) -> list[Any]:
        """``round_trip`` on this lane."""
        connection, ours = self.take()
        try:  # as in ``call``: a failed write or read disconnects the connection
            connection.send_packed_command(connection.pack_commands(commands))
            answers = _read_replies(connection, replies)
            if _maybe_out_of_step(commands, answers):
                connection.disconnect()
            return answers
        finally:
            self.give_back(connection, ours)

    @property
    def pool(self) -> ConnectionPool:
        pool = self._pool()
        if pool is None:
            raise RedisConnectionError("the client's connection pool is gone")
        return pool

    def take(self) -> tuple[Any, bool]:
        """A connection, and whether it is the lane's (else it goes back to the pool)."""
        with self._mutex:
            if self._pid != os.getpid():  # forked: the parent's sockets are not ours
                self._idle, self._held, self._pid = [], 0, os.getpid()
            connection = self._idle.pop() if self._idle else None
        if connection is not None:
            if _closed_or_unread(connection):
                connection.disconnect()  # the next send connects afresh
            if not self.connect_later and getattr(connection, "_sock", False) is None:
                # Nothing is sent yet: connect as the pool's checkout does, with the
                # client's retries. The send's own connect tries once: after a restart,
                # a warm client's token, fair and multi raised at once where redis-py's
                # path, and a cold lane, rode it out (3.5 s; a lockcore audit).
                try:
                    connection.connect()
                except BaseException:
                    self.give_back(connection, True)
                    raise
            return connection, True
        with self._mutex:
            ours = self._held < self.size
            self._held += ours
        try:
            if ours and self.connect_later:
                return self.pool.make_connection(), ours
            return self.pool.get_connection(), ours
        except BaseException:
            with self._mutex:
                self._held -= ours
            raise

    def give_back(self, connection: Any, ours: bool) -> None:
        if not ours:
            self.pool.release(connection)
            return
        with self._mutex:
            if self._pid == os.getpid():
                self._idle.append(connection)


def _closed_or_unread(connection: Any) -> bool:
    """Whether an idle connection's socket was closed by the server (a restart, a
    timeout) or holds bytes nobody asked for: one non-blocking peek, what redis-py's
    pool checks with a poll of the socket at every checkout (it also reconnects)."""
    sock = getattr(connection, "_sock", None)
    raw = sock if isinstance(sock, _socket.socket) else getattr(sock, "_sock", None)
    if not isinstance(raw, _socket.socket):  # not connected yet, or a socket we don't know
        return False
    # The C socket's recv (gevent's wrapper would wait for the bytes), without blocking.
    return readable(raw)  # EOF, an error, or a stray reply


#: the most connections one lane keeps (a process rarely runs more lock calls at once)
LANE_SIZE = 4

#: per connection pool: its lane. Keyed by the pool, not the client: short-lived
#: clients on one shared pool (redis-py's usual pattern) share one lane, which keeps at
#: most a quarter of that pool's connections. A lane holds its pool weakly, so a pool no
#: client uses any more is freed, and with it the lane and the lane's connections.
_lanes: weakref.WeakKeyDictionary[Any, Lane | None] = weakref.WeakKeyDictionary()


def lane(client: Any) -> Lane | None:
    """The lane of a ``redis.Redis`` client's pool; None for anything else, which keeps
    redis-py's own path: a pipeline, a cluster client, a subclass (it may wrap its
    commands), a blocking pool or one too small to spare a connection."""
    if type(client) is not Redis:
        return None
    pool = client.connection_pool
    try:
        return _lanes[pool]
    except KeyError:
        pass
    except TypeError:  # cannot be weakly referenced: no lane
        return None
    found = None
    if isinstance(pool, ConnectionPool) and not isinstance(pool, BlockingConnectionPool):
        size = min(LANE_SIZE, pool.max_connections // 4)
        found = Lane(pool, size, weak=True) if size > 0 else None
    _lanes[pool] = found
    return found
