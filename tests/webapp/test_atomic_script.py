"""``atomic_purchase.lua`` on a real redis-server: its return codes and the sold-out flag."""

from __future__ import annotations

from webapp import scripts
from webapp.keys import SaleKeys

KEYS = SaleKeys("sku-1")


def take(redis_client, quantity: int, limit: int = 5) -> int:
    script = scripts.script(redis_client, "atomic_purchase")
    return int(script(keys=[KEYS.stock, KEYS.soldout], args=[quantity, limit]))


def test_it_decrements_and_returns_what_is_left(redis_client):
    redis_client.set(KEYS.stock, 3)
    assert take(redis_client, 2) == 1
    assert redis_client.get(KEYS.stock) == b"1"


def test_not_enough_left_changes_nothing_and_only_zero_sets_the_flag(redis_client):
    redis_client.set(KEYS.stock, 1)
    assert take(redis_client, 2) == -1
    assert redis_client.get(KEYS.stock) == b"1" and not redis_client.exists(KEYS.soldout)
    assert take(redis_client, 1) == 0
    assert take(redis_client, 1) == -1
    assert redis_client.exists(KEYS.soldout)


def test_a_quantity_above_the_limit_is_refused_before_the_stock_is_read(redis_client):
    redis_client.set(KEYS.stock, 100)
    assert take(redis_client, 6, limit=5) == -2
    assert redis_client.get(KEYS.stock) == b"100"
