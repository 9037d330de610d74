"""The two ends every lock section shares: the stock read, refused when a reset
switched the sale's strategy, and the release, which says when the lock ran out first.

Each strategy locks a key of its own (``locks.stock_resource``), so two buyers exclude
each other only while they use the same strategy. A buyer carries the strategy it
looked up when its request began; a reset may switch the sale to another strategy
before that buyer gets its lock.

**Failure timeline** the guard prevents::

    buyer:  looks the sale up (``token``), waits for the token lock, held by a reset
    reset:  switches the sale to ``fair``, sets stock 100, releases the token lock
    buyer:  gets the token lock: it excludes nobody now, the fair buyers hold another
    buyer:  GET 100 while a fair buyer also reads 100; both SET 99 and write an
            order: two orders, one unit off the stock, the sale oversells
    guard:  the read fetches the sale's strategy in the same round trip; it is not
            ``token`` any more, so the buyer leaves with 503 busy and takes nothing

**After Redis lost its data** (a restart without persistence), the lock went with it
while its holder may still be in its section, and the stock reloaded from the database
misses that holder's order, not written yet::

    A:      holds the lock, reads 10 units, works
    redis:  restarts empty: the lock, the stock, the sale are gone
    B:      reloads the sale (database: 10 left), takes the free lock, reads 10
    A, B:   both write 9 to Redis and an order each: database 8, Redis 9, and with a
            batch per section (combining) the sale oversells by a whole batch
    fixed:  the reload starts a hold-off of one lock TTL (``restore_sale.lua``): no section
            sells until A's lock would have run out; the first section after it reads
            the stock from the database, A's order included (``_reread_stock``)

A's row may come later still: its database stalled past the hold-off (a fault audit:
SQLite's write lock held 4.5 s after a restart, 1 and 5 units oversold). So the count
starts a new generation of the sale in the database, in the statement that reads it
(``saleinfo.new_generation``, as an ``atomic`` reload does): a row committed before it
is counted, a row after it is refused as after a reset, and A hears 503.

(A holder paused past its TTL is seed 004's story, for fencing: lesson 5.)

**A reset to the same strategy.** The guard above lets the buyer through, yet the sale
it looked up is gone: its per-buyer limit and its reservation went with it::

    bob:    buys 3 (no limit), reserved; queues behind a holder in its section
    reset:  same strategy, stock 5, limit 1: waits for the holder, resets, releases
    bob:    takes the lock, reads the new stock: 3 units in a sale of 1 per buyer,
            and no reservation of his in the new sale's buyers
    guard:  the read fetches the sale's generation too; it is not the one bob looked
            up, so he leaves with 503 busy, takes nothing, and buys again in the new sale

A count (above) starts a generation too, in the same millisecond as the reset's
(``saleinfo.counted_since``): the same sale, its terms unchanged, and the buyers queued
behind the counting section buy in it.

**A give-back that outlives the lock.** A section whose row failed after its lock ran
out gives its units back later, under the lock (``lease_renewed``). By then the stock
may have been counted again from the database (a reload's first section, above), and
that count has the units already: no row holds them. The units go back only into the
generation they were taken from (``give_back_once.lua``), and the count is a new
one. (A reload keeps the generation, but marks the sale for a count, and no section
sells before it: a give-back in between goes into a stock the count overwrites.)::

    ann:    holds the lock: reads 10 (generation g0), sets 9; her row's write waits
    redis:  restarts empty; bob reloads the sale: after the hold-off his section
            counts 10 from the database (generation g1), sets 9, writes his row
    ann:    her write fails, her lock gone: her unit waits for the lock
    settle: g0 is not g1: nothing given back. Redis 9, the database 9

**A write that outlives the lock.** The section's order rows are written only in the
sale generation its stock belongs to (``SectionStock.generation``, read with the stock):
a reset waits for the sale's lock, but only while the lock lives, and a row's write may
wait longer (a database busy with another writer)::

    A:      holds the lock (TTL 10 s), GET 10, SET 9; its row's write waits for the
            database
    lock:   expires; a reset takes it: orders deleted, stock 5 (generation g1)
    A:      its row lands in the new sale: Redis 5, database 4, and once Redis has
            sold its 5, six orders for five units
    fixed:  the row is written only WHERE the sale is still A's generation: refused
            (``SaleMovedOn``, 503), and A's unit, the old sale's, is not given back

The same generation refuses the rows of a sale whose reset failed halfway (its database
side committed, Redis left with the old sale): the purchase that hears ``SaleMovedOn``
drops the stale copy (``saleinfo.forget_stale_copy``) and the next buyer loads the new
sale from the database.

The checks cost no extra round trip: they go in one pipeline with the stock's GET. The plain
locked path (``lockedpath.py``) and a combined batch (``allocation.py``) both read the
stock through here, and both release through ``release_after_section``: a lock whose
TTL ran out inside the section is logged (seed 004's lesson), never raised over the
buyer's answer.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, NamedTuple

from redis.exceptions import RedisError
from sqlalchemy import select

from lockcore import LockNotOwned

from . import saleinfo, scripts, services
from .models import Sale
from .problems import Busy, ShopError, lock_not_taken, not_enough
from .retrylater import release_or_settle_later
from .services import Checkout, SaleInfo

logger = logging.getLogger(__name__)


class SectionStock(NamedTuple):
    """What a lock section reads before it sells."""

    #: the units left
    left: int
    #: the sale generation those units belong to (``sale:{sku}:stockgen``, written by
    #: every reset and reload): the section's rows are written only in it. None: not
    #: known (written unconditionally, as before generations)
    generation: int | None


def stock_if_still(deps: Checkout, sale: SaleInfo, token: int | None = None) -> SectionStock:
    """The stock and its generation (the count's if this section counts the stock from
    the database), read in one round trip with the sale's current strategy.

    ``token``: the section's fencing token. Read in the same round trip, the fence the
    database last recorded (``fence_mark``); a token more than half the slack past it
    is recorded first (``saleinfo.note_token``), before the section sells or refuses:
    after Redis loses its data, the reload's fence must be above every token handed
    out, those of sections that wrote no order too.

    :raises Busy: the sale was reset (to another strategy, or to the same one) since
        ``sale`` was looked up, or Redis lost it (restarted empty), or an admin reset
        waits for the lock.
    """
    pipe = deps.redis.pipeline(transaction=False)
    pipe.get(sale.keys.stock)
    pipe.hmget(sale.keys.info, "strategy", "generation")
    pipe.mget([sale.keys.reloaded, sale.keys.holdoff, sale.keys.stock_gen,
               sale.keys.fence_mark, sale.keys.resetting])
    stock, (strategy, generation), (reloaded, holdoff, stock_gen, mark, resetting) = \
        pipe.execute()
    if token is not None and token > int(mark or 0) + saleinfo.FENCE_SLACK // 2:
        saleinfo.note_token(deps.sessions, deps.redis, sale, token)
    if resetting is not None:  # a reset waits for this lock: let it in, sell nothing
        raise Busy(f"the sale of {sale.sku} is being reset; try again", retry_after_s=1)
    if strategy is not None and strategy.decode() != sale.strategy:
        # first: atomic-sharded keeps no plain stock key, and a buyer of the sale before
        # its reset to it heard "Redis lost the sale (restarted?)"
        raise Busy(f"the sale of {sale.sku} was reset to another strategy; try again",
                   retry_after_s=1)
    if generation is not None and sale.generation is not None \
            and int(generation) != sale.generation:
        if not saleinfo.counted_since(sale.generation, int(generation)):
            # to the same strategy: the stock is the new sale's, the terms were the old
            # one's (and, if its stock is not there yet, this is no lost Redis either)
            raise _reset_since(sale)
        # counted again since (the first section after a reload's hold-off): the same
        # sale, and the buyers queued behind that section buy in it (they heard "reset
        # since", 32-47 of a wave of 60: a deployment audit)
        sale = dataclasses.replace(sale, generation=int(generation))
    if stock is None and strategy is not None:  # the key alone: reload the sale
        raise saleinfo.stock_key_lost(deps.redis, sale)
    if stock is None or strategy is None:
        # Redis lost its data (a restart) since the buyer looked the sale up. No stock
        # key is not "0 left": read as 0, the section set the sold-out flag, which
        # answered every later buyer 409 before any of them could reload the sale
        raise Busy(f"Redis lost the sale of {sale.sku} (restarted?); the next buyer "
                   "reloads it from the database: try again", retry_after_s=1)
    if reloaded is not None:
        if holdoff is not None:
            # the hold-off's rest, not 1 s: a page retried every second for 10 s (a UI
            # audit); read only here, off the usual path
            left_s = max(1, math.ceil(max(deps.redis.pttl(sale.keys.holdoff), 0) / 1000))
            raise Busy(f"Redis restarted (or failed over): {sale.sku} sells again once a "
                       f"lock holder from before it is done (in about {left_s} s); try "
                       "again",
                       retry_after_s=left_s)
        return _reread_stock(deps, sale)
    return SectionStock(int(stock), None if stock_gen is None else int(stock_gen))


def _reset_since(sale: SaleInfo) -> Busy:
    """The 503 of a buyer whose sale moved on to another generation (a reset, a count)
    after the buyer looked it up: it buys again in the new one."""
    return Busy(f"the sale of {sale.sku} was reset since this purchase looked it up; "
                "try again", retry_after_s=1)


def hold_off(redis: Any, sale: SaleInfo, lock_ttl_ms: int) -> None:
    """Redis lost the sale (and, if it lived there, the lock): no lock section sells for
    ``lock_ttl_ms`` (0: none), and the first one after reads the stock from the
    database (``stock_if_still``)."""
    pipe = redis.pipeline(transaction=True)
    pipe.set(sale.keys.reloaded, 1)
    if lock_ttl_ms > 0:
        pipe.set(sale.keys.holdoff, 1, px=int(lock_ttl_ms), nx=True)
    pipe.execute()


def _reread_stock(deps: Checkout, sale: SaleInfo) -> SectionStock:
    """The database's count, every holder from before the restart done, as a new
    generation of the sale (``saleinfo.new_generation``): into Redis
    (``reread_stock.lua``). A holder whose row comes after the count (its database
    stalled past the hold-off) writes nothing: the count has not got it. Units a
    section still has to give back are in the count: they go back to neither."""
    if sale.generation is None:  # not known (before generations): counted as it is
        with deps.sessions() as session:
            remaining = session.scalar(select(Sale.remaining).where(Sale.id == sale.id))
        counted: int | None = None
    else:
        started = saleinfo.new_generation(deps.sessions, sale,
                                          "stock counted again from the database")
        if started is None:  # a reset, or another count, moved the sale on; or a count
            # whose Redis side never ran (a Redis error, the worker killed) left the copy
            # at this generation, marked for a count: every section after would come
            # here and sell nothing (a review). The next buyer reloads the sale.
            saleinfo.forget_stale_copy(deps.redis, sale)
            raise _reset_since(sale)
        counted, remaining = started[0].generation, started[1]
    if remaining is None:  # the sale is gone
        raise Busy(f"the sale of {sale.sku} is gone; try again", retry_after_s=1)
    stock = max(int(remaining), 0)
    written = scripts.script(deps.redis, "reread_stock")(
        keys=[sale.keys.stock, sale.keys.reloaded, sale.keys.info, sale.keys.stock_gen],
        args=[stock, "" if sale.generation is None else sale.generation,
              "" if counted is None else counted])
    if written < 0:
        raise _reset_since(sale)
    logger.warning("%s: stock read again from the database after the hold-off: %d",
                   sale.sku, stock)
    return SectionStock(stock, counted)


def still_held(lock: Any, sale: SaleInfo) -> None:
    """Raise ``Busy`` (nothing taken) if the section's lock reports itself lost, before
    the section writes the stock it computed.

    **Failure timeline** it closes (a ZooKeeper audit: stock 1, two orders, with
    ``zookeeper``, a strategy marked safe)::

        A:  reads stock 1; works 10 s; its ZooKeeper connection is suspended (A's lock
            says ``lost`` at once), then its session expires
        B:  takes the lock on a new session; reads stock 1
        A:  wrote stock 0 and its order: 201
        B:  writes stock 0 and its order: 201, oversold by one

    A holder that does not know yet (a pause: seed 004's lesson) is not stopped by this;
    that needs the store to check fencing tokens, which the shop's stock does not
    (a fence on it was tried and reverted: docs/performance.md, session 51)."""
    if getattr(lock, "lost", False):
        raise Busy(f"the lock on {sale.sku} was lost while this purchase worked (its "
                   "server stopped answering); nothing was bought, try again",
                   retry_after_s=1)


def release_after_section(lock: Any, sale: SaleInfo) -> None:
    """Release ``lock``; a failure is logged, not raised: the section's answer stands.
    A release whose reply was lost is settled once Redis answers
    (``retrylater.release_or_settle_later``)."""
    try:
        release_or_settle_later(lock, sale.sku, sale.strategy, services.UNDONE_LATER)
    except LockNotOwned as exc:  # the TTL ran out inside the section (the seed 004
        # lesson), an unsafe lock let another buyer take it over (naive's check-then-set),
        # or ZooKeeper could not confirm the delete (sent again: zookeeper_release.py)
        logger.warning("%s lock on %s was not released as ours: %s", sale.strategy,
                       sale.sku, exc)


def lease_renewed(lock: Any) -> bool:
    """Whether the section still holds ``lock``, renewed for a whole TTL so that what it
    writes next (a failed row's give-back) lands inside the lock; False if the lock is
    not its own any more, or its server cannot say. A lock that never expires is held
    until released, or until it is ``lost`` (``zookeeper``: its session suspended or
    ended, and another worker's may hold the lock now; a review).

    **Failure timeline** it prevents (a review; ``test_give_back_after_expiry``)::

        ann:   holds the lock: reads 10, sets 9; her row's write waits for the database
        lock:  expires; bob takes it and reads 9
        ann:   her write fails: her unit goes back, Redis 10
        bob:   sets 8 and writes his row: Redis 8, the database 9, a unit gone for good

    A section whose lease is gone gives its units back later, under the lock
    (``orders.give_back_under_lock``)."""
    if not getattr(lock, "expires", False):
        return not getattr(lock, "lost", False)
    try:
        lock.extend()
    except LockNotOwned:
        return False
    except Exception as exc:  # noqa: BLE001 - its server down: the give-back waits too
        logger.warning("%s lock %r could not be renewed for a give-back: %r",
                       getattr(lock, "strategy", "?"), getattr(lock, "name", "?"), exc)
        return False
    return True


def flag_sold_out(redis: Any, sale: SaleInfo, generation: int | None) -> None:
    """Set the sale's sold-out flag, only while ``generation`` (the one the section's
    stock belongs to) stands (``flag_soldout.lua``). A combined batch sets it after its
    rows are written, and its lock may have run out meanwhile.

    **Failure timeline** it prevents (a review; ``test_combining``)::

        batch:  reads 1 left; a wins it, b is refused at zero; SET stock 0
        batch:  its rows' write waits for a busy database; its lock runs out
        reset:  takes the lock: stock 5, generation g1, the flag cleared
        batch:  its row is refused (another generation); SET the sold-out flag
        buyers: 409 sold_out from the new sale's 5 units, until the next reset

    Nor while the stock key is gone (evicted alone since the section read it): the
    flag would keep every buyer from the section that reloads the sale."""
    if generation is None:  # not known (before generations): as it was
        redis.set(sale.keys.soldout, 1)
        return
    scripts.script(redis, "flag_soldout")(
        keys=[sale.keys.soldout, sale.keys.stock_gen, sale.keys.stock], args=[generation])


def lock_timed_out(deps: Checkout, sale: SaleInfo, lock: Any) -> ShopError:
    """The answer to a buyer whose wait for the sale's lock ran out: 409 sold_out if the
    sale sold out meanwhile (its flag is up), else 503 busy.

    Buyers queued behind a slow section (``work_ms`` 300, 100 buyers for 20 units) heard
    503 "the stock lock was not free within 10s" after the sale had sold out, and came
    back to hear 409 (an API audit). The flag is what every later buyer is told by, so
    it answers these the same; a Redis that does not answer leaves the 503, and so does
    a reset in progress or a hold-off (the sale is about to sell again: a review)."""
    keys = sale.keys
    try:
        flags = deps.redis.mget(keys.soldout, keys.resetting, keys.holdoff)
    except RedisError:  # no answer: busy, as the wait says
        flags = [None, None, None]
    sold_out, resetting, held_off = flags
    if sold_out and not resetting and not held_off:
        return not_enough(sale.sku, 0)
    return lock_not_taken(sale.sku, lock, deps.lock_timeout_s, deps.lock_budget_s)
