"""Redis's replication history, watched: a Redis whose data is older than the database's
sells nothing from it; the sales it holds stale are reloaded from the database first.

**Guarantee.** A shop whose Redis started a new history (a replica promoted by a
failover, a primary failed back to, a restart from a snapshot) reloads from the
database, the truth, each sale whose Redis stock is above the database's count, before
a purchase sells from it, as after a Redis that came back empty (``saleinfo.
cached_sale``): the stock the database has left, its buyers, and a lock's fencing
counter raised past the tokens its orders carry. A sale whose stock agrees (a restart
from an append-only file synced ``always``, a failover that lost nothing) is left as
it is: no hold-off, no new generation.

**How.** Redis names the history of its data (``INFO replication``:
``master_replid``). A primary keeps its ID while it runs; a replica promoted starts a
new one, a replica takes its primary's, and a restart starts a new one (Redis 7.0, from
a snapshot or an append-only file alike). The shop records the ID it last checked its
sales under in Redis itself (``HISTORY_KEY``), where it is replicated and snapshotted
with the sales. A worker compares the two at its start, before a purchase (an audit,
an admin reset) once a second (``CHECK_EVERY_S``), from its periodic loop while a look
is owed, and on each new connection of the purchases' pool (a restart, a failover
behind a DNS name: the shop reconnects), which is refused if the history changed, so
the purchase that made it sells nothing. One
that finds them apart compares every sale's Redis stock with the database's
``remaining``, drops the copy of each that is ahead (``forget_stale_copy.lua``, the
stock key with it for a lock path) so that the next buyer reloads it, and only then
records the new ID (``history_seen.lua``): a drop that fails is tried again at the
next look. The worker's other purchases wait for a look once a change or a reconnect
is known (and hear 503 for ``RETRY_LOOK_S`` after one that failed: Redis frozen); a
routine look holds none of them up. A refusal during a look (out of memory,
``NOREPLICAS``) is looked at again; only ``INFO`` or the key refused for good (an ACL
without them, ``INFO`` renamed) turns the watch off.

**Failure timeline** (a Redis HA audit: Sentinel, a primary and one replica)::

    shop:     sells on primary M1 (history R1), replicated to M2
    sentinel: promotes M2 (history R2); M1 takes the shop's writes 10 s more: the
              database has those orders, M2 not the units they took
    sentinel: M1 becomes M2's replica: 63 units in Redis, none in the database
    operator: restarts the shop on M2, or fails back to M1: 63 units sold again
              (``token`` and ``atomic`` alike), fencing tokens handed out twice
    fixed:    the key says R1, Redis says R2 (or R3); the sale's 63 are above the
              database's 0: reloaded from the database, 409 sold out

The same for a primary restarted from a snapshot of the same sale (``served.
snapshot_redis``): the generations catch a snapshot from before a reset, this one
from within the sale.

**Not covered.** A purchase already past its look when the history changed may sell
from the old copy (the ones in flight at that moment); a primary failed back to within
a second of a worker's last look, with no reconnect in between, is used for the rest of
that second. A Redis with no ``HISTORY_KEY`` yet (the first start of this version over
a live sale, the key deleted) is recorded as it is, unchecked. A Redis that refuses
``INFO`` or the key (an ACL without them, ``INFO`` renamed) is not watched (logged
once). An old primary that has not heard of the failover goes on taking writes (the
audit's 10 s; for as long as a partition lasts): Redis's ``min-replicas-to-write``
bounds that. What the lost writes held is lost all the same: the orders the database
has are kept. docs/workshop/07-failover.md is the lesson.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from . import scripts
from .keys import SaleKeys
from .models import Sale

logger = logging.getLogger(__name__)

#: where the shop keeps the history ID it checked its sales under
HISTORY_KEY = "seckill:redis-history"
#: a worker that sells looks at least this often
CHECK_EVERY_S = 1.0
#: after a look that failed, a purchase owing one hears 503 for this long, not a look
RETRY_LOOK_S = 1.0


class HistoryWatch:
    """One worker's watch over its Redis's history (``Backends.history``): call
    ``before_purchase`` before a purchase uses Redis; ``reconnected`` is called by each
    (re)connection of the purchases' pool."""

    def __init__(self, client: Any, sessions: sessionmaker[Session]) -> None:
        self.client, self.sessions = client, sessions
        self.checked_at = -CHECK_EVERY_S
        #: a look is owed before the next purchase: nothing looked at yet, a reconnect,
        #: a look that failed or found a replica; purchases wait for it
        self.suspect = True
        self.reloading = False  # a change found, the drop under way: purchases wait
        self.changes = 0  # connections that found a change (or could not tell)
        self.failed_at = -RETRY_LOOK_S  # the last look that raised
        self.off = False
        self._one = threading.Lock()
        self._looking = threading.local()  # greenlet-local under gevent's patching

    def reconnected(self, connection: Any) -> None:
        """A connect callback: the Redis behind the address may be another one now. The
        purchase whose command made the connection has looked already, so the new
        connection is asked at once (``INFO`` and the key, on it) and refused if the
        history changed: that purchase hears 503 and the next one waits for the look.
        (Only marked, a restarted Redis's first purchase of each worker sold from the
        old copy: the reconnect happened inside it.) A connection to the same history
        (the pool growing) changes nothing. Not while the watch itself looks."""
        if self.off or getattr(self._looking, "now", False):
            return
        try:
            connection.send_command("INFO", "replication")
            info = connection.read_response()
            connection.send_command("GET", HISTORY_KEY)
            seen = connection.read_response()
        except redis.RedisError:  # refused, renamed, loading, gone: the look will say
            self.changes += 1
            self.suspect = True
            return
        fields = dict(line.split(":", 1) for line in _text(info).splitlines() if ":" in line)
        replid = fields.get("master_replid")
        if seen is None or fields.get("role") != "master" or not replid or \
                _text(seen) == replid:
            return
        self.changes += 1
        self.suspect = True
        connection.disconnect()
        raise HistoryChanged("Redis's data has a new history (a failover, or a restart): "
                             "its sales are checked against the database first; try again")

    def before_purchase(self) -> None:
        """Before a purchase (and an audit, a reset) uses the sale's Redis copy."""
        if self.off:
            return
        if self.suspect or self.reloading:
            if time.monotonic() - self.failed_at < RETRY_LOOK_S:
                # the look failed a moment ago (Redis frozen, down): 503 now. Each buyer
                # looking again in turn waited k x the socket timeout (a review: the
                # 8th buyer of a frozen Redis answered after 7.7 s, not 2)
                raise HistoryUnknown("Redis did not answer a look at its history a moment "
                                     "ago; try again")
            self.check()  # waits for a look under way
        elif time.monotonic() - self.checked_at >= CHECK_EVERY_S:
            self.check(wait=False)  # a routine look: the others go on meanwhile

    def check(self, wait: bool = True) -> None:
        """Look now, and reload the sales Redis holds stale if its history changed.
        ``wait``: else return at once if another look is under way. Redis errors
        propagate (the purchase would meet them too), and the next purchase looks
        again, from ``RETRY_LOOK_S`` on."""
        if not self._one.acquire(blocking=wait):
            return
        try:
            if not (self.suspect or self.reloading) and \
                    time.monotonic() - self.checked_at < CHECK_EVERY_S:
                return  # another greenlet of this worker looked while this one waited
            started, changes, looked = time.monotonic(), self.changes, False
            self._looking.now = True
            try:
                looked = self._look()
            except Exception:
                self.failed_at = time.monotonic()
                raise
            finally:
                self._looking.now = False
                if looked:
                    self.checked_at = started
                    # a connection made during the look may be to yet another server
                    self.suspect = self.changes != changes
                else:  # failed, or a replica: the next purchase looks again, and waits
                    self.suspect = True
        finally:
            self._one.release()

    def _look(self) -> bool:
        """One look; False if it must be tried again (a replica), raises on errors."""
        try:
            info = self.client.info("replication")
            seen = self.client.get(HISTORY_KEY)
        except redis.exceptions.ResponseError as exc:
            if not _refused_for_good(exc):
                raise
            self.off = True
            logger.warning("Redis refuses the look at its history (%s): a failover or a "
                           "restart from a snapshot is not noticed, and the sales are "
                           "not reloaded from the database after one "
                           "(webapp/redishistory.py)", exc)
            return True
        # from here a refusal (out of memory, NOREPLICAS, MISCONF) is for now: raised,
        # and looked again. Taken for good, one refused write turned the watch off for
        # the worker's life, and its next snapshot restart oversold 7 (a review)
        replid = info.get("master_replid")
        if info.get("role") != "master" or not replid:
            return False  # a replica refuses the purchase; look again at the next
        if seen is None:  # a new Redis (or one from before the watch): as it is
            self.client.set(HISTORY_KEY, replid, nx=True)
            return True
        if _text(seen) == replid:
            return True
        self.reloading = True
        try:
            checked, dropped = forget_stale_copies(self.client, self.sessions)
            recorded = scripts.script(self.client, "history_seen")(
                keys=[HISTORY_KEY], args=[_text(seen), replid])
        finally:
            self.reloading = False
        logger.warning(
            "Redis's data has a new history (replication ID %s, was %s): a failover, or "
            "a restart. Of %d sales, %d had more stock in Redis than the database has "
            "left: reloaded from the database%s", replid[:8], _text(seen)[:8], checked,
            dropped, "" if recorded else " (another process recorded it first)")
        return True


