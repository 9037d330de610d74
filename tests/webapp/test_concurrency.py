"""Concurrent requests in one process (threads on the Flask app): the per-user rules hold."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.webapp.conftest import SKU, buy, reset


def all_at_once(app, count: int, request):
    """Run ``request(client)`` on ``count`` threads released together; return responses."""
    start = threading.Barrier(count)

    def one(_: int):
        client = app.test_client()
        start.wait(timeout=30)
        response = request(client)
        return response.status_code, response.get_json()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


@pytest.mark.parametrize("strategy", ["token", "atomic", "sql"])
def test_fifty_concurrent_purchases_by_one_user_make_exactly_one_order(app, client, strategy):
    reset(client, stock=10, strategy=strategy, work_ms=5)
    results = all_at_once(app, 50, lambda c: buy(c, "eager"))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(201) == 1
    assert {body["error"] for status, body in results if status != 201} == {"already_purchased"}
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (1, 9, True)


def test_concurrent_requests_with_one_idempotency_key_all_get_the_same_order(app, client):
    reset(client, stock=10, strategy="token", work_ms=20)
    results = all_at_once(app, 20, lambda c: buy(c, "ann", key="same-key"))
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 19 + [201], results
    assert len({body["order_id"] for _, body in results}) == 1
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["consistent"]) == (1, True)


def test_concurrent_buyers_of_a_token_sale_never_oversell(app, client):
    reset(client, stock=5, strategy="token", work_ms=2)
    results = all_at_once(app, 30, lambda c: buy(c, f"user-{threading.get_ident()}"))
    assert sorted(status for status, _ in results).count(201) == 5
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["units_sold"], audit["oversold"], audit["consistent"]) == (5, 0, True)
