"""The catalogue, resetting a sale and auditing it (no Flask here either).

The audit is the lab's verdict. Units sold come from the order rows (the truth),
``remaining`` from Redis (what buyers saw). A correct strategy keeps
``remaining + units_sold == initial_stock``; a lost update leaves Redis *higher*
than it should be, so an oversold sale shows both ``oversold > 0`` and a sum above
the initial stock.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from .commits import reading
from .keys import SaleKeys
from .models import Order, Product, Sale, shown_sale_start
from .paths import StockPath, UnknownStrategy, path_for
from .problems import Busy, UnknownSku, first_line
from .saleinfo import SaleInfo, generation, next_started_at
from .validation import plausible_sku

logger = logging.getLogger(__name__)

#: a sale's per-buyer limit when none is set: as many units as one purchase may ask
#: for (``api.MAX_QUANTITY``), so only the stock refuses. The contract's purchase takes
#: any ``quantity``; a limit (``PUT ... {"limit": N}``) is this shop's extension.
NO_LIMIT = 1_000_000


def _info(sale: Sale) -> SaleInfo:
    return SaleInfo(sale.id, sale.sku, sale.strategy, sale.work_ms, sale.per_user_limit,
                    sale.initial_stock, generation(sale.started_at))


def _live_stock(sale: Sale, redis: Any) -> int | None:
    """The sale's stock in Redis; None if Redis did not answer (within its timeout) or
    has no stock for it (it lost its data, and no buyer has reloaded it yet)."""
    try:
        return path_for(sale.strategy, sale.sku).read_stock(redis, _info(sale))
    except RedisError:
        return None


def _in_checkout(database_remaining: int, redis_remaining: int) -> int:
    """Units Redis has taken whose orders the database has not written yet: amid a sale,
    those in checkout (written or given back within moments); in a settled sale, none,
    unless units went missing, and the audit then says ``consistent: false``."""
    return max(0, database_remaining - redis_remaining)


def _view(product: Product, sale: Sale, stock: int | None) -> dict[str, Any]:
    """``stock``: Redis's live count, or None for the database's (Redis is down, or lost
    the sale and no buyer has reloaded it yet)."""
    if stock is None:  # the storefront keeps working on the database's count
        stock = sale.remaining
    stock = max(stock, 0)
    return {"sku": product.sku, "name": product.name, "price": product.price_cents / 100,
            "description": product.description, "stock": stock,
            "sold": sale.initial_stock - sale.remaining, "initial_stock": sale.initial_stock,
            # mid-sale "stock + sold" falls short of the initial stock by these (an API
            # audit asked where they were)
            "in_checkout": _in_checkout(sale.remaining, stock),
            "strategy": sale.strategy, "work_ms": sale.work_ms, "limit": sale.per_user_limit,
            # set by every reset: how a watcher (the storefront) tells a new sale apart
            # (to the millisecond: an atomic sale's reload moves the rest, ``saleinfo``)
            "sale_started_at": shown_sale_start(sale.started_at)}


def list_products(sessions: sessionmaker[Session], redis: Any) -> list[dict[str, Any]]:
    with reading(sessions), sessions() as session:
        rows = session.execute(select(Product, Sale).join(Sale, Sale.sku == Product.sku)
                               .order_by(Product.sku)).all()
        stocks = _live_stocks([sale for _, sale in rows], redis)
        return [_view(product, sale, stock)
                for (product, sale), stock in zip(rows, stocks, strict=True)]


def _live_stocks(sales: list[Sale], redis: Any) -> list[int | None]:
    """Every sale's stock in Redis, in one round trip (a pipeline of GETs); None for a
    sale Redis has no stock for, and for all of them if Redis did not answer. One GET
    per product took 0.4-0.9 s for a list of 1,000 (a data-at-scale audit), and a paused
    Redis cost one timeout per product before; a sale Redis had lost showed every
    product after it from the database. A path of its own (``paths.register``) that
    reads its stock its own way (``read_stock`` without ``stock_keys``) is asked alone."""
    plans: list[tuple[StockPath, SaleInfo, list[str]] | None] = []
    for sale in sales:
        try:
            path = path_for(sale.strategy, sale.sku)
        except UnknownStrategy:  # a strategy this shop does not know: the database's count
            plans.append(None)
            continue
        info = _info(sale)
        plans.append((path, info, path.stock_keys(info) if _reads_keys(path) else []))
    pipe = redis.pipeline(transaction=False)
    for plan in plans:
        for key in plan[2] if plan else []:
            pipe.get(key)
    try:
        values = pipe.execute() if len(pipe) else []
    except RedisError:
        return [None] * len(plans)
    stocks: list[int | None] = []
    at = 0
    for plan in plans:
        if plan is None:
            stocks.append(None)
            continue
        path, info, keys = plan
        if keys:
            stocks.append(path.stock_of(values[at:at + len(keys)]))
            at += len(keys)
        else:
            try:
                stocks.append(path.read_stock(redis, info))
            except RedisError:
                stocks.append(None)
    return stocks


def _reads_keys(path: StockPath) -> bool:
    """Whether ``path``'s stock is its ``stock_keys``' values (``stock_of``): every
    path of this shop's; one that overrides ``read_stock`` alone is not."""
    kind = type(path)
    return kind.read_stock is StockPath.read_stock or kind.stock_keys is not StockPath.stock_keys


