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
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from . import scripts
from .batching import Pending
from .groupcommit import reset_since, writer_for
from .keys import SaleKeys
from .models import Order, PlacedOrder, Sale, utcnow
from .problems import AlreadyPurchased, InvalidRequest, Replay, SaleReset, SoldOut
from .saleinfo import started_at
from .statements import (
    INSERT_ORDERS,
    TAKE_UNITS,
    TAKE_UNITS_IF_LEFT,
    TAKE_UNITS_IF_LEFT_OF_GENERATION,
    TAKE_UNITS_OF_GENERATION,
)

logger = logging.getLogger(__name__)

KEY_USED_ELSEWHERE = "this Idempotency-Key was already used for another purchase"


def find_order_or_key(sessions: sessionmaker[Session], sale_id: int, user_id: str,
                      key: str) -> tuple[Order | None, Order | None]:
    """The user's order in this sale, and the order ``key`` made (either may be None;
    both are the same order for a replayed purchase). One query."""
    with sessions() as session:
        rows = session.scalars(select(Order).where(
            or_(and_(Order.sale_id == sale_id, Order.user_id == user_id),
                Order.idempotency_key == key))).all()
    mine = next((o for o in rows if o.sale_id == sale_id and o.user_id == user_id), None)
    keyed = next((o for o in rows if o.idempotency_key == key), None)
    return mine, keyed


def has_order(sessions: sessionmaker[Session], sku: str, user_id: str) -> bool:
    """Whether ``user_id`` has an order in the current sale of ``sku``."""
    with sessions() as session:
        return session.scalar(
            select(Order.id).join(Sale, Sale.id == Order.sale_id)
            .where(Sale.sku == sku, Order.user_id == user_id).limit(1)) is not None


def _find_by_key(sessions: sessionmaker[Session], key: str) -> Order | None:
    with sessions() as session:
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
        with sessions.begin() as session:
            connection = session.connection()
            if connection.execute(decrement, parameters).rowcount == 0:
                if generation is not None and (not conditional or reset_since(
                        connection, sale.id, generation)):
                    raise SaleReset(sale.sku)
                raise SoldOut(f"{sale.sku} is sold out")
            order.id = connection.execute(INSERT_ORDERS, row).scalar_one()
    except IntegrityError:
        explain_conflict(sessions, sale, user_id, idempotency_key)
        raise
    return order


def explain_conflict(sessions: sessionmaker[Session], sale: Any, user_id: str,
                     idempotency_key: str | None) -> None:
    """Turn a UNIQUE violation into ``Replay``, ``AlreadyPurchased`` or ``InvalidRequest``."""
    if idempotency_key is not None:
        earlier = _find_by_key(sessions, idempotency_key)
        if earlier is not None:
            if earlier.sale_id == sale.id and earlier.user_id == user_id:
                raise Replay(earlier)
            raise InvalidRequest(KEY_USED_ELSEWHERE)
    raise AlreadyPurchased(f"{user_id!r} already bought {sale.sku}")


def record_order(sessions: sessionmaker[Session], redis: Any, sale: Any, user_id: str,
                 quantity: int, fencing_token: int | None,
                 idempotency_key: str | None, *, grouped: bool = False,
                 generation: int | None = None,
                 stock_keys: tuple[str, str] | None = None,
                 written: Pending[Any] | None = None) -> PlacedOrder:
    """Insert the order after Redis stock was taken; on any failure give the units back.

    :param grouped: share the transaction with concurrent purchases (the lock-free
        paths, and a combined batch's orders inside its section: ``combining.py``).
    :param generation: the sale generation the units were taken from, for a path that
        takes them without holding off resets (``atomic``). The row is written only in
        that generation, else ``SaleReset``; units go back only to that generation's
        stock. (The lock paths write inside the section a reset waits for: None.)
    :param stock_keys: where the units came from, ``(stock, its generation)``: the
        sale's own keys unless given (``atomic-sharded``: the shard's).
    :param written: with ``grouped``, the row's outcome if it is already written
        (``takenorders.py``); its error is handled as a write's here would be.
    """
    try:
        if grouped:
            return insert_grouped(sessions, sale, user_id, quantity, idempotency_key,
                                  fencing_token, generation=generation, written=written)
        return insert_order(sessions, sale, user_id, quantity, fencing_token, idempotency_key,
                            generation=generation)
    except SaleReset:  # the units were the old sale's, whose stock the reset replaced
        raise
    except BaseException:
        give_back(redis, sale.sku, quantity, generation, stock_keys)
        raise


def give_back(redis: Any, sku: str, quantity: int, generation: int | None,
              stock_keys: tuple[str, str] | None = None) -> None:
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
        elif scripts.script(redis, "give_back")(keys=list(stock_keys),
                                                args=[quantity, generation]) < 0:
            logger.warning("%s was reset: %d unit(s) of the old sale not given back", sku,
                           quantity)
            return
        redis.delete(SaleKeys(sku).soldout)  # only a shortcut: a refusal sets it again
    except Exception:  # Redis down too: the audit will show the mismatch
        logger.exception("could not return %d unit(s) to %s", quantity, stock_keys[0])
    else:
        logger.warning("order write for %s failed; %d unit(s) returned to %s", sku,
                       quantity, stock_keys[0])
