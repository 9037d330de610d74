"""Fixtures for the web app: an app on a real redis-server and on SQLite or PostgreSQL.

``app`` is parametrized over both databases, migrated once per session with Alembic
(as in production). PostgreSQL gets a database of its own, named for this process,
dropped at the end; the server is shared with other engineers' tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from lockcore.embedded import RedisServer
from tests.support import scratch_postgres
from webapp import create_app, db, sales
from webapp.extensions import Backends, make_engine
from webapp.models import Order, Product, Sale
from webapp.services import Checkout

ADMIN_TOKEN = "test-admin-token"
SKU = "sku-1"


@pytest.fixture
def sessions(tmp_path) -> Iterator[sessionmaker[Session]]:
    """A scratch SQLite shop migrated with Alembic, for the service-layer tests."""
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    db.upgrade(url)
    engine = make_engine(url)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


@pytest.fixture
def deps(sessions: sessionmaker[Session], redis_client: Any) -> Checkout:
    """``checkout``'s dependencies on ``sku-1``, an ``atomic`` sale of 50 units, with no
    lock and no sleeping (a test module with other needs defines its own ``deps``)."""
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=50, strategy="atomic")
    sales.reset_sale(sessions, redis_client, SKU, stock=50, strategy="atomic")
    return Checkout(sessions=sessions, redis=redis_client, lock_for=lambda sale, user: None,
                    sleep=lambda seconds: None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with scratch_postgres("seckill_webapp") as (_, _, url):
        db.upgrade(url)
        yield url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('webapp') / 'shop.sqlite'}"
    db.upgrade(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def make_app(database_url: str, redis_url: str, **overrides: Any) -> Flask:
    return create_app({"TESTING": True, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
                       "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN, "REDLOCK_URLS": [],
                       "ZOOKEEPER_HOSTS": None, "LOCK_TIMEOUT_S": 2.0, **overrides})


def backends(app: Flask) -> Backends:
    found: Backends = app.extensions["seckill"]
    return found


def empty_shop(app: Flask) -> None:
    with backends(app).sessions.begin() as session:
        for table in (Order, Sale, Product):
            session.execute(delete(table))


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis server of this test's own: it may pause, stop or restart it."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def one_sale(app: Flask, strategy: str, stock: int) -> Backends:
    """Empty ``app``'s shop, then sell ``stock`` units of ``sku-1`` by ``strategy``."""
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=stock,
                         strategy=strategy)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=stock, strategy=strategy)
    return shop


@pytest.fixture
def app(database_url: str, redis_url: str, redis_client: Any) -> Iterator[Flask]:
    """A fresh shop: ``sku-1`` (stock 10, ``token``) and ``sku-2`` (stock 1, ``atomic``)."""
    app = make_app(database_url, redis_url)
    empty_shop(app)
    b = backends(app)
    sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="token")
    sales.create_product(b.sessions, "sku-2", "Headphones", 7_900, stock=1, strategy="atomic")
    sales.reset_sale(b.sessions, b.redis, SKU, stock=10, strategy="token")
    sales.reset_sale(b.sessions, b.redis, "sku-2", stock=1, strategy="atomic")
    yield app
    b.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def lock_held_at_stock_writes(monkeypatch: pytest.MonkeyPatch, redis_client: Any,
                              module: Any) -> list[bool]:
    """Whether the sale's token lock key was in Redis at each stock write ``module``
    (``lockedpath``, ``allocation``) makes from now on."""
    import lockcore

    lock_key = lockcore.create("token", redis_client, f"stock:{SKU}").key
    held_at_write: list[bool] = []
    real_set_stock = module.set_stock

    def watched_set_stock(client: Any, key: str, units: int, **kwargs: Any) -> Any:
        held_at_write.append(bool(redis_client.exists(lock_key)))
        return real_set_stock(client, key, units, **kwargs)

    monkeypatch.setattr(module, "set_stock", watched_set_stock)
    return held_at_write


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def reset(client: FlaskClient, sku: str = SKU, **body: Any) -> Any:
    response = client.put(f"/api/admin/sales/{sku}", json=body, headers=auth())
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def buy(client: FlaskClient, user: str, sku: str = SKU, quantity: int = 1,
        key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(f"/api/products/{sku}/purchase",
                       json={"user_id": user, "quantity": quantity}, headers=headers)


def buy_after_holdoff(client: FlaskClient, user: str, sku: str = SKU,
                      timeout: float = 15.0) -> Any:
    """Buy, retrying the 503s of the hold-off a lock path's sale starts after Redis lost
    its data (one lock TTL: ``webapp/section.py``)."""
    import time

    deadline = time.monotonic() + timeout
    while (response := buy(client, user, sku)).status_code == 503 \
            and "Redis restarted" in response.get_json()["detail"] \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return response


# ZooKeeper for the ``zookeeper`` strategy: the lockcore tests' session fixture, shared.
from tests.lockcore.conftest import zookeeper_hosts  # noqa: E402, F401
