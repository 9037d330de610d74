"""Writing the order row: the one place where a purchase becomes durable.

Rule: *a purchase either produces exactly one order row or returns its unit to
stock*. So every path decrements the stock first, then calls ``record_order``, which
puts the units back (``INCRBY``) if the write fails for any reason, and translates the
UNIQUE violations into the shop's answers.

Under gevent with SQLite the transaction must never yield to another greenlet: SQLite's
busy handler blocks the whole worker process, so a greenlet waiting for the write lock
would stall the one holding it. Nothing between BEGIN and COMMIT here talks to Redis
or sleeps.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from . import scripts
from .batching import Pending
from .commits import CommitLost, answered_within, committing, reading, remote
from .groupcommit import reset_since, writer_for
from .keys import SaleKeys
from .models import Order, PlacedOrder, Sale, utcnow
from .problems import (
    Busy,
    InvalidRequest,
    OrderInDoubt,
    Replay,
    SaleMovedOn,
    SaleReset,
    SoldOut,
    already_bought,
)
from .retrylater import RetryLater, release_or_settle_later
from .saleinfo import shown_generation, started_at
from .statements import (
    INSERT_ORDERS,
    TAKE_UNITS,
    TAKE_UNITS_IF_LEFT,
    TAKE_UNITS_IF_LEFT_OF_GENERATION,
    TAKE_UNITS_OF_GENERATION,
)
from .writedeadline import LANDED_CHECK_S, ORDER_WRITE_S, bounded

logger = logging.getLogger(__name__)

KEY_USED_ELSEWHERE = "this Idempotency-Key was already used for another purchase"
#: a key another buyer sent first in this sale: bound to them whether or not their try
#: made an order (a 409 "only 1 left" binds it too), so "used for another purchase"
#: was untrue of a key whose first try bought nothing (an HTTP audit)
KEY_OTHER_BUYERS = ("this Idempotency-Key was sent first by another buyer in this sale: "
                    "it stays theirs until the sale is reset; use a key of your own")


def find_order_or_key(sessions: sessionmaker[Session], sale_id: int, user_id: str,
                      key: str) -> tuple[Order | None, Order | None]:
    """The user's order in this sale, and the order ``key`` made (either may be None;
    both are the same order for a replayed purchase). One query."""
    with reading(sessions), sessions() as session:
        rows = session.scalars(select(Order).where(
            or_(and_(Order.sale_id == sale_id, Order.user_id == user_id),
                Order.idempotency_key == key))).all()
    mine = next((o for o in rows if o.sale_id == sale_id and o.user_id == user_id), None)
    keyed = next((o for o in rows if o.idempotency_key == key), None)
    return mine, keyed


def has_order(sessions: sessionmaker[Session], sku: str, user_id: str) -> bool:
    """Whether ``user_id`` has an order in the current sale of ``sku``."""
    with reading(sessions), sessions() as session:
        return session.scalar(
            select(Order.id).join(Sale, Sale.id == Order.sale_id)
            .where(Sale.sku == sku, Order.user_id == user_id).limit(1)) is not None


def _find_by_key(sessions: sessionmaker[Session], key: str) -> Order | None:
    with reading(sessions), sessions() as session:
        return session.scalars(select(Order).where(Order.idempotency_key == key)).first()


def new_order(sale: Any, user_id: str, quantity: int, fencing_token: int | None,
              idempotency_key: str | None, created_at: datetime | None = None
              ) -> tuple[PlacedOrder, dict[str, Any]]:
    """The order (no id yet) and its row's columns; ``created_at`` now unless given."""
    row = {"sale_id": sale.id, "sku": sale.sku, "user_id": user_id, "quantity": quantity,
           "strategy": sale.strategy, "fencing_token": fencing_token,
           "idempotency_key": idempotency_key,
           "created_at": utcnow() if created_at is None else created_at}
    return PlacedOrder(**row), row


