"""The same contract on PostgreSQL (a database of our own, dropped at the end): a crowd
keeps the books, odd text survives the round trip, and a database that refuses
connections is 503 ``busy`` and a ``/healthz`` naming ``database``, until it is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.contract.shop import Shop, served_shop
from tests.contract.wire import assert_error
from tests.support import scratch_postgres

pytestmark = pytest.mark.postgres

SKU = "qa-pg-1"


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[object, str, str]]:
    with scratch_postgres("seckill_contract") as found:
        yield found


@pytest.fixture(scope="module")
def shop(database) -> Iterator[Shop]:
    with served_shop([SKU], database_url=database[2]) as served:
        yield served


@pytest.mark.parametrize("strategy", ["token", "atomic", "sql"])
def test_a_crowd_on_postgres_buys_exactly_the_stock(shop, strategy):
    shop.reset(SKU, 20, strategy)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda n: shop.buy(f"pg-{strategy}-{n}-小明", SKU), range(60)))
    assert {a.status for a in answers} <= {201, 409, 503}
    audit = shop.assert_books_balance(SKU)
    assert audit["units_sold"] == sum(a.status == 201 for a in answers)
    if not any(a.status == 503 for a in answers):
        assert audit["units_sold"] == 20


@pytest.mark.parametrize("user", ["🛒" * 64, "o'brien\"; --", "ünïcödé"])
def test_odd_text_round_trips_through_postgres(shop, user):
    shop.reset(SKU, 5, "sql")
    answer = shop.buy(user, SKU, key=f"pg-{len(user)}")
    assert answer.status == 201 and answer.json["user_id"] == user
    assert shop.buy(user, SKU, key=f"pg-{len(user)}").json == answer.json


def test_a_nul_in_a_user_id_is_400_not_a_postgres_error(shop):
    assert_error(shop.buy("nul\u0000byte", SKU), 400, "invalid_request")


def test_with_the_database_refusing_connections_the_shop_says_busy_then_recovers(shop, database):
    admin, name, _ = database
    shop.reset(SKU, 5, "token")
    admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    try:
        health = shop.call("GET", "/healthz")
        body = assert_error(health, 503)
        assert body["database"] != "ok" and body["redis"] == "ok"
        assert "database" in body["detail"]
        for n in range(4):
            assert_error(shop.buy(f"db-down-{n}", SKU), 503, "busy")
    finally:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    deadline = time.monotonic() + 30
    while shop.call("GET", "/healthz").status != 200:
        assert time.monotonic() < deadline, "the shop did not recover"
        time.sleep(0.2)
    assert shop.buy("db-back", SKU).status == 201
    shop.assert_books_balance(SKU)
