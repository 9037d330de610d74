"""A reset racing leftover purchases: never a 500, never a stale lock touching the stock.

The showdown resets one sale from strategy to strategy while the previous phase's
last purchases may still be in flight. Both tests fail on the code before the fix:
the first with 500 ``internal_error`` (``getset`` parsed a ``setnx-expire`` token as
its timestamp), the second with a lost update on the new sale's stock.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.webapp.conftest import SKU, auth, backends, buy, empty_shop, make_app, reset
from webapp import locks, paths, sales
from webapp.models import Order, Sale
from webapp.problems import Busy
from webapp.saleinfo import load_sale
from webapp.services import Checkout, PurchaseRequest


def test_a_reset_is_not_a_500_while_a_previous_strategys_buyer_holds_its_lock(client, app):
    reset(client, stock=5, strategy="setnx-expire")
    with app.app_context():
        shop = backends(app)
        leftover = locks.lock_for(shop, load_sale(shop.sessions, SKU), "slow-buyer")
    reset(client, stock=5, strategy="getset")  # the showdown's next phase
    assert leftover.acquire(blocking=False)  # a setnx-expire buyer, still in its section
    try:
        assert buy(client, "ann").status_code == 201
        response = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                              json={"stock": 5, "strategy": "token"})
    finally:
        leftover.release()
    assert response.status_code == 200, response.get_json()


@pytest.mark.parametrize("old, new", [("token", "fair"), ("fair", "token")])
def test_a_buyer_holding_the_lock_of_a_strategy_reset_away_leaves_the_stock_alone(
        client, app, old, new):
    reset(client, stock=5, strategy=old)
    with app.app_context():
        shop = backends(app)
        stale = load_sale(shop.sessions, SKU)  # looked up before the reset
        reset(client, stock=7, strategy=new)
        deps = Checkout(sessions=shop.sessions, redis=shop.redis, lock_timeout_s=1.0,
                        lock_for=lambda sale, user: locks.lock_for(shop, sale, user))
        with pytest.raises(Busy):
            paths.path_for(old).purchase(deps, stale, PurchaseRequest(SKU, "late"))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (7, 0, True)


def test_a_reset_waits_for_a_purchase_transaction_in_flight_and_deletes_its_order(client, app):
    """PostgreSQL: a purchase's transaction (the sale's row updated, its order inserted)
    not yet committed when a reset starts. Without the reset locking the sale's row
    first, its DELETE missed the uncommitted order, which survived into the new sale."""
    shop = backends(app)
    if shop.sessions.kw["bind"].dialect.name != "postgresql":
        pytest.skip("SQLite runs one writer at a time: a reset cannot overlap a purchase")
    reset(client, stock=5, strategy="atomic")
    answers: list[int] = []

    def reset_now() -> None:
        answers.append(app.test_client().put(f"/api/admin/sales/{SKU}", headers=auth(),
                                             json={"stock": 5, "strategy": "atomic"})
                       .status_code)

    resetting = threading.Thread(target=reset_now)
    with shop.sessions.begin() as session:  # what groupcommit's transaction does, held open
        sale = session.scalars(select(Sale).where(Sale.sku == SKU)).one()
        session.execute(update(Sale).where(Sale.id == sale.id)
                        .values(remaining=Sale.remaining - 1))
        session.add(Order(sale_id=sale.id, sku=SKU, user_id="ann", quantity=1,
                          strategy="atomic"))
        session.flush()
        resetting.start()
        resetting.join(1.0)  # the reset is under way, blocked on the row
        assert resetting.is_alive(), "the reset did not wait for the purchase in flight"
    resetting.join(20)
    assert answers == [200]
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (0, 5, True), audit


@pytest.mark.parametrize("new", ["atomic", "token", "sql"])
def test_an_sql_purchase_from_before_a_reset_does_not_sell_from_the_new_sale(client, app, new):
    """An ``sql`` purchase that read the sale, then queued behind a reset's row lock
    (PostgreSQL) or simply came late: its ``UPDATE ... WHERE remaining >= 1`` found the
    new sale's count enough and sold from it, so a switch from ``sql`` oversold the new
    sale (an audit helper saw 4-10 units over, ``consistent: false``)."""
    reset(client, stock=1_000, strategy="sql")
    with app.app_context():
        shop = backends(app)
        stale = load_sale(shop.sessions, SKU)  # read before the reset
        reset(client, stock=2, strategy=new)
        deps = Checkout(sessions=shop.sessions, redis=shop.redis, lock_timeout_s=1.0,
                        lock_for=lambda sale, user: locks.lock_for(shop, sale, user))
        with pytest.raises(Busy):  # SaleReset: 503, try again
            paths.path_for("sql").purchase(deps, stale, PurchaseRequest(SKU, "late"))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (2, 0, True), audit


def test_an_sql_sale_whose_redis_copy_is_stale_sells_again_after_one_503(client, app):
    """A reset whose Redis side failed (or a Redis back from an old snapshot) left the
    copy of the sale one generation behind the database: every ``sql`` purchase then
    carried the old generation and answered 503, for good."""
    from datetime import timedelta

    reset(client, stock=5, strategy="sql")
    shop = backends(app)
    with shop.sessions.begin() as session:  # the database moved on; Redis did not
        sale = session.scalars(select(Sale).where(Sale.sku == SKU)).one()
        session.execute(update(Sale).where(Sale.id == sale.id)
                        .values(started_at=sale.started_at + timedelta(seconds=1)))
    first = buy(client, "ann")
    assert first.status_code == 503, first.get_json()
    assert buy(client, "ann").status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (1, 4, True), audit


@pytest.mark.parametrize("new", ["sql", "token", "atomic-sharded"])
def test_a_reload_that_read_the_sale_before_a_reset_leaves_the_new_sale_alone(
        client, app, monkeypatch, new):
    """Redis lost the sale; a buyer reads it from the database (``token``, sold out,
    alice its buyer); an admin reset commits and writes the new sale before the
    buyer's reload writes Redis. The reload wrote its old copy over the new one: the
    sale reset to ``sql`` sold through the ``token`` lock and oversold (an HTTP audit),
    and the old sale's sold-out flag and buyers stayed in the new sale."""
    from webapp import saleinfo

    reset(client, stock=1, strategy="token")
    assert buy(client, "alice").status_code == 201  # sold out, alice its buyer
    shop = backends(app)
    shop.redis.delete(*shop.redis.keys("sale:{sku-1}:*"))  # Redis restarted empty
    real_load = saleinfo.load_sale

    def reset_right_after_the_read(sessions, sku):
        read = real_load(sessions, sku)
        monkeypatch.setattr(saleinfo, "load_sale", real_load)  # the reset reads it too
        # the reset's own writes, as another worker's PUT makes them (the PUT itself,
        # from inside this reload, would wait for it: one reload at a time a process)
        sales.reset_sale(shop.sessions, shop.redis, SKU, stock=3, strategy=new)
        return read

    monkeypatch.setattr(saleinfo, "load_sale", reset_right_after_the_read)
    first = buy(client, "bob")
    assert first.status_code in (201, 503), first.get_json()  # 503: "try again"
    copy = shop.redis.hgetall("sale:{sku-1}:info")
    assert copy[b"strategy"] == new.encode(), copy
    for buyer in ("alice", "bob", "carol"):  # alice bought in the old sale, not this one
        response = buy(client, buyer)
        assert response.status_code in (201, 409), response.get_json()
        assert response.get_json().get("error") != "sold_out", (buyer, response.get_json())
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["strategy"], audit["units_sold"], audit["remaining"], audit["consistent"]) \
        == (new, 3, 0, True), audit


