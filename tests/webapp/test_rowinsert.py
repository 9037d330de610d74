"""``RowInsert``: the group commit's INSERT on the driver's cursor writes what Core would
have written, on SQLite and on PostgreSQL, and fails as Core would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from webapp import sales
from webapp.extensions import make_engine
from webapp.groupcommit import ORDER_COLUMNS
from webapp.models import Order, Sale
from webapp.orders import new_order
from webapp.rowinsert import RowInsert
from webapp.saleinfo import load_sale

SKU = "sku-rows"


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    from sqlalchemy.orm import sessionmaker

    sessions = sessionmaker(engine)
    sales.create_product(sessions, SKU, "Rows", 100, stock=10, strategy="atomic")
    sale_id = load_sale(sessions, SKU).id
    with engine.begin() as connection:
        connection.execute(delete(Order).where(Order.sale_id == sale_id))
    yield engine
    with engine.begin() as connection:
        connection.execute(delete(Order).where(Order.sale_id == sale_id))
    engine.dispose()


def rows(engine: Engine, *users: str) -> list[dict[str, object]]:
    with engine.connect() as connection:
        sale = connection.execute(select(Sale).where(Sale.sku == SKU)).one()
    return [new_order(sale, user, 1, None, None)[1] for user in users]


def test_new_orders_have_exactly_the_columns_it_inserts(engine):
    (row,) = rows(engine, "ann")
    assert tuple(row) == ORDER_COLUMNS


def test_rows_come_back_with_their_ids_and_read_back_as_core_writes_them(engine):
    inserter = RowInsert.for_connection(Order.__table__, ORDER_COLUMNS,
                                        ("id", "sale_id", "user_id"), engine.dialect)
    assert inserter is not None
    when = datetime(2026, 11, 24, 3, 4, 5, 678901, tzinfo=UTC)
    ours, core = rows(engine, "ann", "bob"), rows(engine, "cat")
    for row in (*ours, *core):
        row["created_at"] = when
    with engine.begin() as connection:
        returned = inserter.execute(connection, ours)
        connection.execute(insert(Order), core)
    ids = {user: order_id for order_id, _, user in returned}
    assert set(ids) == {"ann", "bob"} and len(set(ids.values())) == 2
    with engine.connect() as connection:
        stored = {o.user_id: o for o in connection.execute(select(Order)).all()}
        # the same text in SQLite as Core's own INSERT stored
        raw = dict(connection.exec_driver_sql(
            "SELECT user_id, CAST(created_at AS TEXT) FROM orders").all())
    assert stored["ann"].id == ids["ann"] and stored["bob"].id == ids["bob"]
    assert raw["ann"] == raw["bob"] == raw["cat"]
    read_back = stored["ann"].created_at
    assert read_back.replace(tzinfo=read_back.tzinfo or UTC) == when
    assert (stored["ann"].sku, stored["ann"].quantity, stored["ann"].strategy) == \
        (SKU, 1, "atomic")


def test_each_row_keeps_its_own_created_at_shared_or_not(engine):
    """The rows of a batch may share one datetime object (converted once) or not; each
    row gets the text of its own, whatever the one before it had."""
    inserter = RowInsert.for_connection(Order.__table__, ORDER_COLUMNS,
                                        ("id", "sale_id", "user_id"), engine.dialect)
    assert inserter is not None
    early = datetime(2026, 11, 24, 3, 4, 5, 1, tzinfo=UTC)
    late = datetime(2026, 11, 24, 3, 4, 5, 2, tzinfo=UTC)
    written = rows(engine, "ann", "bob", "cat", "dan", "eve")
    again = early.replace()  # equal, another object
    for row, when in zip(written, (early, early, late, again, late), strict=True):
        row["created_at"] = when
    with engine.begin() as connection:
        inserter.execute(connection, written)
    with engine.connect() as connection:
        stored = dict(connection.execute(
            select(Order.user_id, Order.created_at).where(Order.sku == SKU)).all())
    as_utc = {user: when.replace(tzinfo=when.tzinfo or UTC) for user, when in stored.items()}
    assert as_utc == {"ann": early, "bob": early, "cat": late, "dan": early, "eve": late}


def test_a_unique_violation_is_sqlalchemys_integrity_error_and_nothing_stays(engine):
    inserter = RowInsert.for_connection(Order.__table__, ORDER_COLUMNS,
                                        ("id", "sale_id", "user_id"), engine.dialect)
    assert inserter is not None
    with pytest.raises(IntegrityError), engine.begin() as connection:
        inserter.execute(connection, rows(engine, "ann", "ann"))  # one order per user
    with engine.connect() as connection:
        assert connection.execute(select(Order.id).where(
            Order.sku == SKU, Order.user_id == "ann")).all() == []
