"""A purchase's Redis write whose reply was lost must not land later.

redis-py gives up on a reply after the client's ``socket_timeout`` and the shop answers
503 busy: "nothing happened, try again". But the command was sent. A Redis that was
only slow (paused, swapping, a long fork) runs it when it wakes: the buyer is reserved,
a unit is gone, and no order will ever be written; the buyer's retry hears 409
``already_purchased``, and the audit stays inconsistent for good (a paused-Redis probe
found it in session 19: seed 001's lost reply, on the shop's own writes).

So each purchase script carries a *deadline* in Redis's clock (ms since the epoch), a
margin before the client will give up, and changes nothing if Redis runs it later: it
answers ``LATE``, which the shop turns into the same 503. Redis's ``TIME`` and the
client's ``time.time()`` must agree within the margin: on one host they are one clock,
across hosts NTP keeps them within milliseconds. A clock off by more is seed 004's
lesson again (a timing assumption, not a guarantee).
"""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .problems import Busy

#: what a purchase script answers when it ran past its deadline (it changed nothing)
LATE = -5
#: what ``set_stock.lua`` answers when the sale is another generation now (ditto)
RESET_SINCE = -3
#: the deadline comes this long before the client gives up (at most half its timeout)
MARGIN_S = 1.0

#: the errors after which a purchase script may have run with its reply lost, so a
#: purchase undoes it by its nonce (``services.undo_lost``, ``services.undo_take``).
#: A *timeout* counts too: Redis may have run the script in time and only its reply come
#: late (a return path that stalls; a gevent hub blocked past the timeout, whose timer
#: then fires before the ready read). The undo is sent after the client gave up, so
#: after the deadline: a copy of the script still on its way arrives later still, and
#: changes nothing (``LATE``).
LOST_REPLY = (RedisConnectionError, RedisTimeoutError)


def deadline(client: Any) -> int | str:
    """The deadline to send with a script on ``client``: ms since the epoch, or ''
    (no check) for a client that waits for its replies forever."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout")
    if not timeout:
        return ""
    return int((time.time() + timeout - min(MARGIN_S, timeout / 2)) * 1000)


class _AtSend:
    """``AT_SEND``'s type: a placeholder with a name of its own in a traceback."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "AT_SEND"


#: a script argument a ``ScriptPipeline`` replaces with ``deadline(client)`` when it
#: sends the script. A pipelined script may wait in its queue behind the batch ahead,
#: whose leader also writes ``atomic`` rows to the database (``takenorders.py``): with
#: its deadline taken when it queued, one that waited 9 s behind a stalled database ran
#: past it, and its buyer heard "Redis answered too late" from a Redis that answered in
#: milliseconds (a PostgreSQL audit). The client gives up ``socket_timeout`` after the
#: send, so the deadline is the send's.
AT_SEND: Any = _AtSend()


def too_late() -> Busy:
    """The 503 for a script that answered ``LATE``: Redis ran it after the deadline."""
    return Busy("Redis answered too late; nothing was bought, try again", retry_after_s=1)


def set_stock(client: Any, key: str, units: int, *, generation: int | None = None,
              generation_key: str = "") -> None:
    """The locked section's write of the stock it computed (``set_stock.lua``): a plain
    SET, unless Redis runs it after the deadline (then 503, nothing written), or the
    sale at ``generation_key`` is no longer the ``generation`` the section read (503
    "reset since": a section of an unsafe lock is not held off by a reset).

    **Failure timeline** the second try prevents (a helper's proxy dropping the reply)::

        holder:  SET stock 6 runs in Redis; the connection drops before the reply
        holder:  ConnectionError: 503 "nothing was bought", no order written
        stock:   6 in Redis, 7 in the database: a unit gone for good

    A SET of an absolute value is idempotent, and under the lock nobody else writes the
    stock: so the same SET is sent once more, on a new connection. A reply lost to a
    *timeout* is not: the deadline has passed, so a resend would answer ``LATE`` and tell
    nothing; a late run changes nothing. Left open: a SET that ran in time whose reply
    alone came late (a unit short, as above). Reading the stock back cannot tell it
    apart once the lock may have expired meanwhile and another holder written."""
    write = scripts.script(client, "set_stock")
    keys = [key, generation_key] if generation_key and generation is not None else [key]
    # the same deadline both times: never a later SET
    args = [units, deadline(client), "" if generation is None else generation]
    try:
        answer = write(keys=keys, args=args)
    except RedisConnectionError:
        answer = write(keys=keys, args=args)
    if answer == LATE:
        raise too_late()
    if answer == RESET_SINCE:
        raise Busy("the sale was reset or counted again while this purchase was in "
                   "flight; nothing was bought, try again", retry_after_s=1)


def reserve(client: Any, buyers_key: str, user_id: str, reservations_key: str = "",
            nonce: str = "") -> bool:
    """SADD the buyer (``reserve.lua``): True if reserved, False if already; 503 late.
    With a ``nonce``, kept for the buyer in ``reservations_key`` (``undo_lost.lua``)."""
    keys = [buyers_key, reservations_key] if nonce else [buyers_key]
    done = scripts.script(client, "reserve")(keys=keys, args=[user_id, deadline(client), nonce])
    if done == LATE:
        raise too_late()
    return bool(done == 1)
