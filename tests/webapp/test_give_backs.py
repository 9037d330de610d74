"""Units going back: a purchase stopped inside its order write, an order in doubt settled
later (after a sold-out flag, after a reset), and the order of give_back's two writes.
Each was a mutation survivor: a unit stuck for good, a sale "sold out" with a unit on
the shelf, or an old sale's unit added to a new one (51 of 50)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.webapp.test_database_faults import (
    a_token_sale_order_in_doubt,
    commit_then_lose_the_reply,
    database_cannot_tell,
    settle_now,
)
from webapp import orders, sales
from webapp.keys import SaleKeys
from webapp.problems import OrderInDoubt
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


@pytest.fixture(autouse=True)
def nothing_in_doubt():
    orders.IN_DOUBT.waiting.clear()
    orders.IN_DOUBT.next_drain = 0.0
    yield
    orders.IN_DOUBT.waiting.clear()
    orders.IN_DOUBT.next_drain = 0.0


class WorkerStopped(BaseException):
    """What gevent raises in a request stopped mid-work (a Timeout, GreenletExit)."""


class Granted:
    fencing_token = 7

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return True

    def release(self) -> None:
        pass


def test_a_purchase_stopped_inside_its_order_write_keeps_its_unit_until_a_reload(
        sessions, redis_client, monkeypatch):
    # O1 was record_order's ``except BaseException`` give-back (without it the unit
    # stayed taken for good: Redis 2, database 3). But a row that landed all the same (a
    # batch another greenlet committed) then left Redis a unit ahead: an operator audit
    # oversold 8 of 40 after a HUP. So the unit stays taken, and the checkout watch
    # reloads the sale once it has sat in checkout long enough (checkoutwatch.py)
    from webapp.checkoutwatch import CheckoutWatch

    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=3, strategy="token")
    sales.reset_sale(sessions, redis_client, SKU, stock=3, strategy="token")
    deps = Checkout(sessions=sessions, redis=redis_client, lock_for=lambda s, u: Granted(),
                    sleep=lambda seconds: None)

    def stopped(*args: Any, **kwargs: Any) -> Any:
        raise WorkerStopped

    monkeypatch.setattr(orders, "insert_order", stopped)
    with pytest.raises(WorkerStopped):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    monkeypatch.undo()
    audit = sales.audit(sessions, redis_client, SKU)
    assert (audit["remaining"], audit["in_checkout"], audit["orders"]) == (2, 1, 0), audit
    now = [0.0]
    watch = CheckoutWatch(sessions, redis_client, stale_after_s=60, clock=lambda: now[0])
    assert watch.look() == []
    now[0] = 61.0
    assert watch.look() == [SKU]
    assert checkout(deps, PurchaseRequest(SKU, "bob")).created  # reloads the sale first
    audit = sales.audit(sessions, redis_client, SKU)
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (2, 1, True), audit


def test_a_settled_order_in_doubt_lifts_the_sold_out_flag_set_while_its_unit_was_out(
        deps, monkeypatch):
    # O2: _give_back_once must delete the sold-out flag after the units are back, else
    # the last unit sits on the shelf and every later buyer hears 409 sold_out
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=1, strategy="atomic")
    commit_then_lose_the_reply(monkeypatch, commits=False)
    database_cannot_tell(monkeypatch)
    with pytest.raises(OrderInDoubt):
        checkout(deps, PurchaseRequest(SKU, "ann"))  # the last unit, in doubt
    monkeypatch.undo()
    deps.redis.set(SaleKeys(SKU).soldout, 1)  # bob, refused at 0 meanwhile, set the flag
    settle_now()  # not written: the unit goes back
    assert not orders.IN_DOUBT
    assert checkout(deps, PurchaseRequest(SKU, "carl")).created


class FlagSetDuringGiveBack:
    """A Redis where a buyer refused at stock 0 sets the sold-out flag just before the
    units go back (between give_back's two writes, whichever order they come in)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def incrby(self, *args: Any) -> Any:
        self.real.set(SaleKeys(SKU).soldout, 1)
        return self.real.incrby(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_give_back_lifts_the_flag_after_the_units_are_back_not_before(redis_client):
    # O6: give_back's docstring: "deleting it first would let bob's flag land after"
    redis_client.set(SaleKeys(SKU).stock, 0)
    assert orders.give_back(FlagSetDuringGiveBack(redis_client), SKU, 1, None)
    assert redis_client.get(SaleKeys(SKU).stock) == b"1"
    assert not redis_client.exists(SaleKeys(SKU).soldout)  # else sold out with 1 left


def test_a_lock_sales_order_in_doubt_settled_after_a_reset_gives_nothing_to_the_new_sale(
        sessions, redis_client, monkeypatch):
    # O9: a lock path's purchase carries no generation; its in-doubt give-back must use
    # the sale's (``_generation_of``), else a reset's new stock gets the old unit: 51 of 50
    a_token_sale_order_in_doubt(sessions, redis_client, monkeypatch)
    sales.reset_sale(sessions, redis_client, SKU, stock=50, strategy="token")
    settle_now()
    assert not orders.IN_DOUBT
    audit = sales.audit(sessions, redis_client, SKU)
    assert (audit["remaining"], audit["database_remaining"]) == (50, 50), audit


def test_a_key_conflict_with_the_users_order_in_another_sale_is_not_a_replay(deps):
    # O7: explain_conflict replays only an order of this sale and this user; a key the
    # user spent on another sku (two purchases racing past the early key check) must be
    # 400, not a 200 answering the sku-2 purchase with the sku-1 order
    from webapp import saleinfo
    from webapp.problems import InvalidRequest, Replay

    assert checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key="k-1")).created
    sales.create_product(deps.sessions, "sku-2", "Mouse", 1_900, stock=5, strategy="atomic")
    sales.reset_sale(deps.sessions, deps.redis, "sku-2", stock=5, strategy="atomic")
    other = saleinfo.load_sale(deps.sessions, "sku-2")
    with pytest.raises(InvalidRequest):
        orders.explain_conflict(deps.sessions, other, "ann", "k-1")
    mine = saleinfo.load_sale(deps.sessions, SKU)
    with pytest.raises(Replay):
        orders.explain_conflict(deps.sessions, mine, "ann", "k-1")


def test_a_key_conflict_with_another_users_order_in_this_sale_is_not_a_replay(deps):
    # explain_conflict's user check (a mutation audit): bob racing ann with her key, past
    # the early look and a claim Redis lost, must hear 400, not 200 with ann's order
    from webapp import saleinfo
    from webapp.problems import InvalidRequest

    assert checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key="k-ann")).created
    sale = saleinfo.load_sale(deps.sessions, SKU)
    with pytest.raises(InvalidRequest):
        orders.explain_conflict(deps.sessions, sale, "bob", "k-ann")