def get_product(sessions: sessionmaker[Session], redis: Any, sku: str) -> dict[str, Any]:
    with reading(sessions), sessions() as session:
        row = session.execute(select(Product, Sale).join(Sale, Sale.sku == Product.sku)
                              .where(Product.sku == sku)).first()
        if row is None:
            raise UnknownSku(f"no product with sku {sku!r}")
        return _view(row[0], row[1], _live_stock(row[1], redis))


def reset_sale(sessions: sessionmaker[Session], redis: Any, sku: str, *, stock: int,
               strategy: str, work_ms: int = 0, limit: int = NO_LIMIT) -> dict[str, Any]:
    """Delete the sale's orders, set its stock and strategy, load the stock into Redis.

    The sale's row is locked first (``FOR UPDATE``; SQLite runs one writer at a time
    anyway): every purchase's transaction updates that row before it inserts its order,
    so the reset waits for those in flight and its DELETE sees their orders.

    **Failure timeline** the row lock prevents (PostgreSQL, READ COMMITTED)::

        buyer:  UPDATE sales (generation g0): row locked; INSERT its order
        reset:  DELETE the sale's orders: the buyer's is not committed, not seen
        reset:  UPDATE sales: waits for the buyer's row lock
        buyer:  COMMIT: an order of the old sale survives into the new one
        reset:  stock 100, started_at g1: the new sale has an order it never sold
                (a contract audit: 7 runs of 8 inconsistent under resets mid-sale)
        locked: the reset waits before its DELETE; a buyer after it finds g1 and
                writes nothing (``TAKE_UNITS_OF_GENERATION``)

    **Failure timeline** of the Redis side failing once the database's is committed (a
    review; Redis restarted between the two)::

        reset:  commits the database: orders deleted, stock 2 (generation g1)
        redis:  restarts (its data kept): the reset's Redis side fails, 503
        Redis:  still the old sale: stock 9, its sold-out flag if it had sold out
        buyers: nine ``token`` orders of the old stock in the new sale of two
                (oversold 7), or 409 sold_out for good with two units unsold
        fixed:  the Redis side is tried again for a few seconds (a restart's gap);
                and a purchase's row is written only in its stock's generation, so
                the old sale sells nothing: the first refused row drops the stale copy
                and the next buyer loads the new sale (``saleinfo.forget_stale_copy``)

    Not by deleting the old keys first: a buyer who found them gone between the
    database's commit and the Redis side reloaded the sale, and an ``atomic`` or
    ``atomic-sharded`` reload starts a generation of its own, which the reset's copy
    then trailed (units lost in a sweep of resets amid a crowd). If Redis stays down
    past the tries, the 503 says the database side is done: a sold-out old sale stays
    sold out in Redis until the next reset.
    """
    path = path_for(strategy)
    with _in_flight(redis, sku):
        with sessions.begin() as session:
            sale = session.scalars(
                select(Sale).where(Sale.sku == sku).with_for_update()).first()
            if sale is None:
                raise UnknownSku(f"no product with sku {sku!r}")
            session.execute(delete(Order).where(Order.sale_id == sale.id))
            sale.initial_stock = sale.remaining = stock
            sale.strategy, sale.work_ms, sale.per_user_limit = strategy, work_ms, limit
            sale.started_at = next_started_at(sale.started_at)  # after a reload's, too
            info, started = _info(sale), generation(sale.started_at)
        _redis_side(path, redis, sessions, info, stock, started)
    logger.info("sale %s reset: stock %d, strategy %s, work %d ms", sku, stock, strategy, work_ms)
    return {"sku": sku, "stock": stock, "strategy": strategy, "work_ms": work_ms, "limit": limit}


#: how long a reset tries its Redis side again once its database side is committed
REDIS_SIDE_TRIES_S = 5.0
#: how long a reset's in-flight mark lives at most (``SaleKeys.reset_in_flight``): its
#: database side (behind the purchases holding the sale's row) and its Redis side's
#: tries, as a rule
RESET_IN_FLIGHT_MS = 30_000


