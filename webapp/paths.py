"""Purchase paths: how a sale takes units off its stock, by strategy name.

* every ``lockcore`` strategy -> ``LockedPath`` (``lockedpath.py``): lock, GET, simulated
  work, SET, order, release; under a broken lock, a lost update: the sale oversells.
* ``atomic`` -> one Lua script checks and decrements; no lock at all (seed 002's
  lesson taken to its end: the cheapest lock is none).
* ``sql`` -> ``UPDATE sales SET remaining = remaining - :q WHERE remaining >= :q`` and
  the order insert in one transaction; Redis follows after the commit.

A path also owns how its stock is laid out in Redis (``load_stock``/``read_stock``),
so a sharded path can be added with ``register("atomic-sharded", ShardedPath())``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lockcore

from . import scripts
from .commits import reading
from .deadlines import LATE, LOST_REPLY, deadline, too_late
from .groupcommit import stock_after
from .keys import SaleKeys
from .logthrottle import PER_REQUEST
from .orders import give_back, insert_grouped, landed_batch, maybe_written, record_order
from .problems import (
    Busy,
    InvalidRequest,
    OrderInDoubt,
    SaleReset,
    SoldOut,
    not_enough,
    quoted,
)
from .saleinfo import generation, sale_fields, stock_key_lost
from .services import Checkout, PurchaseRequest, SaleInfo, over_the_limit, undo_take
from .statements import SALE_STOCK_GENERATION_STRATEGY

logger = logging.getLogger(__name__)


class StockPath:
    """A way to sell; the default stock layout is one integer key per sale."""

    safe = True
    #: the stock is not the sale's one key (``atomic-sharded``'s shards, on other slots):
    #: a reload restores it with ``restore_stock``, outside ``restore_sale.lua``
    stock_elsewhere = False
    #: a reload after Redis lost the sale starts a new generation (``saleinfo``), so a
    #: purchase whose units went with the lost data writes no row: for a path that takes
    #: units with no lock to hold the reload off, and writes its rows by generation
    new_generation_on_reload = False

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        raise NotImplementedError

    def record_taken(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                     written: Any = None) -> Any:
        """Finish a purchase whose units a script already took (only ``atomic``'s);
        ``written``: its row's outcome if the script's batch wrote it (``takenorders.py``)."""
        raise NotImplementedError(f"{type(self).__name__} takes its own stock")

    def load_stock(self, redis: Any, sale: SaleInfo, stock: int) -> None:
        redis.set(sale.keys.stock, stock)

    def reset_stock(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        """A reset's Redis side, after the reset committed the database's (its keys
        deleted). The generation is written for every strategy, so that an ``sql``
        purchase still in flight when its sale moved to another strategy leaves the
        new stock alone (``mirror_stock.lua``)."""
        # the generation after the stock: ``atomic-sharded``'s sold-out check reads it
        # before the shards (``ShardedPath._flag_sold_out``); the single-key paths write
        # both in one MULTI (``reset_redis``), where the order does not matter
        self.load_stock(redis, sale, stock)
        redis.set(sale.keys.stock_gen, generation)

    def read_stock(self, redis: Any, sale: SaleInfo) -> int | None:
        """The units left in Redis; None if Redis has no stock for the sale (it lost its
        data: the next buyer reloads it from the database)."""
        return self.stock_of([redis.get(key) for key in self.stock_keys(sale)])

    def stock_keys(self, sale: SaleInfo) -> list[str]:
        """The keys ``read_stock`` reads (the product list reads every sale's in one
        round trip: ``sales.list_products``)."""
        return [sale.keys.stock]

    def stock_of(self, values: list[bytes | None]) -> int | None:
        """``read_stock``'s answer from the values of ``stock_keys``."""
        (stock,) = values
        return None if stock is None else int(stock)

    def reset_redis(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        """A reset's whole Redis side in one MULTI/EXEC: the sale's keys deleted, its
        generation, stock and hash copy written. No buyer sees the sale half reset.

        **Failure timeline** it prevents (the contract sweep's resets amid a crowd)::

            reset:  deletes the keys (the stock, the hash copy)
            buyer:  finds no hash copy, reloads the sale, restores the stock (NX): 400
            buyer:  takes 1 unit, writes its order in the new sale: database 399
            reset:  SET stock 400: Redis one unit above the database, for good
        """
        def with_the_stock(pipe: Any) -> None:
            self.reset_stock(pipe, sessions, sale, stock, generation)

        self._write_copy(redis, sale, generation, with_the_stock)

    def _write_copy(self, redis: Any, sale: SaleInfo, generation: int,
                    with_it: Callable[[Any], None] | None = None) -> bool:
        """The sale's keys deleted and its hash copy written in one MULTI/EXEC, with
        ``with_it``'s commands, unless a generation as new stands: then nothing is
        written. False if a newer one stands (the caller leaves the stock to it too);
        True if this reset's copy is there now, written here or by an earlier try of
        this same reset (``sales._redis_side`` tries again after a connection error,
        and the first try may have run, its reply lost: written again, it put back the
        units its buyers had bought since, and forgot the buyers; a review).

        A reset writes Redis after its database commit, with nothing ordering the two
        against what other requests write meanwhile. The copy and the stock's
        generation are WATCHed, so the check and the write are one step.

        **Failure timeline** it prevents (the contract sweep's resets amid a crowd on
        ``atomic-sharded``, once in session 41's CI runs: Redis 294, the database 300,
        0 orders; ``test_reset_overtaken`` reproduces it)::

            reset:  commits stock 300, generation g5; has not written Redis yet
            buyers: the old sale's last ones hear their rows refused (the database is
                    at g5): the first drops the stale copy (``forget_stale_copy``)
            buyer:  finds no copy, reloads the sale as generation g6 (atomic paths
                    start their own: ``saleinfo.new_generation``): copy and stock g6
            reset:  writes copy and stock g5 over the reload's g6 (a shard at a time:
                    the copy g6 stood, its shards became g5's)
            buyers: those of g5 take units whose rows g6 refuses; those of g6 meet g5
                    shards, "stale": 503 to every buyer until the next reset

        The same goes for two resets at once, which HTTP keeps apart
        (``admin._one_reset_at_a_time``), unless Redis restarts and loses that lock."""
        newer = False

        def write(pipe: Any) -> None:
            nonlocal newer
            standing = _standing_generation(pipe, sale)
            newer = standing is not None and standing > generation
            if standing is not None and standing >= generation:
                return
            pipe.multi()
            pipe.delete(*sale.keys.all())
            if with_it is not None:
                with_it(pipe)
            pipe.hset(sale.keys.info, mapping=sale_fields(sale))

        # tried again from the top if a WATCHed key changed before the EXEC
        redis.transaction(write, sale.keys.info, sale.keys.stock_gen)
        return not newer

    def _reset_in_steps(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                        generation: int) -> None:
        """``reset_redis`` for a path whose stock cannot join one MULTI (its keys on
        other cluster slots, or its reset reads the database first): the sale's keys
        deleted and its new hash copy written in one MULTI, then the stock.

        **Failure timeline** of the copy written last, as it was::

            buyer:  finds no copy (Redis restarted), reads the sale: token, generation 1
            reset:  commits sql, generation 2; deletes the keys
            buyer:  writes its copy (restore_sale.lua: the copy is missing): token
            reset:  loads the stock; writes its copy: but the old buyers and sold-out
                    flag the reload wrote stay in the new sale

        With the copy written first, the reload finds it and writes nothing. A buyer who
        reads the new copy before the stock is there hears 503 (``sql`` sells from the
        database anyway; a shard of the old generation answers "stale")."""
        if self._write_copy(redis, sale, generation):
            # else a newer reset stands: its own steps write (or wrote) the stock. A
            # try again finds its own copy and writes the stock by generation: what an
            # earlier try wrote stands (``reset_stock``: a mirror, shards of its own)
            self.reset_stock(redis, sessions, sale, stock, generation)

    def restore_stock(self, redis: Any, sale: SaleInfo, stock: int) -> bool:
        """Put ``stock`` back after Redis lost it, unless someone already did (``NX``):
        of many buyers arriving at once, only the first restores, before anyone buys."""
        return bool(redis.set(sale.keys.stock, stock, nx=True))

    def _work(self, deps: Checkout, sale: SaleInfo) -> None:
        if sale.work_ms > 0:  # simulated business work: widens any race to see it
            deps.sleep(sale.work_ms / 1000)


class AtomicPath(StockPath):
    """Usually reached already done: ``atomic_checkout.lua`` (services.py) reserves the
    buyer and takes the units in the request's first round trip, and only
    ``record_taken`` is left. ``purchase`` is the same in steps, for a request with an
    Idempotency-Key (it must look for its earlier order first) or a sale reloaded from
    the database."""

    new_generation_on_reload = True

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        take = scripts.script(deps.redis, "atomic_purchase")
        generation = "" if sale.generation is None else sale.generation
        keys = sale.keys
        try:
            code, left = take(keys=[keys.stock, keys.soldout, keys.stock_gen, keys.taken],
                              args=[request.quantity, sale.per_user_limit, generation,
                                    deadline(deps.redis), request.user_id, request.nonce])
        except LOST_REPLY:  # it may have run: its units back, if it did
            undo_take(deps.redis, sale.sku, request, keys.stock, keys.taken)
            raise
        if code == LATE:
            raise too_late()
        if code == -2:
            raise over_the_limit(sale.per_user_limit)
        if code == -3:  # reset since this request looked the sale up: nothing taken
            raise SaleReset(sale.sku)
        if code == -4:  # the stock key alone is gone (an evicting Redis): reload it
            raise stock_key_lost(deps.redis, sale)
        if code == -1:  # fewer left than asked for: how many, as every path says
            raise not_enough(sale.sku, int(left))
        return self.record_taken(deps, sale, request)

    def record_taken(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                     written: Any = None) -> Any:
        """The units are taken: the simulated work, then the order row, shared with the
        concurrent purchases' (``groupcommit.py``); on failure the units go back. With
        ``written`` the script's batch already wrote the row (``takenorders.py``: only for
        a sale without simulated work): what is left is its answer.

        Nothing here holds off a reset, so the row is written only in the sale generation
        the units came from (``record_order``'s ``generation``).

        **Failure timeline** the generation prevents::

            buyer:  the script takes 1 unit of the sale (generation g0): 99 left
            reset:  deletes the orders, stock 100 in the database and in Redis (g1)
            buyer:  writes its order: the new sale has 1 order, database 99, Redis 100
            guard:  the UPDATE matches the sale only WHERE started_at is g0's: no row
                    is written, the unit is not given back (it was g0's), 503 busy
        """
        if written is None:
            try:
                self._work(deps, sale)
            except BaseException:
                give_back(deps.redis, sale.sku, request.quantity, sale.generation)
                raise
        return record_order(deps.sessions, deps.redis, sale, request.user_id,
                            request.quantity, None, request.idempotency_key, grouped=True,
                            generation=sale.generation, written=written)


class SqlPath(StockPath):
    """The database is the stock; Redis holds a copy, kept in step by
    ``mirror_stock.lua`` from what the database says after each commit (a DECRBY was
    lost or misplaced when a reset came between the commit and the decrement)."""

    def reset_redis(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        # the copy follows the database by generation (mirror_stock.lua), whatever
        # order the reset's and the buyers' writes land in
        self._reset_in_steps(redis, sessions, sale, stock, generation)

    def reset_stock(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        self._mirror(redis, sessions, sale)  # what the database says now, its generation

    def _mirror(self, redis: Any, sessions: Any, sale: SaleInfo) -> None:
        mirror_database_stock(redis, sessions, sale.id, sale.keys)

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        # the work happens before the transaction: under gevent a SQLite transaction
        # must not yield (see orders.py)
        self._work(deps, sale)
        try:  # with concurrent ones: each its own conditional UPDATE, one COMMIT
            # only in the generation read: one queued behind a reset sold from the new sale
            order = insert_grouped(deps.sessions, sale, request.user_id, request.quantity,
                                   request.idempotency_key, conditional=True,
                                   generation=sale.generation)
        except SoldOut:  # the flag is set if the database has none left (mirror_stock.lua)
            self._mirror(deps.redis, deps.sessions, sale)
            raise
        except Exception as exc:  # the COMMIT's reply lost: the row may be there all the same
            if not maybe_written(exc):
                raise
            # its row, not written (nothing to give back: the database is the stock), or
            # in doubt: the database could not tell. That was a plain "unavailable, try
            # again" 503 while the row was there: the buyer, retrying, heard 409
            # sold_out and never learned of the order (a PostgreSQL audit: 4 of ~300)
            order = landed_batch(deps.sessions, deps.redis, sale, [
                (request.user_id, request.quantity, request.idempotency_key)],
                sale.generation, database_stock=True)[0]
            if order is None:
                raise
            if isinstance(order, OrderInDoubt):  # the buyer stays reserved: settled later
                raise order from exc
        # The order is committed: from here on nothing may turn it into a 503 ("nothing
        # was bought"). The copy is kept in step best-effort; a miss (Redis down or slow)
        # leaves it above the database until the next purchase mirrors it.
        try:
            self._mirror_after(deps, sale)
        except Exception as exc:  # Redis down or late: the copy waits for the next buyer
            logger.warning("order %s of %s is committed, but its Redis stock copy was not "
                           "updated: %r", order.id, sale.sku, exc)
        return order

    def _mirror_after(self, deps: Checkout, sale: SaleInfo) -> None:
        """Keep the storefront in step, with what the commit left (no second read)."""
        after = stock_after(deps.sessions, sale.id)
        if after is None:
            self._mirror(deps.redis, deps.sessions, sale)
            return
        keys = _mirror_keys(sale.keys)
        args = [after[0], generation(after[1])]
        if deps.script_pipeline is not None:  # shared with concurrent purchases' scripts
            deps.script_pipeline.run("mirror_stock", keys, args)
        else:
            scripts.script(deps.redis, "mirror_stock")(keys=keys, args=args)


def mirror_database_stock(redis: Any, sessions: Any, sale_id: int, keys: SaleKeys,
                          only_sql: bool = False) -> None:
    """An ``sql`` sale's Redis copy of its stock as the database says now, with its
    generation (``mirror_stock.lua``); also after an order in doubt is settled
    (``orders._settle``: ``only_sql``, the sale may have been reset to another strategy
    since, whose Redis stock is its own; a review): the purchase that wrote it never
    mirrored."""
    with reading(sessions), sessions() as session:
        row = session.execute(SALE_STOCK_GENERATION_STRATEGY, {"b_sale_id": sale_id}).first()
    if row is None:  # the sale is gone
        return
    remaining, started_at, strategy = row
    if only_sql and strategy != "sql":  # sold another way now
        return
    scripts.script(redis, "mirror_stock")(keys=_mirror_keys(keys),
                                          args=[remaining, generation(started_at)])


def _mirror_keys(keys: SaleKeys) -> list[str]:
    """``mirror_stock.lua``'s keys for a sale: the copy, its generation, the sold-out
    flag, and the hash copy whose generation a late write must not go under."""
    return [keys.stock, keys.stock_gen, keys.soldout, keys.info]


def _standing_generation(pipe: Any, sale: SaleInfo) -> int | None:
    """The newest generation of the sale Redis holds (its copy's, or its stock's), read
    on ``pipe`` in WATCH mode, before its MULTI; None if neither is there."""
    copy, stock_gen = pipe.hget(sale.keys.info, "generation"), pipe.get(sale.keys.stock_gen)
    found = [int(value) for value in (copy, stock_gen) if value is not None]
    return max(found, default=None)


def _builtin() -> dict[str, StockPath]:
    from .lockedpath import LockedPath  # imports this module: only once it is loaded

    paths: dict[str, StockPath] = {name: LockedPath(name) for name in lockcore.names()}
    paths["atomic"] = AtomicPath()
    paths["sql"] = SqlPath()
    from .sharding import ShardedPath  # imports this module: only once it is loaded

    paths["atomic-sharded"] = ShardedPath()
    return paths


_PATHS: dict[str, StockPath] | None = None


def _paths() -> dict[str, StockPath]:
    global _PATHS
    if _PATHS is None:
        _PATHS = _builtin()
    return _PATHS


def register(name: str, path: StockPath) -> None:
    """Offer one more strategy to sales (e.g. ``atomic-sharded``)."""
    _paths()[name] = path


def names() -> list[str]:
    return list(_paths())


def known(name: str) -> StockPath:
    """The path of a strategy a client names (an admin's reset): 400 if unknown."""
    try:
        return _paths()[name]
    except KeyError:
        raise InvalidRequest(f"unknown strategy {quoted(name)}; choose one of "
                             f"{', '.join(_paths())}") from None


class UnknownStrategy(Busy):
    """A sale's row names a strategy this shop does not know: the server's data, not the
    request's."""


def path_for(name: str, sku: str | None = None) -> StockPath:
    """The path of a sale's strategy (``sku``'s, when the caller knows it), as the
    database or Redis hold it.

    **Failure timeline** (a text audit)::

        operator: UPDATE sales SET strategy = 'Token' (a strategy no shop has)
        buyer:    every purchase, and GET /api/sales/<sku>/audit: 400 invalid_request
                  "unknown strategy 'Token'; choose one of ...", the buyer blamed for
                  the server's data; and the admin reset that would mend it was 400 too
        fixed:    503 busy naming the sale's strategy and the reset that mends it,
                  logged once a minute; the reset takes the sale from there
    """
    try:
        return _paths()[name]
    except KeyError:
        pass
    sale = f"the sale of {sku}" if sku is not None else "this sale"
    PER_REQUEST.log(logger, logging.ERROR, ("unknown strategy", name, sku),
                    "%s names the strategy %s, which this shop does not know: what reads it "
                    "(a purchase once Redis's copy is reloaded, the product, the audit) is "
                    "refused (503) until an admin resets it with one of %s",
                    sale, quoted(name), ", ".join(_paths()))
    # a buyer's page says "try again in Ns": no sooner than an admin could act (it said
    # 5 s, to a buyer, of a sale only a reset mends; a UI audit)
    raise UnknownStrategy(f"{sale} is stopped: it names a strategy this shop does not "
                          f"know ({quoted(name)}); an admin reset with a known strategy "
                          "mends it", retry_after_s=60)