def insert_grouped(sessions: sessionmaker[Session], sale: Any, user_id: str, quantity: int,
                   idempotency_key: str | None, fencing_token: int | None = None,
                   *, conditional: bool = False, generation: int | None = None,
                   written: Pending[Any] | None = None) -> PlacedOrder:
    """``insert_order`` in a transaction shared with concurrent ones (``groupcommit.py``):
    for a purchase whose stock is already taken, or with ``conditional`` (the ``sql``
    strategy) taking it from ``sales.remaining`` (else ``SoldOut``).

    :param written: the row is already written, by the script batch that took the
        units (``takenorders.py``): its outcome is answered as if written here."""
    try:
        if written is not None:
            order: PlacedOrder = written.outcome()
            return order
        order, row = new_order(sale, user_id, quantity, fencing_token, idempotency_key)
        return writer_for(sessions, conditional).write(order, row, generation)
    except IntegrityError:
        explain_conflict(sessions, sale, user_id, idempotency_key)
        raise


def insert_order(sessions: sessionmaker[Session], sale: Any, user_id: str, quantity: int,
                 fencing_token: int | None, idempotency_key: str | None,
                 *, conditional: bool = False, generation: int | None = None) -> PlacedOrder:
    """One transaction: count the units off ``sales.remaining`` and insert the order.

    :param conditional: the ``sql`` strategy: only if ``remaining >= quantity``, else
        ``SoldOut``. The lock paths decrement unconditionally, so a broken lock shows
        up as a negative ``remaining`` in the database.
    :param generation: the sale generation the units were taken from (lock-free paths):
        if a reset has started another since, ``SaleReset`` and nothing is written.
    """
    order, row = new_order(sale, user_id, quantity, fencing_token, idempotency_key)
    decrement = TAKE_UNITS_IF_LEFT if conditional else TAKE_UNITS
    parameters: dict[str, Any] = {"b_sale_id": sale.id, "b_units": quantity}
    if generation is not None:
        decrement = TAKE_UNITS_IF_LEFT_OF_GENERATION if conditional else TAKE_UNITS_OF_GENERATION
        parameters["b_started_at"] = started_at(generation)
    try:
        # Core statements on the session's connection: writing the order was a third of
        # a purchase's CPU in the profile, much of it the ORM's unit of work (identity
        # map, flush ordering, events) for one UPDATE and one INSERT of a fixed shape
        # the whole transaction within one budget, not each statement (writedeadline.py)
        deadline = time.monotonic() + ORDER_WRITE_S
        with committing(sessions.begin(), remote(_dialect(sessions)), deadline) as session:
            connection = bounded(session.connection(), deadline)
            if connection.execute(decrement, parameters).rowcount == 0:
                if generation is not None and (not conditional or reset_since(
                        connection, sale.id, generation)):
                    raise SaleMovedOn(sale.sku)
                raise SoldOut(f"{sale.sku} is sold out")
            order.id = connection.execute(INSERT_ORDERS, row).scalar_one()
        if generation is not None:  # written only in that generation (the UPDATE's WHERE)
            order.sale_started_at = shown_generation(generation)
    except IntegrityError:
        explain_conflict(sessions, sale, user_id, idempotency_key)
        raise
    return order


def _dialect(sessions: sessionmaker[Session]) -> str:
    bind = sessions.kw.get("bind")
    return "" if bind is None else str(bind.dialect.name)


def explain_conflict(sessions: sessionmaker[Session], sale: Any, user_id: str,
                     idempotency_key: str | None) -> None:
    """Turn a UNIQUE violation into ``Replay``, ``AlreadyPurchased`` or ``InvalidRequest``;
    any other refusal (a CHECK constraint, a trigger) into a 503 ``Busy``.

    **Failure timeline** the last check prevents: a trigger refuses ann's row (an
    ``IntegrityError`` too); she hears 409 already_purchased with no order, and stays
    reserved, so her retry after the trigger is gone hears it again, until a reset."""
    if idempotency_key is not None:
        earlier = _find_by_key(sessions, idempotency_key)
        if earlier is not None:
            if earlier.sale_id == sale.id and earlier.user_id == user_id:
                raise Replay(earlier)
            raise InvalidRequest(KEY_USED_ELSEWHERE)
    with sessions() as session:
        mine = session.scalar(select(Order.id).where(Order.sale_id == sale.id,
                                                     Order.user_id == user_id).limit(1))
    if mine is None:
        raise Busy(f"the database refused the order for {sale.sku}; nothing was bought")
    raise already_bought(user_id, sale.sku)


