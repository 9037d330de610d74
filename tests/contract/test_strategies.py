"""Every strategy the shop offers can be selected by the admin and sells a unit; one
it cannot serve here is a 400, not a broken sale."""

from __future__ import annotations

import pytest

from tests.contract.wire import assert_error

SKU = "qa-strat-1"

#: the contract's names, plus the lock-free paths of the flash sale
CONTRACT_STRATEGIES = {"local", "naive", "setnx", "setnx-expire", "getset", "token", "fair",
                       "multi", "redlock", "zookeeper", "atomic", "sql"}


@pytest.fixture(scope="module")
def offered(shop) -> list[str]:
    answer = shop.call("GET", "/api/strategies")
    assert answer.status == 200
    names: list[str] = answer.json
    return names


def test_the_shop_offers_every_strategy_of_the_contract(offered):
    assert CONTRACT_STRATEGIES <= set(offered)


def test_every_offered_strategy_sells_a_unit_with_balanced_books(shop, offered):
    token = {"Authorization": f"Bearer {shop.admin_token}"}
    for strategy in offered:
        answer = shop.call("PUT", f"/api/admin/sales/{SKU}", {"stock": 3, "strategy": strategy},
                           headers=token)
        if strategy == "zookeeper":  # this shop has no ZOOKEEPER_HOSTS
            assert_error(answer, 400, "invalid_request")
            continue
        assert answer.status == 200, (strategy, answer.body)
        product = shop.call("GET", f"/api/products/{SKU}").json
        assert product["strategy"] == strategy
        bought = shop.buy(f"sweep-{strategy}", SKU, key=f"sweep-{strategy}")
        assert bought.status == 201, (strategy, bought.body)
        # the order names the sale it was written in: the storefront tells by it whether
        # a reset it has not polled yet came before the order or deleted it
        assert bought.json["sale_started_at"] == product["sale_started_at"], strategy
        again = shop.buy(f"sweep-{strategy}", SKU, key=f"sweep-{strategy}")
        assert (again.status, again.json) == (200, bought.json), strategy
        audit = shop.assert_books_balance(SKU)
        assert (audit["units_sold"], audit["remaining"]) == (1, 2), (strategy, audit)
