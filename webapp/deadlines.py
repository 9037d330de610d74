"""A purchase's Redis write whose reply was lost must not land later.

redis-py gives up on a reply after the client's ``socket_timeout`` and the shop answers
503 busy: "nothing happened, try again". But the command was sent. A Redis that was
only slow (paused, swapping, a long fork) runs it when it wakes: the buyer is reserved,
a unit is gone, and no order will ever be written; the buyer's retry hears 409
``already_purchased``, and the audit stays inconsistent for good (a paused-Redis probe
found it in session 19: seed 001's lost reply, on the shop's own writes).

So each purchase script carries a *deadline* in Redis's clock (ms since the epoch), a
margin before the client will give up, and changes nothing if Redis runs it later: it
answers ``LATE``, which the shop turns into the same 503. The client stamps it from
``time.time()``, Redis checks it against its ``TIME``: on one host one clock, across
hosts NTP keeps them within milliseconds, but a host off by more is seed 004's lesson
again. So each served worker measures its clock against its Redis server's ``TIME``
(``ClockWatch``, every ``CLOCK_CHECK_S``) and stamps deadlines in Redis's clock: a web
host 15 s behind its Redis had every purchase answer "Redis answered too late" while
``/healthz`` said ok, and one ahead of it had no deadline at all (a clock audit, under
``faketime``). The offset is to the host's monotonic clock, so a step of its wall
clock does not move the deadlines; a step of the Redis server's is seen at the next
measurement.
"""

from __future__ import annotations

import logging
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


logger = logging.getLogger(__name__)

#: how often a served worker measures its clock against its Redis server's ``TIME``
CLOCK_CHECK_S = 30.0
#: the slowest ``TIME`` round trip a measurement uses: Redis's clock was read somewhere
#: in it, so the offset is known to half of it
CLOCK_SAMPLE_S = 0.05
#: an offset past this is logged (again when it moves by as much)
CLOCK_WARN_S = 0.25


class ClockWatch:
    """Measures Redis's clock against this host's *monotonic* clock, through ``probe``
    (a client of short timeouts to the same server), and keeps the offset on ``pool``,
    where ``deadline`` reads it: no round trip on a purchase's path, and a step of the
    host's wall clock (NTP at boot, a VM resumed) changes nothing. A served worker calls
    it at start and from its periodic loop (``gunicorn_conf``); elsewhere (a test
    client, one host) deadlines come from the wall clock, as before."""

    #: samples per measurement: the one of the quickest round trip is used
    SAMPLES = 3

    def __init__(self, probe: Any, pool: Any) -> None:
        self.probe, self.pool = probe, pool
        self.checked_at, self.told_s = -CLOCK_CHECK_S, 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.checked_at < CLOCK_CHECK_S:
            return
        self.probe.ping()  # the connection made (and its handshake) outside the samples
        samples = []
        for _ in range(self.SAMPLES):
            before = time.monotonic()
            seconds, micros = self.probe.time()
            after = time.monotonic()
            samples.append((after - before, seconds + micros / 1e6 - (before + after) / 2))
        took, offset = min(samples)
        if took > CLOCK_SAMPLE_S:  # unsure by more than half of it: next time
            return
        self.checked_at = now
        self.pool.seckill_clock_offset_s = offset
        # what it means for the wall clocks: Redis's minus this host's
        skew = offset + time.monotonic() - time.time()
        if abs(skew - self.told_s) > CLOCK_WARN_S:
            self.told_s = skew
            kwargs = self.pool.connection_kwargs
            where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
            if abs(skew) <= CLOCK_WARN_S:
                logger.warning("this host's clock agrees with the clock of Redis at %s "
                               "again (%.2f s apart)", where, abs(skew))
            else:
                logger.warning("this host's clock is %.2f s %s the clock of Redis at %s: "
                               "purchase deadlines follow Redis's (docs/deployment.md, "
                               "Clocks)", abs(skew), "behind" if skew > 0 else "ahead of",
                               where)


def clock_watch_for(app: Any) -> ClockWatch | None:
    """The clock watch of a built shop (``create_app``): its purchases' pool, measured
    through its health probe's client (1 s timeouts); None for an app that did not
    build."""
    backends = getattr(app, "extensions", {}).get("seckill")
    if backends is None:
        return None
    return ClockWatch(backends.health_redis, backends.redis.connection_pool)


def deadline(client: Any) -> int | str:
    """The deadline to send with a script on ``client``: ms since the epoch in its Redis
    server's clock (``ClockWatch``), or '' (no check) for a client that waits for its
    replies forever."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout")
    if not timeout:
        return ""
    offset = getattr(pool, "seckill_clock_offset_s", None)  # ``ClockWatch``'s
    now = time.time() if offset is None else time.monotonic() + offset  # Redis's clock
    return int((now + timeout - min(MARGIN_S, timeout / 2)) * 1000)


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
