"""The served shop as an outside user sees it: a base URL, an admin token, some skus.

``served_shop`` starts the real stack (gunicorn + gevent workers, its own embedded
redis-server, SQLite or a PostgreSQL database of its own) and adds products with
distinct skus so that the test modules sharing one server never sell each other's
stock. Products are added through the same ``create_product`` the demo seeding uses;
everything else goes over HTTP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy.orm import sessionmaker

from lockcore.embedded import EmbeddedRedis, RedisServer
from tests.contract.wire import Answer, request
from webapp import sales
from webapp.extensions import make_engine
from webapp.serve import ServedApp


@dataclass
class Shop:
    url: str
    admin_token: str
    redis_server: RedisServer
    served: ServedApp

    def call(self, method: str, path: str, body: Any = None, **options: Any) -> Answer:
        return request(self.url, method, path, body, **options)

    def buy(self, user: str, sku: str, quantity: int | None = None,
            key: str | None = None) -> Answer:
        body: dict[str, Any] = {"user_id": user}
        if quantity is not None:
            body["quantity"] = quantity
        headers = {"Idempotency-Key": key} if key is not None else {}
        return self.call("POST", f"/api/products/{sku}/purchase", body, headers=headers)

    def reset(self, sku: str, stock: int, strategy: str = "token", **extra: Any) -> Answer:
        answer = self.call("PUT", f"/api/admin/sales/{sku}",
                           {"stock": stock, "strategy": strategy, **extra},
                           headers={"Authorization": f"Bearer {self.admin_token}"})
        assert answer.status == 200, answer.body
        return answer

    def audit(self, sku: str) -> dict[str, Any]:
        answer = self.call("GET", f"/api/sales/{sku}/audit")
        assert answer.status == 200, answer.body
        result: dict[str, Any] = answer.json
        return result

    def assert_books_balance(self, sku: str) -> dict[str, Any]:
        """The audit invariants the contract promises after any scenario."""
        audit = self.audit(sku)
        assert audit["consistent"] is True, audit
        assert audit["oversold"] == 0 and audit["duplicate_buyers"] == 0, audit
        assert audit["remaining"] + audit["units_sold"] == audit["initial_stock"], audit
        assert audit["remaining"] >= 0, audit
        return audit


def add_products(database_url: str, redis_url: str, skus: list[str]) -> None:
    """Add the products and start their sales, as the demo seeding does. A sale left
    out of Redis looks like one Redis lost: its first admin reset reloads it and waits
    out the hold-off of one lock TTL (10 s), and 32 of them cost the suite minutes."""
    engine = make_engine(database_url)
    client = redis.Redis.from_url(redis_url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        for sku in skus:
            if sales.create_product(sessions, sku, f"Contract test {sku}", 1_000, stock=0,
                                    strategy="token"):
                sales.reset_sale(sessions, client, sku, stock=0, strategy="token")
    finally:
        client.close()
        engine.dispose()


@contextlib.contextmanager
def served_shop(skus: list[str], database_url: str | None = None,
                workers: int = 2, **env: str) -> Iterator[Shop]:
    with EmbeddedRedis(1) as embedded:
        served = ServedApp(workers=workers, redis_url=embedded.urls[0],
                           database_url=database_url, env=env)
        with served:
            assert served.database_url is not None
            add_products(served.database_url, embedded.urls[0], skus)
            yield Shop(served.url, served.admin_token, embedded.servers[0], served)


def redis_of(shop: Shop) -> redis.Redis:
    return redis.Redis.from_url(shop.redis_server.url)
