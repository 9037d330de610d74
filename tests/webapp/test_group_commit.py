"""Group commit (``groupcommit.py``): concurrent orders share one transaction, each
request still gets its own correct answer, and only after its row is committed."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from tests.webapp.heldbatch import run_behind_a_held_batch
from webapp import groupcommit, orders, sales
from webapp.models import Order, PlacedOrder
from webapp.problems import AlreadyPurchased, Busy, SoldOut
from webapp.saleinfo import load_sale
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


def buy_concurrently(deps: Checkout, users: list[str], monkeypatch) -> dict[str, object]:
    """Each user buys in a thread of their own; the first commit waits until all queued."""
    return run_behind_a_held_batch(
        monkeypatch, groupcommit.writer_for(deps.sessions), "_transaction",
        lambda user: checkout(deps, PurchaseRequest(SKU, user)).order, users)


def test_orders_queued_during_a_commit_are_written_together_in_the_next_one(deps, monkeypatch):
    users = [f"user-{i}" for i in range(12)]
    answers = buy_concurrently(deps, users, monkeypatch)
    writer = groupcommit.writer_for(deps.sessions)
    assert (writer.batches, writer.items) == (2, 12)  # the first alone, then eleven at once
    ids = {user: answer.id for user, answer in answers.items()}  # type: ignore[union-attr]
    assert len(set(ids.values())) == 12 and None not in ids.values()
    with deps.sessions() as session:
        stored = dict(session.execute(select(Order.user_id, Order.id)).all())
    assert stored == ids  # each request got its own row's id
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["database_remaining"]) == (12, 38, 38)
    assert audit["consistent"]


def test_a_duplicate_in_a_batch_gets_its_own_409_and_the_rest_their_orders(deps, monkeypatch):
    # ann has an order the Redis reservation forgot (e.g. Redis restarted without it)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    deps.redis.srem("sale:{sku-1}:buyers", "ann")
    answers = buy_concurrently(deps, ["bob", "ann", "cy", "dee"], monkeypatch)
    assert isinstance(answers["ann"], AlreadyPurchased)
    assert all(isinstance(answers[user], PlacedOrder) for user in ("bob", "cy", "dee"))
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (4, 46, True)
    assert deps.redis.sismember("sale:{sku-1}:buyers", "ann")  # she did buy


def test_a_failed_batch_fails_every_request_and_returns_every_unit(deps, monkeypatch):
    writer = groupcommit.writer_for(deps.sessions)

    def broken(batch):
        raise OperationalError("INSERT", {}, Exception("disk full"))

    monkeypatch.setattr(writer, "_transaction", broken)
    with pytest.raises(OperationalError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (0, 50, True)
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created  # and she may retry


def test_a_request_is_answered_only_once_its_row_is_committed(deps):
    order = orders.insert_grouped(deps.sessions, load_sale(deps.sessions, SKU), "ann", 1, None)
    with deps.sessions() as other:  # a connection of its own sees the committed row
        assert other.scalar(select(func.count()).where(Order.id == order.id)) == 1


def test_the_lead_passes_on_when_the_leader_leaves_nothing_queued(deps):
    writer = groupcommit.writer_for(deps.sessions)
    for user in ("ann", "bob"):  # one after the other: each leads its own commit
        assert checkout(deps, PurchaseRequest(SKU, user)).created
    assert (writer.batches, writer.items, writer._serving) == (2, 2, False)


# the sql strategy: the database is the stock; each order its own conditional UPDATE


def sql_sale(deps: Checkout, stock: int) -> Checkout:
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=stock, strategy="sql")
    return deps


def sql_buy_concurrently(deps: Checkout, users: list[str], monkeypatch) -> dict[str, object]:
    return run_behind_a_held_batch(
        monkeypatch, groupcommit.writer_for(deps.sessions, conditional=True), "_transaction",
        lambda user: checkout(deps, PurchaseRequest(SKU, user)).order, users)


def test_sql_orders_share_a_transaction_and_the_database_stops_at_its_stock(deps, monkeypatch):
    sql_sale(deps, stock=3)
    users = [f"user-{i}" for i in range(6)]
    answers = sql_buy_concurrently(deps, users, monkeypatch)
    writer = groupcommit.writer_for(deps.sessions, conditional=True)
    assert (writer.batches, writer.items) == (2, 6)  # the first alone, then five at once
    won = [user for user in users if isinstance(answers[user], PlacedOrder)]
    assert len(won) == 3 and users[0] in won  # the first alone, then the first two queued
    assert all(isinstance(answers[user], SoldOut) for user in users if user not in won)
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["oversold"], audit["database_remaining"]) == (3, 0, 0)
    assert audit["consistent"], audit


def test_a_sql_batch_rolled_back_by_a_duplicate_decides_sold_out_again_alone(
        deps, monkeypatch):
    sql_sale(deps, stock=3)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    deps.redis.srem("sale:{sku-1}:buyers", "ann")  # the reservation forgot her
    answers = sql_buy_concurrently(deps, ["bob", "ann", "cy", "dee"], monkeypatch)
    assert isinstance(answers["ann"], AlreadyPurchased)
    assert isinstance(answers["bob"], PlacedOrder)  # alone in the first batch
    # 3 units: ann's earlier, bob's, and one of the two who queued behind ann
    assert {type(answers["cy"]), type(answers["dee"])} == {PlacedOrder, SoldOut}
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["database_remaining"], audit["consistent"]) == (3, 0, True)


def test_a_multi_unit_order_takes_its_quantity_off_the_database_count(client):
    """The batch lowers ``sales.remaining`` by each row's quantity. By one per row, the
    books disagreed (Redis 7, the database 9) and a reload after Redis lost its data
    sold 2 units twice (a mutation audit: no test bought more than one unit and looked
    at the audit)."""
    from tests.webapp.conftest import SKU, buy, reset

    reset(client, stock=10, strategy="atomic", limit=3)
    assert buy(client, "ann", quantity=3).status_code == 201
    assert buy(client, "bob", quantity=2).status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["units_sold"],
            audit["consistent"]) == (5, 5, 5, True), audit


def test_a_rolled_back_sql_batch_leaves_no_stock_figure_behind(deps, monkeypatch):
    """``stock_after`` takes only what committed. A failed batch's counts, kept until the
    next commit of another sale, reached it there: the ``sql`` path then copied into
    Redis a stock the database never had (a mutation audit)."""
    sql_sale(deps, stock=3)
    sales.create_product(deps.sessions, "sku-2", "Mouse", 1_900, stock=5, strategy="sql")
    sales.reset_sale(deps.sessions, deps.redis, "sku-2", stock=5, strategy="sql")
    writer = groupcommit.writer_for(deps.sessions, conditional=True)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    committed = writer.stock_after[load_sale(deps.sessions, SKU).id]
    real = writer._take_units

    def taken_then_down(connection, batch):
        real(connection, batch)  # the counts noted, then the database goes away
        raise OperationalError("INSERT", {}, Exception("the database went away"))

    monkeypatch.setattr(writer, "_take_units", taken_then_down)
    with pytest.raises(OperationalError):  # the API answers it 503 busy
        checkout(deps, PurchaseRequest(SKU, "bob"))
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest("sku-2", "cy")).created  # another sale commits
    assert writer.stock_after[load_sale(deps.sessions, SKU).id] == committed


def test_a_write_queued_past_its_budget_is_answered_busy_unsent_and_its_unit_returned(
        deps, monkeypatch):
    """A write still queued when its budget (``writedeadline.ORDER_WRITE_S``) is gone is
    not sent: its buyer hears 503 and the unit goes back. Before, a buyer queued behind
    a batch stuck on a lock waited it out, then its own batch's statements, each with a
    timeout of its own (a PostgreSQL audit: 30 s, where 10 s were promised)."""
    writer = groupcommit.writer_for(deps.sessions)
    monkeypatch.setattr(writer, "budget_s", 0.0)  # every write is out of time once queued
    monkeypatch.setattr(writer, "_transaction", lambda batch: pytest.fail("it was sent"))
    with pytest.raises(Busy, match="not be written in time"):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (0, 50, True)
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created  # and she may retry
