"""``ShopClient`` against the real shop (served by werkzeug in a thread, SQLite, our
own redis-server): what the showdown's admin calls send is what the shop checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from loadtest.shop import ShopClient
from tests.loadtest.stubshop import serve
from tests.webapp.conftest import SKU, backends, make_app
from webapp import db, sales


@pytest.fixture
def shop_url(tmp_path, redis_url, redis_client, token) -> Iterator[str]:
    """The shop at a URL, with ``sku-1`` and the admin token the test is parametrized with."""
    database_url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    db.upgrade(database_url)
    app: Flask = make_app(database_url, redis_url, SECKILL_ADMIN_TOKEN=token)
    b = backends(app)
    sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="token")
    sales.reset_sale(b.sessions, b.redis, SKU, stock=10, strategy="token")
    try:
        with serve(app) as url:
            yield url
    finally:
        b.close()


# à ends in the byte 0xA0 (C3 A0), which the shop once stripped as a latin-1 NBSP
TOKENS = ["tökén", "ключ", "secretà"]


@pytest.mark.parametrize("token", TOKENS)
def test_a_non_ascii_admin_token_resets_a_sale(shop_url, token):
    # http.client encodes a header str as latin-1: tökén went as latin-1 bytes (401,
    # 'the shop refused the admin token'), ключ raised UnicodeEncodeError ('cannot
    # reach the shop'). A client sends its UTF-8 bytes, as the admin page and curl do.
    client = ShopClient(shop_url, token)
    assert client.unusable(SKU) is None
    assert client.reset_sale(SKU, 5, "atomic", 0)["stock"] == 5
    assert client.audit(SKU)["initial_stock"] == 5


@pytest.mark.parametrize("token", ["tökén"])
def test_a_wrong_non_ascii_token_is_still_refused(shop_url):
    assert "refused the admin token" in (ShopClient(shop_url, "tokén").unusable(SKU) or "")
