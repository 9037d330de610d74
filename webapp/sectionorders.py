"""The order rows of a combined lock section, written by its holder in one go.

A combined section (``allocation.py``) has its winners' units taken and holds the
stock lock while their rows are written. ``write_batch`` and ``give_back_failed`` are
``orders.record_order`` for all of them at once: one transaction, served by the caller
without queueing (``OrderWriter.write_now``), so no greenlet switch lengthens the hold;
each winner gets its own answer, as a transaction of its own would have given it. The
answers are handed out before the give-back, the one step that yields (Redis I/O).

**Failures.** A UNIQUE violation rolls the shared transaction back and each row is
written alone (``groupcommit.py``), then explained (``Replay``, ``AlreadyPurchased``,
``InvalidRequest``). Any other error of the write (the database down) is every row's.
The units of every failed row go back in one step, under the lock the caller holds:
no holder's GET/SET can land between them and lose the give-back. The rows are written,
and their units given back, only in the sale generation the section's stock belongs to:
a write that outlived the lock (a reset took it meanwhile) is refused (``SaleReset``)
and its units, the old sale's, stay out of the new stock (``section.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from .batching import own_copy
from .groupcommit import writer_for
from .models import PlacedOrder
from .orders import (
    Relock,
    explain_conflict,
    give_back,
    give_back_under_lock,
    landed_batch,
    maybe_written,
    new_order,
)
from .problems import OrderInDoubt, SaleReset

#: one order: ``(user_id, quantity, fencing_token, idempotency_key)``
Wanted = tuple[str, int, int | None, str | None]


def insert_batch(sessions: sessionmaker[Session], sale: Any, orders: list[Wanted],
                 generation: int | None = None) -> list[PlacedOrder | BaseException]:
    """Orders of one sale whose units are taken, in one transaction written now, only in
    ``generation`` (if given). Each gets its order or the error its own transaction
    would have raised."""
    written = writer_for(sessions).write_now(
        [(*new_order(sale, user_id, quantity, token, key), generation)
         for user_id, quantity, token, key in orders])
    outcomes: list[PlacedOrder | BaseException] = []
    for (user_id, _, _, key), pending in zip(orders, written, strict=True):
        if pending.error is None:
            outcomes.append(pending.result)
            continue
        error = pending.error
        if isinstance(error, IntegrityError):
            try:
                explain_conflict(sessions, sale, user_id, key)
            except Exception as explained:  # noqa: BLE001 - it always raises its answer
                error = explained
        outcomes.append(error)
    return outcomes


def write_batch(sessions: sessionmaker[Session], sale: Any, orders: list[Wanted],
                redis: Any, generation: int | None = None,
                relock: Relock | None = None) -> list[Any]:
    """``insert_batch``, with an error of the whole write (the database down) made every
    order's, each its own copy. A write that may have committed all the same (its
    COMMIT's reply lost: ``orders.maybe_written``) is looked for: each order found is
    its buyer's answer, and one the database cannot tell about is ``OrderInDoubt``."""
    try:
        outcomes: list[Any] = list(insert_batch(sessions, sale, orders, generation))
    except Exception as exc:  # noqa: BLE001 - every order's answer
        outcomes = [own_copy(exc) for _ in orders]
    unsure = [i for i, outcome in enumerate(outcomes)
              if isinstance(outcome, BaseException) and maybe_written(outcome)]
    if unsure:
        found = landed_batch(sessions, redis, sale,
                             [(orders[i][0], orders[i][1], orders[i][3]) for i in unsure],
                             generation,
                             relock=relock)
        for i, landed in zip(unsure, found, strict=True):
            if landed is not None:  # its order, or OrderInDoubt: either way no give-back
                outcomes[i] = landed
    return outcomes


def give_back_failed(redis: Any, sale: Any, orders: list[Wanted],
                     outcomes: list[Any], generation: int | None = None, *,
                     lease: Callable[[], bool] | None = None,
                     relock: Relock | None = None,
                     sessions: sessionmaker[Session] | None = None) -> int:
    """The units of every order that failed, back to ``generation``'s stock in one step
    (not those in doubt: ``orders.IN_DOUBT`` gives them back if they were not written;
    nor those of a row refused because a reset started another sale: the old sale's).
    With ``lease`` (and ``relock``, ``sessions``): if the section's lock ran out, later,
    under the lock (``orders.give_back_under_lock``). Returns the units given back, now
    or later: none of them is sold, and the sale is not sold out for want of them (a
    batch that set the flag after its give-back had been settled elsewhere in the
    worker left it over a unit on the shelf; a review)."""
    failed = [(user_id, quantity, key) for (user_id, quantity, _, key), outcome
              in zip(orders, outcomes, strict=True)
              if isinstance(outcome, BaseException)
              and not isinstance(outcome, OrderInDoubt | SaleReset)]
    returned = sum(quantity for _, quantity, _ in failed)
    if not returned:
        return 0
    if lease is not None and relock is not None and sessions is not None and not lease():
        give_back_under_lock(sessions, redis, sale, failed, generation, relock)
        return returned
    return returned if give_back(redis, sale.sku, returned, generation) else 0
