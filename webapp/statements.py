"""The statements a purchase runs, built once.

Building ``update(Sale).where(...).values(...)`` anew cost about 90 us a time on this
machine, more than running it: SQLAlchemy caches the *compiled* SQL of a statement
whose shape it has seen, but a new construct is still built and its cache key computed
every time. Built here once, with their parameters bound at each execution, they cost
only the execution (docs/performance.md, session 4).
"""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select, update

from .models import Order, Sale

#: count units off ``sales.remaining`` (the lock and ``atomic`` paths: unconditionally)
TAKE_UNITS = (update(Sale).where(Sale.id == bindparam("b_sale_id"))
              .values(remaining=Sale.remaining - bindparam("b_units")))
#: a lock-free purchase's (``atomic``): only in the sale generation its units came from;
#: rowcount 0: the sale was reset since (``SaleReset``)
TAKE_UNITS_OF_GENERATION = TAKE_UNITS.where(Sale.started_at == bindparam("b_started_at"))
#: the ``sql`` strategy's: only while enough are left (rowcount 0: sold out)
TAKE_UNITS_IF_LEFT = TAKE_UNITS.where(Sale.remaining >= bindparam("b_units"))
#: the same, answering what is left and the sale generation it is left in (SQLite >=
#: 3.35 and PostgreSQL have UPDATE ... RETURNING): Redis's copy follows it
TAKE_UNITS_IF_LEFT_RETURNING = TAKE_UNITS_IF_LEFT.returning(Sale.remaining, Sale.started_at)
#: the same, only in the sale generation the purchase read: a purchase queued behind a
#: reset's row lock found the *new* sale's ``remaining`` enough and sold from it
#: (rowcount 0: sold out, or reset since: ``SALE_STOCK_AND_GENERATION`` tells)
TAKE_UNITS_IF_LEFT_OF_GENERATION = TAKE_UNITS_IF_LEFT.where(
    Sale.started_at == bindparam("b_started_at"))
TAKE_UNITS_IF_LEFT_OF_GENERATION_RETURNING = TAKE_UNITS_IF_LEFT_OF_GENERATION.returning(
    Sale.remaining, Sale.started_at)
#: what the database has left of a sale, and its generation
SALE_STOCK_AND_GENERATION = select(Sale.remaining, Sale.started_at).where(
    Sale.id == bindparam("b_sale_id"))
#: the same, with the strategy the sale is sold by now
SALE_STOCK_GENERATION_STRATEGY = SALE_STOCK_AND_GENERATION.add_columns(Sale.strategy)
#: insert order rows; each comes back with what identifies it, (sale_id, user_id) being
#: UNIQUE, so a multi-row INSERT need not return its rows in parameter order (asking
#: for that order makes SQLAlchemy send SQLite one INSERT per row)
INSERT_ORDERS = insert(Order).returning(Order.id, Order.sale_id, Order.user_id)