def record_order(sessions: sessionmaker[Session], redis: Any, sale: Any, user_id: str,
                 quantity: int, fencing_token: int | None,
                 idempotency_key: str | None, *, grouped: bool = False,
                 generation: int | None = None,
                 stock_keys: tuple[str, str] | None = None,
                 written: Pending[Any] | None = None,
                 relock: Relock | None = None,
                 lease: Callable[[], bool] | None = None) -> PlacedOrder:
    """Insert the order after Redis stock was taken; on any failure give the units back.

    :param grouped: share the transaction with concurrent purchases (the lock-free
        paths, and a combined batch's orders inside its section: ``combining.py``).
    :param generation: the sale generation the units were taken from. The row is
        written only in that generation, else ``SaleReset``; units go back only to that
        generation's stock. A lock-free path (``atomic``) takes them without holding off
        resets; a lock path writes inside the section a reset waits for, but only while
        its lock lives (``section.py``). None: written and given back unconditionally.
    :param stock_keys: where the units came from, ``(stock, its generation)``: the
        sale's own keys unless given (``atomic-sharded``: the shard's).
    :param written: with ``grouped``, the row's outcome if it is already written
        (``takenorders.py``); its error is handled as a write's here would be.
    :param relock: a lock path's (``Relock``): its sale's lock, unacquired, for a
        give-back that waits until the database can tell whether the row was written
        (``IN_DOUBT``).
    :param lease: a lock path's, with ``relock``: whether its section still holds the
        lock (``section.lease_renewed``); if not, a failed row's units go back later,
        under the lock (``give_back_under_lock``), not over the next holder's read.
    """
    try:
        if grouped:
            return insert_grouped(sessions, sale, user_id, quantity, idempotency_key,
                                  fencing_token, generation=generation, written=written)
        return insert_order(sessions, sale, user_id, quantity, fencing_token, idempotency_key,
                            generation=generation)
    except SaleReset:  # the units were the old sale's, whose stock the reset replaced
        raise
    except Exception as exc:
        if maybe_written(exc):  # the COMMIT's reply lost: did the row land after all?
            landed = landed_after_all(sessions, redis, sale, user_id, quantity,
                                      idempotency_key, generation, stock_keys, relock)
            if landed is not None:
                return landed
        if relock is not None and lease is not None and not lease():
            give_back_under_lock(sessions, redis, sale, [(user_id, quantity, idempotency_key)],
                                 generation, relock, stock_keys)
        else:
            give_back(redis, sale.sku, quantity, generation, stock_keys)
        raise
    except BaseException:
        # Interrupted (a worker stopping: gevent kills its greenlets at gunicorn's
        # graceful timeout; Ctrl-C): the row may be in a batch another greenlet
        # commits, or its COMMIT sent. Its units went back all the same, and a row
        # that landed left Redis a unit ahead of the database: the next buyers
        # oversold (an operator audit: a HUP mid-sale, 8 oversold of 40). Kept taken
        # instead: written, nothing is amiss; not, they sit in checkout until the
        # checkout watch reloads the sale from the database (``checkoutwatch.py``).
        logger.warning("the purchase of %r (%s) was interrupted while its order was "
                       "being written; if it was not, its %d unit(s) stay in checkout "
                       "until the sale is reloaded", user_id, sale.sku, quantity)
        raise


def maybe_written(error: BaseException) -> bool:
    """Whether a failed write may have committed its row all the same: the connection
    failed with the COMMIT sent and its reply lost (``commits.CommitLost``). Any other
    error (no connection, a statement refused, one of the shop's answers) wrote nothing."""
    return isinstance(error, CommitLost)