@pytest.mark.parametrize("then", ["atomic-sharded", "token"])
def test_a_section_of_a_sale_reset_since_does_not_blame_redis(client, app, then):
    """A buyer's section reads the stock key of the sale it looked up. A reset since, to
    ``atomic-sharded`` (its stock in shard keys: no plain stock key), or to the same
    strategy but not loaded yet, answered "Redis lost the sale (restarted?)": an operator
    went looking for a restart that never happened (a contract audit: 56-220 such
    answers in a reset storm)."""
    from webapp import section

    reset(client, stock=5, strategy="token")
    shop = backends(app)
    looked_up = load_sale(shop.sessions, SKU)
    reset(client, stock=5, strategy=then)
    if then == "token":  # mid-reset: the new sale's copy written, its stock not yet
        shop.redis.delete(looked_up.keys.stock)
    deps = Checkout(sessions=shop.sessions, redis=shop.redis, lock_for=lambda s, u: None,
                    sleep=lambda seconds: None)
    with pytest.raises(Busy) as refused:
        section.stock_if_still(deps, looked_up)
    assert "restarted" not in str(refused.value) and "reset" in str(refused.value), \
        str(refused.value)


def _wait_until(condition, what: str) -> None:
    for _ in range(5_000):
        if condition():
            return
        threading.Event().wait(0.002)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_lock_buyer_queued_behind_a_reset_to_the_same_strategy_buys_nothing_on_old_terms(
        database_url, redis_url, redis_client, strategy):
    """bob asks for 3 of a sale with no per-buyer limit and queues behind a holder in its
    section; an admin resets the sale to the same strategy with a limit of 1 and waits
    for the holder. Once the reset let go, bob's section read the new sale's stock (the
    strategy check passed) and sold him 3 units of a sale of 1 per buyer, with no
    reservation of his in the new sale (an HTTP audit, token, fair and redlock alike)."""
    app = make_app(database_url, redis_url, LOCK_TIMEOUT_S=10.0)
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=5, strategy=strategy)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=5, strategy=strategy, work_ms=1_000)
    answers: dict[str, Any] = {}

    def buyer(user: str, quantity: int) -> threading.Thread:
        def run() -> None:
            answers[user] = buy(app.test_client(), user, quantity=quantity)
        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def queued() -> int:
        return sum(len(combiner._queue) for combiner in shop.cohorts._combiners.values())

    holder = buyer("holder", 1)
    _wait_until(lambda: queued() == 0 and sum(
        cohort.acquisitions for cohort in shop.cohorts._by_key.values()) == 1,
        "the holder in its section")
    bob = buyer("bob", 3)
    _wait_until(lambda: queued() == 1, "bob queued behind the holder")

    def reset_now() -> None:
        answers["reset"] = app.test_client().put(
            f"/api/admin/sales/{SKU}", headers=auth(),
            json={"stock": 5, "strategy": strategy, "work_ms": 0, "limit": 1})

    resetting = threading.Thread(target=reset_now)
    resetting.start()
    _wait_until(lambda: redis_client.exists(f"sale:{{{SKU}}}:resetting"), "the reset waiting")
    for thread in (holder, bob, resetting):
        thread.join(30)
    assert answers["reset"].status_code == 200, answers["reset"].get_json()
    assert answers["bob"].status_code == 503, answers["bob"].get_json()  # try again
    assert "reset" in answers["bob"].get_json()["detail"]
    with shop.sessions() as session:
        assert session.scalars(select(Order).where(Order.sku == SKU)).all() == []
    again = buy(app.test_client(), "bob", quantity=3)  # the new sale's terms
    assert again.status_code == 400 and "must be 1 for this sale" in again.get_json()["detail"]
    assert buy(app.test_client(), "bob").status_code == 201
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["units_sold"], audit["consistent"]) == (1, 1, True), audit
    shop.close()
