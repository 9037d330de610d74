"""A reset while an ``atomic`` purchase is in flight (the contract sweep's finding:
resets during load left Redis tens of units above the database, and ``atomic-sharded``
oversold). Nothing holds a lock-free purchase off a reset, so the purchase carries the
sale generation its units came from (``SaleInfo.generation``): its row is written only
in that generation, and units go back only to that generation's stock."""

from __future__ import annotations

import pytest

from webapp import paths, sales, services
from webapp.problems import SaleReset
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


def reset(deps: Checkout, stock: int = 50) -> None:
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=stock, strategy="atomic")


def books(deps: Checkout) -> tuple[object, ...]:
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    return (audit["orders"], audit["remaining"], audit["database_remaining"],
            audit["consistent"])


@pytest.mark.parametrize("key", [None, "key-1"], ids=["fast-path", "idempotency-key"])
def test_a_unit_taken_before_a_reset_is_not_written_into_the_new_sale(deps, monkeypatch, key):
    real = paths.record_order

    def reset_then_write(*args, **kwargs):
        reset(deps)  # the units are taken (g0); the new sale (g1) has 50
        return real(*args, **kwargs)

    monkeypatch.setattr(paths, "record_order", reset_then_write)
    with pytest.raises(SaleReset):
        checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key=key))
    # before the generation: 1 order, database 49, Redis 50 (the old sale's unit lost)
    assert books(deps) == (0, 50, 50, True)
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key=key)).created
    assert books(deps) == (1, 49, 49, True)


def test_a_buyer_who_looked_the_sale_up_before_a_reset_takes_nothing_from_the_new_one(
        deps, monkeypatch):
    real = services.cached_sale

    def look_up_then_reset(*args, **kwargs):
        sale = real(*args, **kwargs)  # g0
        reset(deps)
        return sale

    monkeypatch.setattr(services, "cached_sale", look_up_then_reset)
    with pytest.raises(SaleReset):  # an Idempotency-Key: the take is a second step
        checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key="key-1"))
    # before: the take came from the new stock (49) and its row was refused (database 50)
    assert books(deps) == (0, 50, 50, True)
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key="key-1")).created


#: where a purchase fails once ``atomic_checkout.lua`` took its units: in the order write
#: (``record_order`` gives them back), or before it (``services._undo_fast`` does)
FAILURE_POINTS = [pytest.param("webapp.orders", "insert_grouped", id="in-the-write"),
                  pytest.param("webapp.services", "_path_for", id="before-the-write")]


@pytest.mark.parametrize(("module", "name"), FAILURE_POINTS)
def test_a_failed_purchase_gives_units_back_only_to_the_generation_they_came_from(
        deps, monkeypatch, module, name):
    def reset_then_fail(*args, **kwargs):
        reset(deps)  # the units were taken from g0; the new sale (g1) has 50
        raise RuntimeError("the purchase died")

    monkeypatch.setattr(f"{module}.{name}", reset_then_fail)
    with pytest.raises(RuntimeError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert books(deps) == (0, 50, 50, True)  # before: Redis 51, the old unit added
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    assert books(deps) == (1, 49, 49, True)


@pytest.mark.parametrize(("module", "name"), FAILURE_POINTS)
def test_a_failed_purchase_without_a_reset_still_gives_its_units_back(
        deps, monkeypatch, module, name):
    def fail(*args, **kwargs):
        raise RuntimeError("the purchase died")

    monkeypatch.setattr(f"{module}.{name}", fail)
    with pytest.raises(RuntimeError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert books(deps) == (0, 50, 50, True)


# atomic-sharded: the same, with the generation kept per shard (sharding.py)

@pytest.fixture
def sharded(deps) -> Checkout:
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=50, strategy="atomic-sharded")
    return deps


def reset_sharded(deps: Checkout) -> None:
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=50, strategy="atomic-sharded")


def test_a_sharded_unit_taken_before_a_reset_is_not_written_into_the_new_sale(
        sharded, monkeypatch):
    from webapp import orders

    real = orders.insert_order

    def reset_then_write(*args, **kwargs):
        reset_sharded(sharded)
        return real(*args, **kwargs)

    monkeypatch.setattr(orders, "insert_order", reset_then_write)
    with pytest.raises(SaleReset):
        checkout(sharded, PurchaseRequest(SKU, "ann"))
    assert books(sharded) == (0, 50, 50, True)  # before: 1 order, database 49, Redis 50


def test_a_sharded_buyer_who_looked_the_sale_up_before_a_reset_takes_nothing_new(
        sharded, monkeypatch):
    real = services.cached_sale

    def look_up_then_reset(*args, **kwargs):
        sale = real(*args, **kwargs)
        reset_sharded(sharded)
        return sale

    monkeypatch.setattr(services, "cached_sale", look_up_then_reset)
    with pytest.raises(SaleReset):
        checkout(sharded, PurchaseRequest(SKU, "ann"))
    assert books(sharded) == (0, 50, 50, True)  # before the shard generation: Redis 49
    monkeypatch.undo()
    assert checkout(sharded, PurchaseRequest(SKU, "ann")).created
    assert books(sharded) == (1, 49, 49, True)



@pytest.mark.parametrize("strategy", ["atomic", "sql", "atomic-sharded"])
def test_a_sharded_buyer_who_found_the_old_sale_empty_does_not_flag_the_new_one_sold_out(
        deps, monkeypatch, strategy):
    # a buyer of a sold-out atomic-sharded sale, caught by a reset to another strategy,
    # found the old (untouched) shards empty and flagged the new sale: every later
    # buyer heard 409 sold_out beside 20 units, and the audit said consistent
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=0, strategy="atomic-sharded")
    real = services.cached_sale

    def look_up_then_reset(*args, **kwargs):
        sale = real(*args, **kwargs)
        sales.reset_sale(deps.sessions, deps.redis, SKU, stock=20, strategy=strategy)
        return sale

    monkeypatch.setattr(services, "cached_sale", look_up_then_reset)
    with pytest.raises(SaleReset):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "bo")).created
    assert books(deps) == (1, 19, 19, True)