def _written_rows(sessions: sessionmaker[Session], sale_id: int,
                  wanted: list[tuple[str, int, str | None]],
                  within_s: float = LANDED_CHECK_S) -> list[Order | None]:
    """For each ``(user_id, quantity, idempotency_key)``: its row in the sale if it is
    that purchase's (its quantity and key), else None. One query, after the sale row's
    lock; within ``within_s`` on a remote database (else ``NoAnswer``, or the lock's
    timeout: it cannot tell yet).

    **Failure timeline** the lock prevents (a PostgreSQL audit)::

        buyer:  its write's COMMIT is stuck (a frozen backend); given up at its deadline
        look:   another connection's snapshot: no row, the transaction is still open
        buyer:  its unit goes back to stock and is sold again
        COMMIT: goes through: one unit sold twice

    Every order write takes the sale row (its UPDATE) before it inserts, and holds it
    until it ends: waiting for that lock (``FOR SHARE``) reads the rows after it."""
    users = [user_id for user_id, _, _ in wanted]
    dialect = _dialect(sessions)
    with answered_within(within_s, remote(dialect)), sessions() as session:
        if dialect == "postgresql":  # the server gives up the lock wait when we do
            session.execute(text(f"SET LOCAL lock_timeout = {max(int(within_s * 1000), 1)}"))
        if remote(dialect):  # (SQLite: a COMMIT is never in doubt, nothing to wait for)
            session.execute(select(Sale.id).where(Sale.id == sale_id)
                            .with_for_update(read=True))
        rows = {row.user_id: row for row in session.scalars(select(Order).where(
            Order.sale_id == sale_id, Order.user_id.in_(users)))}
    found = []
    for user_id, quantity, key in wanted:
        row = rows.get(user_id)
        mine = row is not None and row.quantity == quantity and row.idempotency_key == key
        found.append(row if mine else None)
    return found


def landed_after_all(sessions: sessionmaker[Session], redis: Any, sale: Any, user_id: str,
                     quantity: int, idempotency_key: str | None, generation: int | None,
                     stock_keys: tuple[str, str] | None = None,
                     relock: Relock | None = None) -> Any:
    """After a write that ``maybe_written``: the order if its row is in the database
    (the purchase succeeded: 201), None if it is not (the caller gives the units back).

    **Failure timeline** it prevents (a helper's proxy dropping connections mid-COMMIT)::

        buyer:  takes 1 unit in Redis; its row's COMMIT reaches PostgreSQL and commits
        link:   drops before the reply: the write raises OperationalError
        buyer:  gives its unit back (Redis +1) and answers 503 "nothing was bought"
        sale:   sells that unit again: one order more than the stock (49 oversold)

    If the database cannot be asked either, ``OrderInDoubt`` (503): the units stay
    taken and the buyer reserved, and ``orders.IN_DOUBT`` asks again later."""
    outcome = landed_batch(sessions, redis, sale, [(user_id, quantity, idempotency_key)],
                           generation, stock_keys, relock)[0]
    if isinstance(outcome, OrderInDoubt):
        raise outcome
    return outcome


def landed_batch(sessions: sessionmaker[Session], redis: Any, sale: Any,
                 wanted: list[tuple[str, int, str | None]], generation: int | None,
                 stock_keys: tuple[str, str] | None = None,
                 relock: Relock | None = None, database_stock: bool = False) -> list[Any]:
    """``landed_after_all`` for several purchases of one sale in one query: for each,
    its order, None (not written), or an ``OrderInDoubt`` (queued for later).
    ``database_stock``: the database is the stock (``sql``): a row found missing later
    has no units to give back."""
    started = time.monotonic()
    try:
        return list(_written_rows(sessions, sale.id, wanted))
    except Exception as exc:  # noqa: BLE001 - asked once more, unless that took long
        failure: Exception = exc
    spent = time.monotonic() - started
    if spent < LANDED_CHECK_S / 2:  # within what is left of the look's time
        time.sleep(0.05)
        try:
            return list(_written_rows(sessions, sale.id, wanted,
                                      LANDED_CHECK_S - spent - 0.05))
        except Exception as exc:  # noqa: BLE001 - in doubt: settled later
            failure = exc
    outcomes: list[Any] = []
    for user_id, quantity, key in wanted:
        logger.warning("order of %r for %s may be written: the database could not tell "
                       "(%r); %s until it can", user_id, sale.sku, failure,
                       "the buyer stays reserved" if database_stock
                       else f"its {quantity} unit(s) stay taken")
        IN_DOUBT.add(_InDoubt(sessions, redis, sale.sku, sale.id, user_id, quantity,
                              key, _generation_of(sale, generation), stock_keys, relock,
                              database_stock=database_stock))
        outcomes.append(OrderInDoubt(sale.sku))
    return outcomes


