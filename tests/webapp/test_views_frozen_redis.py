"""The product views wait for a frozen Redis only briefly, then show the database's
count: on the purchases' client (``REDIS_SOCKET_TIMEOUT_S``, 10 s) a paused Redis held
``GET /`` and every products poll of the storefront for 10 s (a storefront audit)."""

from __future__ import annotations

import time

import pytest

from webapp import sales
from webapp.extensions import VIEW_REDIS_TIMEOUT_S

from .conftest import SKU, backends, empty_shop, make_app

pytestmark = pytest.mark.timeout(60)


# a query string in REDIS_URL wins over from_url's arguments: it gave the views 10 s
@pytest.mark.parametrize("query", ["", "?socket_timeout=10"])
def test_the_product_views_answer_from_the_database_soon_while_redis_is_frozen(
        sqlite_url, own_redis, query):
    app = make_app(sqlite_url, own_redis.url + query, REDIS_SOCKET_TIMEOUT_S=10.0)
    try:
        empty_shop(app)
        b = backends(app)
        sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=7, strategy="atomic")
        sales.create_product(b.sessions, "sku-2", "Mouse", 1_900, stock=3, strategy="token")
        sales.reset_sale(b.sessions, b.redis, SKU, stock=7, strategy="atomic")
        client = app.test_client()
        assert client.get("/api/products").status_code == 200  # connections made
        b.redis.set(f"sale:{{{SKU}}}:stock", 5)  # Redis's live count, ahead of the orders
        assert client.get(f"/api/products/{SKU}").get_json()["stock"] == 5
        own_redis.pause()
        try:
            for path in ("/", "/api/products", f"/api/products/{SKU}"):
                started = time.monotonic()
                answer = client.get(path)
                waited = time.monotonic() - started
                assert answer.status_code == 200, (path, answer.get_data()[:200])
                # one view's wait (the products list stops asking after the first), not
                # the purchases' 10 s; slack for a loaded machine
                assert waited < VIEW_REDIS_TIMEOUT_S + 3, (path, waited)
            assert answer.get_json()["stock"] == 7  # the database's count
        finally:
            own_redis.resume()
        assert client.get(f"/api/products/{SKU}").get_json()["stock"] == 5  # live again
    finally:
        backends(app).close()


def test_views_queued_for_a_connection_do_not_wait_their_turn_at_a_frozen_redis(
        sqlite_url, own_redis):
    # a pool of 2 and 6 views: they waited 2, 2, 4, 4, 6, 6 s for a connection and its
    # timeout in turn (a review); past a full pool a view answers from the database
    import threading

    app = make_app(sqlite_url, own_redis.url, REDIS_MAX_CONNECTIONS=2)
    try:
        empty_shop(app)
        b = backends(app)
        sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=7, strategy="atomic")
        waits: list[tuple[int, float]] = []

        def view() -> None:
            started = time.monotonic()
            status = app.test_client().get(f"/api/products/{SKU}").status_code
            waits.append((status, time.monotonic() - started))

        own_redis.pause()
        try:
            crowd = [threading.Thread(target=view) for _ in range(6)]
            for thread in crowd:
                thread.start()
            for thread in crowd:
                thread.join(30)
        finally:
            own_redis.resume()
        assert [status for status, _ in waits] == [200] * 6
        assert max(waited for _, waited in waits) < VIEW_REDIS_TIMEOUT_S + 2.5, waits
    finally:
        backends(app).close()
