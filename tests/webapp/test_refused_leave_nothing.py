"""A refused purchase leaves nothing of itself in Redis: its reservation went, its nonce
stayed, one hash entry per refused purchase until the next reset (a security audit:
2,000 in 5 s by asking for more units than were left)."""

from __future__ import annotations

import pytest

from tests.webapp.conftest import SKU, backends, buy, reset
from webapp.keys import SaleKeys


@pytest.mark.parametrize("strategy", ["atomic", "token", "fair", "sql"])
def test_a_purchase_refused_for_want_of_stock_leaves_no_nonce(app, client, strategy):
    reset(client, stock=2, strategy=strategy)
    redis = backends(app).redis
    keys = SaleKeys(SKU)
    for n in range(5):
        answer = buy(client, f"greedy-{n}", quantity=3)
        assert answer.status_code == 409, answer.get_json()
    assert redis.hlen(keys.reservations) == 0, redis.hgetall(keys.reservations)
    assert redis.scard(keys.buyers) == 0
    assert buy(client, "greedy-0", quantity=2).status_code == 201  # free to buy