def give_back_under_lock(sessions: sessionmaker[Session], redis: Any, sale: Any,
                         wanted: list[tuple[str, int, str | None]], generation: int | None,
                         relock: Relock,
                         stock_keys: tuple[str, str] | None = None) -> None:
    """The units of failed rows whose lock section has lost its lock, given back later
    under the lock (``IN_DOUBT``'s settle gives them back once, holding the sale's lock:
    this worker's next purchase, or its drain every few seconds), not at once: the next
    holder may have read the stock already, and its SET would overwrite an INCRBY now
    (``section.lease_renewed`` has the failure timeline). With the defaults the lock and
    the row's write have 10 s each, the lock from its acquire: a write that ran out of
    time has outlived the lock, and its units come back this way."""
    for user_id, quantity, key in wanted:
        logger.warning("the lock on %s ran out before the order of %r failed: its %d unit(s) "
                       "go back once the lock is free", sale.sku, user_id, quantity)
        IN_DOUBT.add(_InDoubt(sessions, redis, sale.sku, sale.id, user_id, quantity,
                              key, _generation_of(sale, generation), stock_keys, relock,
                              failed=True))


def _generation_of(sale: Any, generation: int | None) -> int | None:
    """The generation the units were taken from: a purchase that gives none (its lock
    section's stock had none) has its sale's, for a later give-back outside the section."""
    return generation if generation is not None else getattr(sale, "generation", None)


@dataclass(frozen=True)
class Relock:
    """How a lock path's units go back later (``IN_DOUBT``): under ``lock()``, the sale's
    lock, and only into the generation they were taken from. A lock path's reload keeps
    the generation, but no section sells before the first one after it counts the stock
    from the database as a new generation, which refuses these units; one given back
    in between goes into a stock that count replaces (``give_back_once.lua`` has the
    failure timeline)."""

    lock: Callable[[], Any]


@dataclass(frozen=True)
class _InDoubt:
    """A purchase whose row may be written, which the database could not confirm."""

    sessions: Any
    redis: Any
    sku: str
    sale_id: int
    user_id: str
    quantity: int
    idempotency_key: str | None
    generation: int | None
    stock_keys: tuple[str, str] | None
    #: a lock path's: the sale's lock, unacquired (its sections GET and SET the stock:
    #: units given back outside it would be overwritten by the holder's SET)
    relock: Relock | None
    #: the row is known not written (its write failed; it is not in doubt): nothing to
    #: look for in the database, and the buyer's reservation went with its 503 (it may
    #: have bought since), where an order in doubt kept it (``give_back_under_lock``)
    failed: bool = False
    #: the database is the stock (``sql``): a row not written took nothing to give back
    database_stock: bool = False
    #: this entry's name, in the marker that makes its give-back happen once
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex)


#: how long a settled give-back's marker lives (a retry comes within seconds)
SETTLED_MARKER_MS = 24 * 3600 * 1000
#: how long a settle waits for a lock path's sale lock (then: the next drain)
SETTLE_LOCK_WAIT_S = 5.0


def _settle(entry: _InDoubt) -> bool:
    """Ask the database about one purchase in doubt; False if it still cannot tell (or
    the lock is not free yet). A row: it is the buyer's order, which keeps the
    reservation. No row: the units go back to their generation's stock (none if the sale
    was reset since), once (``give_back_once.lua``), under the sale's lock for a lock
    path; then the buyer's reservation goes, so a retry can buy."""
    try:
        if not entry.failed and _written_rows(entry.sessions, entry.sale_id, [
                (entry.user_id, entry.quantity, entry.idempotency_key)]) != [None]:
            logger.warning("the order in doubt of %r for %s was written", entry.user_id,
                           entry.sku)
            if entry.database_stock:  # its Redis copy, which the purchase never mirrored
                from .paths import mirror_database_stock  # paths imports this module

                mirror_database_stock(entry.redis, entry.sessions, entry.sale_id,
                                      SaleKeys(entry.sku), only_sql=True)
            return True
        if entry.database_stock:  # not written: nothing was taken, the copy is right
            given = NOTHING_TAKEN
        elif entry.relock is None:
            given = _give_back_once(entry)
        else:
            lock = entry.relock.lock()
            if not lock.acquire(blocking=True, timeout=SETTLE_LOCK_WAIT_S):
                return False
            try:
                given = _give_back_once(entry)
            finally:  # a lost reply's lock is let go later (a review); services imports us
                from .services import UNDONE_LATER

                release_or_settle_later(lock, entry.sku, "settle", UNDONE_LATER)
        if not entry.failed:
            entry.redis.srem(SaleKeys(entry.sku).buyers, entry.user_id)
    except Exception:  # noqa: BLE001 - still down: next time
        return False
    logger.warning("settled the order of %r for %s (%s): %s", entry.user_id, entry.sku,
                   "its row failed" if entry.failed else "in doubt, not written",
                   _GIVEN[given] % entry.quantity)
    return True