@contextlib.contextmanager
def _in_flight(redis: Any, sku: str) -> Iterator[None]:
    """Mark the reset in flight in Redis while it runs (``SaleKeys.reset_in_flight``):
    a buyer who finds no copy of the sale meanwhile (the old sale's last buyers, refused
    by the database once it has committed, drop theirs) waits for this reset's copy
    rather than reload the sale as if Redis had lost it (``saleinfo.cached_sale``, with
    the failure timeline).

    Best effort: a Redis that does not take the mark does not stop the reset (it would
    not take the new stock either: ``_redis_side`` says so), and a mark left behind (its
    DELETE failed, the worker killed) costs buyers who find no copy its TTL in 503s. A
    reset that outlives the mark's TTL leaves the behaviour before it: a reload.
    Resets of one sale run one at a time over HTTP (``admin._one_reset_at_a_time``);
    two from a library caller at once may lift each other's mark."""
    key = SaleKeys(sku).reset_in_flight
    try:
        with contextlib.suppress(RedisError):
            redis.set(key, 1, px=RESET_IN_FLIGHT_MS)
        yield
    finally:
        with contextlib.suppress(RedisError):
            redis.delete(key)


def _redis_side(path: Any, redis: Any, sessions: sessionmaker[Session], info: SaleInfo,
                stock: int, started: int) -> None:
    """``path.reset_redis``, tried again while Redis is unreachable (a restart's gap)
    for ``REDIS_SIDE_TRIES_S``; then a 503 that says the database side is done."""
    pause_s, deadline = 0.1, time.monotonic() + REDIS_SIDE_TRIES_S
    while True:
        try:
            path.reset_redis(redis, sessions, info, stock, started)
            return
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if time.monotonic() + pause_s > deadline:
                logger.warning("sale %s reset in the database, not in Redis: %r",
                               info.sku, exc)
                raise Busy(f"the sale of {info.sku} was reset in the database (its orders "
                           "deleted), but Redis did not take the new stock: reset it again "
                           "once Redis is back", retry_after_s=1) from exc
            time.sleep(pause_s)  # gevent's, under gunicorn
            pause_s = min(2 * pause_s, 1.0)
        except RedisError as exc:  # refused: out of memory, no permission, read-only
            # it was "redis is unavailable, try again shortly" (errors.redis_down), the
            # database side done all the same (a Redis audit)
            logger.warning("sale %s reset in the database, not in Redis: %r", info.sku, exc)
            why = first_line(exc)[:200] or type(exc).__name__
            raise Busy(f"the sale of {info.sku} was reset in the database (its orders "
                       f"deleted), but Redis refused the new stock ({why}): reset it "
                       "again once Redis takes writes", retry_after_s=1) from exc


def create_product(sessions: sessionmaker[Session], sku: str, name: str, price_cents: int,
                   *, stock: int, strategy: str, description: str = "") -> bool:
    """Add a product and its sale unless the sku exists (demo seeding is idempotent);
    True if it was added. The database only: reset the sale (``reset_sale``, as
    ``demo.seed`` does) to give it its Redis copy. Until then a buyer finds no copy and
    reloads it as after a Redis restart; for a lock strategy that holds buyers off one
    lock TTL ("Redis restarted: ... sells again once a lock holder from before it is
    done"), as it must when it cannot tell the two apart (a data-at-scale audit).

    :raises ValueError: for a sku the API answers 404 (``validation.plausible_sku``):
        a product ``..`` was listed on the storefront and no browser could buy it; and
        for a name or description longer than its column: SQLite stored a 10,000-character
        name past String(200), which PostgreSQL refuses (a text audit)."""
    if not plausible_sku(sku):
        raise ValueError(f"sku {sku!r} cannot be reached through the API: 1-64 printable "
                         "characters, no '/', not only dots")
    for field, value in (("name", name), ("description", description)):
        most = Product.__table__.c[field].type.length
        if most is not None and len(value) > most:
            raise ValueError(f"the product's {field} is {len(value)} characters long; "
                             f"its column holds at most {most}")
    from sqlalchemy.exc import IntegrityError

    try:
        with sessions.begin() as session:
            if session.get(Product, sku) is not None:
                return False
            session.add(Product(sku=sku, name=name, price_cents=price_cents,
                                description=description))
            session.flush()
            session.add(Sale(sku=sku, initial_stock=stock, remaining=stock,
                             strategy=strategy, work_ms=0, per_user_limit=NO_LIMIT))
    except IntegrityError:
        # added meanwhile by another seeder (two hosts' migrate-and-seed lines at once:
        # one ended in a traceback, "Key (sku)=(sku-1) already exists"; a multi-host
        # audit): the product is there, as asked
        with sessions() as session:
            if session.get(Product, sku) is None:
                raise
        return False
    return True


