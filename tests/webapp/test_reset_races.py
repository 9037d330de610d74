"""A reset racing leftover purchases: never a 500, never a stale lock touching the stock.

The showdown resets one sale from strategy to strategy while the previous phase's
last purchases may still be in flight. Both tests fail on the code before the fix:
the first with 500 ``internal_error`` (``getset`` parsed a ``setnx-expire`` token as
its timestamp), the second with a lost update on the new sale's stock.
"""

from __future__ import annotations

import pytest

from tests.webapp.conftest import SKU, auth, backends, buy, reset
from webapp import locks, paths
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