#: a settle's "given" for a sale whose stock is the database: nothing was taken
NOTHING_TAKEN = 2
#: what ``give_back_once.lua`` answered, for the settle's log line
_GIVEN = {1: "%d unit(s) back", 0: "%d unit(s) were back already",
          NOTHING_TAKEN: "the database is the stock: its %d unit(s) were never taken",
          -1: "the sale was reset, or its stock counted from the database, since: its "
              "%d unit(s) were the old generation's",
          -2: "its stock key is gone: the sale's reload counts the %d unit(s)"}


def _give_back_once(entry: _InDoubt) -> int:
    """``entry``'s units back, once (``give_back_once.lua``): its answer."""
    stock, stock_gen = entry.stock_keys or (SaleKeys(entry.sku).stock,
                                            SaleKeys(entry.sku).stock_gen)
    keys = [stock, stock_gen, f"{stock}:settled:{entry.nonce}"]
    args: list[Any] = [entry.quantity, "" if entry.generation is None else entry.generation,
                       SETTLED_MARKER_MS]
    given = int(scripts.script(entry.redis, "give_back_once")(keys=keys, args=args))
    if given in (1, -2):  # it may be set while they were out; -2: the reload will count
        # them, and the flag would keep buyers from the section that finds the key lost
        entry.redis.delete(SaleKeys(entry.sku).soldout)
    return given


#: purchases ``landed_after_all`` could not settle: this worker's next purchases ask
#: again (``retrylater.py``)
IN_DOUBT: RetryLater[_InDoubt] = RetryLater(_settle)


def give_back(redis: Any, sku: str, quantity: int, generation: int | None,
              stock_keys: tuple[str, str] | None = None, *, quiet: bool = True) -> bool:
    """Return ``quantity`` units to ``sku``'s stock, or to ``stock_keys`` (a stock key and
    its generation key); to ``generation``'s only, if given (``give_back.lua``). A
    failure is logged: the audit will show it.

    Then the sale's sold-out flag goes: it may have been set while the units were out.

    **Failure timeline** lifting the flag prevents::

        ann:   takes the last unit (stock 0); her order row fails to be written
        bob:   refused at stock 0: sets the sold-out flag
        ann:   her unit goes back (stock 1)
        carl:  refused by the flag alone: "sold out" with a unit on the shelf, for good
        fixed: the flag is deleted after the units are back; a buyer refused at zero
               later sets it again (deleting it first would let bob's flag land after)
    """
    if stock_keys is None:
        stock_keys = (SaleKeys(sku).stock, SaleKeys(sku).stock_gen)
    try:
        if generation is None:
            redis.incrby(stock_keys[0], quantity)
        elif (left := scripts.script(redis, "give_back")(keys=list(stock_keys),
                                                         args=[quantity, generation])) < 0:
            logger.warning("%s: %d unit(s) not given back: %s", sku, quantity,
                           "the sale was reset, they were the old sale's" if left == -1 else
                           "its stock key is gone, the sale's reload counts them")
            if left == -2:  # the flag would keep buyers from the reload
                redis.delete(SaleKeys(sku).soldout)
            return False
        redis.delete(SaleKeys(sku).soldout)  # only a shortcut: a refusal sets it again
    except Exception:  # Redis down too: the audit will show the mismatch
        if not quiet:  # the caller keeps it and tries again
            raise
        logger.exception("could not return %d unit(s) to %s", quantity, stock_keys[0])
        return False
    logger.warning("order write for %s failed; %d unit(s) returned to %s", sku,
                   quantity, stock_keys[0])
    return True