def buyers(sessions: sessionmaker[Session], sku: str, after: str, limit: int) -> list[str]:
    """The sale's buyers with an order, each once, in the database's order of user ids:
    at most ``limit`` of those after ``after`` (``""``: from the first). A client walks
    the list a page at a time, each from the last id of the one before; the unique
    ``(sale_id, user_id)`` index serves the filter and the order, so a deep page costs
    what the first does. Only the database is read: the orders are the truth."""
    with sessions() as session:
        sale_id = session.scalar(select(Sale.id).where(Sale.sku == sku))
        if sale_id is None:
            raise UnknownSku(f"no product with sku {sku!r}")
        return list(session.scalars(
            # no DISTINCT: the unique (sale_id, user_id) index makes each buyer one row,
            # and with it, on stale statistics, PostgreSQL sorted every later row of a
            # 1M-order sale for each page (0.5-1.5 s a page; 15 ms by the index)
            select(Order.user_id)
            .where(Order.sale_id == sale_id, Order.user_id > after)
            .order_by(Order.user_id).limit(limit)))


def audit(sessions: sessionmaker[Session], redis: Any, sku: str) -> dict[str, Any]:
    """The sale's books: the database's figures, then Redis's stock.

    The database's figures are one statement, so one snapshot: each order transaction
    takes its units off ``sales.remaining`` and inserts its row together, and the
    snapshot holds ``database_remaining + units_sold == initial_stock``. Read in three
    statements (three snapshots under PostgreSQL's READ COMMITTED and SQLite's
    autocommit reads), a purchase committed between them showed in one figure and not
    the other: half the audits polled amid a sale said ``consistent: false`` for a safe
    strategy (a contract audit). Redis is read after, so amid a sale it may be ahead by
    the units in checkout: ``consistent`` is false then (1-5 of about 100 audits polled
    amid a 300-buyer sale, an API audit), and ``in_checkout`` says by how many; a
    watcher waits for it to come to 0 before it calls the sale wrong. It is approximate
    (an order committed between the two reads counts in it too), 0 for ``sql`` (Redis
    mirrors the database after each commit), and a units count that stays put in a
    settled sale is units lost, not in checkout (the admin page says so once it has
    stayed longer than a purchase can take: ``shop.purchase_timeout_s``)."""
    with sessions() as session:
        sale = session.scalars(select(Sale).where(Sale.sku == sku)).first()
        if sale is None:
            raise UnknownSku(f"no product with sku {sku!r}")
        info, sale_id = _info(sale), sale.id
        of_sale = Order.sale_id == sale_id
        books = session.execute(select(
            select(Sale.initial_stock).where(Sale.id == sale_id).scalar_subquery(),
            select(Sale.remaining).where(Sale.id == sale_id).scalar_subquery(),
            select(func.count(Order.id)).where(of_sale).scalar_subquery(),
            select(func.coalesce(func.sum(Order.quantity), 0)).where(of_sale)
            .scalar_subquery(),
            select(func.count()).select_from(
                select(Order.user_id).where(of_sale).group_by(Order.user_id)
                .having(func.count(Order.id) > 1).subquery()).scalar_subquery(),
        )).one()
    initial, db_remaining, orders, units, duplicates = books
    if initial is None:  # deleted since the first read
        raise UnknownSku(f"no product with sku {sku!r}")
    remaining = path_for(info.strategy, info.sku).read_stock(redis, info)
    copied = remaining is not None
    if remaining is None:  # Redis has no copy (the caller reloads one first: api.audit)
        remaining = 0
    oversold = max(0, units - initial)
    # units in checkout only where the database's own books add up and Redis has the
    # sale: a decrement the database lost, or a stock key evicted, is no checkout (a
    # review: the admin page called both "not yet" for good)
    in_checkout = (_in_checkout(db_remaining, remaining)
                   if copied and db_remaining + units == initial else 0)
    return {"sku": sku, "strategy": info.strategy, "initial_stock": initial,
            "remaining": remaining, "database_remaining": db_remaining, "orders": orders,
            "units_sold": units, "oversold": oversold, "duplicate_buyers": duplicates,
            "in_checkout": in_checkout,
            "consistent": (remaining + units == initial and oversold == 0
                           and duplicates == 0 and remaining == db_remaining)}
