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
the previous caller's answer. Nothing is retried: whether a command ran is unknown once
its reply is lost, and a lock or a purchase must not run twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError


def round_trip(client: Any, commands: list[tuple[Any, ...]], replies: int) -> list[Any]:
    """Send ``commands`` at once on one pooled connection of ``client``; read ``replies``
    answers (a ``ResponseError`` as a value, in its place)."""
    return _exchange(client, lambda connection: connection.pack_commands(commands), replies)


def round_trip_packed(client: Any, packed: bytes, replies: int) -> list[Any]:
    """``round_trip`` for commands already in the Redis protocol (``packed``), for a
    caller that encodes its own: ``webapp/pipelining.py`` (redis-py's ``pack_commands``
    was a fifth of its leader's work)."""
    return _exchange(client, lambda connection: [packed], replies)


def _exchange(client: Any, chunks: Callable[[Any], list[bytes]], replies: int) -> list[Any]:
    """Send ``chunks(connection)`` on one pooled connection, read ``replies`` answers."""
    pool = client.connection_pool
    connection: Any = pool.get_connection()  # redis-py leaves Connection untyped
    try:
        connection.send_packed_command(chunks(connection))
        answers: list[Any] = []
        for _ in range(replies):
            try:
                answers.append(connection.read_response())
            except ResponseError as exc:  # read whole: the next reply is still in step
                answers.append(exc)
    except BaseException:
        connection.disconnect()  # replies may still be on their way: never reuse it
        raise
    finally:
        pool.release(connection)
    return answers
