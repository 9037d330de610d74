"""The shop with its ZooKeeper down: a zookeeper purchase answers 503 at once (not a
connect timeout per request, one after another), and the shop sells again by itself
once ZooKeeper is back."""

from __future__ import annotations

import time
from typing import Any

import pytest

from lockcore.zkserver import ZooKeeperServer
from webapp import extensions, sales

from .conftest import SKU, backends, buy, empty_shop, make_app

pytestmark = pytest.mark.zookeeper


def test_zookeeper_down_is_a_quick_503_and_the_shop_recovers_when_it_is_back(
        sqlite_url: str, redis_url: str, redis_client: Any, monkeypatch) -> None:
    monkeypatch.setattr(extensions, "ZK_FIRST_CONNECT_S", 0.5)
    server = ZooKeeperServer()  # its port picked, nothing listening there yet
    app = make_app(sqlite_url, redis_url, ZOOKEEPER_HOSTS=server.hosts)
    b = backends(app)
    try:
        empty_shop(app)
        sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="zookeeper")
        sales.reset_sale(b.sessions, b.redis, SKU, stock=10, strategy="zookeeper")
        client = app.test_client()
        first = buy(client, "ann")  # waits for the session once, then gives up
        assert first.status_code == 503, first.get_json()
        assert first.get_json()["error"] == "busy"
        began = time.monotonic()
        again = buy(client, "bob")
        assert again.status_code == 503, again.get_json()
        assert time.monotonic() - began < 0.5, "every request waited for a connect timeout"
        server.start()
        deadline, status = time.monotonic() + 20, 0
        while time.monotonic() < deadline and status != 201:
            status = buy(client, "cy").status_code  # reconnects at most 2 s apart
            time.sleep(0.1)
        assert status == 201
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
        assert (audit["units_sold"], audit["consistent"]) == (1, True), audit
    finally:
        b.close()
        server.stop()