def _refused_for_good(exc: redis.exceptions.ResponseError) -> bool:
    """A refusal of ``INFO`` or ``GET`` that will not pass: no permission (an ACL), or
    no such command (``rename-command INFO ""``)."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or \
        str(exc).lower().startswith("unknown command")


class HistoryUnknown(redis.exceptions.ConnectionError):
    """A purchase owing a look while the last one failed a moment ago: 503, try again."""


class HistoryChanged(redis.exceptions.ConnectionError):
    """A connection refused because its Redis has a new history nobody has checked
    the sales under yet (``HistoryWatch.reconnected``): 503, try again."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def forget_stale_copies(client: Any, sessions: sessionmaker[Session]) -> tuple[int, int]:
    """Drop the Redis copy of every sale whose Redis stock is above the database's
    ``remaining`` (compare-and-delete, as ``saleinfo.forget_stale_copy``: a reset's
    newer copy stands): ``(sales with a copy, copies dropped)``.

    Above: a lost write. A purchase in flight has Redis below the database (its units
    taken, or a lock section's stock written, its row not yet); only ``sql``'s copy of
    its stock, written after its row, runs ahead for a moment: that sale reloads for
    nothing, as after a loss. A reset between the two reads may have its new copy
    dropped: a reload too (a lock sale's hold-off), not a sale from a stale copy.

    A path whose reload keeps a stock it finds (a lock path: ``restore_stock``'s
    ``SET NX``) loses its stock key too. Kept, a sale the database had sold out was
    reloaded sold out (409s, nothing oversold) with the old 7 units in Redis, and the
    audit inconsistent for good: no section ran to count it again. A path that starts
    a new generation on a reload (``atomic``, ``atomic-sharded``) replaces its stock."""
    from .paths import names, path_for
    from .saleinfo import parsed_sale

    with sessions() as session:
        counts = {sku: left for sku, left in session.execute(select(Sale.sku, Sale.remaining))}
    forget = scripts.script(client, "forget_stale_copy")
    registered = set(names())
    skus, checked, dropped = sorted(counts), 0, 0
    for start in range(0, len(skus), 500):
        chunk = skus[start:start + 500]
        pipe = client.pipeline(transaction=False)
        for sku in chunk:
            pipe.hgetall(SaleKeys(sku).info)
        sales = [parsed_sale(sku, copy)
                 for sku, copy in zip(chunk, pipe.execute(), strict=True) if copy]
        # a strategy this shop does not know (an operator's row): its buyers hear so
        # (``paths.UnknownStrategy``); its copy is not this look's to judge
        sales = [sale for sale in sales if sale.strategy in registered]
        paths = [path_for(sale.strategy, sale.sku) for sale in sales]
        pipe = client.pipeline(transaction=False)
        for sale, path in zip(sales, paths, strict=True):
            pipe.mget(path.stock_keys(sale))
        for sale, path, values in zip(sales, paths, pipe.execute(), strict=True):
            checked += 1
            stock = path.stock_of(values)
            if stock is None or stock <= counts[sale.sku]:
                continue  # lost (a reload of its own), or not ahead of the database
            with_it = ([] if path.new_generation_on_reload or path.stock_elsewhere
                       else path.stock_keys(sale))
            if sale.generation is None:  # a copy of before generations: as it is
                dropped += int(client.delete(sale.keys.info, *with_it) > 0)
            else:
                dropped += int(forget(keys=[sale.keys.info, *with_it],
                                      args=[sale.generation]))
    return checked, dropped


def history_watch_for(app: Any) -> HistoryWatch | None:
    """The watch of a built shop (``create_app``); None for an app that did not build."""
    backends = getattr(app, "extensions", {}).get("seckill")
    return None if backends is None else backends.history
