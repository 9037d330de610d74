"""A sale whose row names a strategy this shop does not know (an operator's SQL:
``UPDATE sales SET strategy = 'Token'``): purchases and its audit answered 400
invalid_request "unknown strategy 'Token'; choose one of ...", blaming the buyer for the
server's data (a text audit). It is the server's 503 busy now, naming the sale's
strategy and the reset that mends it, logged once; the reset mends it."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import update

from tests.webapp.conftest import SKU, auth, backends, buy, reset
from webapp.keys import SaleKeys
from webapp.logthrottle import PER_REQUEST
from webapp.models import Sale


@pytest.fixture
def unknown(app, redis_client):
    shop = backends(app)
    with shop.sessions.begin() as session:
        session.execute(update(Sale).where(Sale.sku == SKU).values(strategy="Token"))
    redis_client.delete(SaleKeys(SKU).info)  # as after a Redis restart: read again
    PER_REQUEST.forget()  # its line is logged once a minute: the other database's too
    return shop


def test_a_sale_with_an_unknown_strategy_is_503_naming_it_and_the_reset(
        client, unknown, caplog):
    with caplog.at_level(logging.WARNING, logger="webapp.paths"):
        answers = [buy(client, "ann"), buy(client, "bob"), client.get(f"/api/sales/{SKU}/audit")]
    for answer in answers:
        assert answer.status_code == 503, answer.get_json()
        assert answer.get_json()["error"] == "busy"
        detail = answer.get_json()["detail"]
        assert "'Token'" in detail and "reset" in detail and SKU in detail, detail
        # no sooner than an admin could act: it was 5 s, to a buyer (a UI audit)
        assert answer.headers["Retry-After"] == "60"
    listed = client.get("/api/products")  # the list still shows it, by the database
    assert listed.status_code == 200 and SKU in {p["sku"] for p in listed.get_json()}
    logged = [r for r in caplog.records if "'Token'" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]


def test_an_admin_reset_with_a_known_strategy_mends_it(client, unknown):
    assert reset(client, stock=3, strategy="atomic")["strategy"] == "atomic"
    assert buy(client, "ann").status_code == 201
    assert client.get(f"/api/sales/{SKU}/audit").get_json()["consistent"]


def test_an_unknown_strategy_in_a_reset_body_stays_the_admins_400(client, unknown):
    answer = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                        json={"stock": 5, "strategy": "Token"})
    assert answer.status_code == 400
    assert answer.get_json()["error"] == "invalid_request"
    assert "unknown strategy 'Token'" in answer.get_json()["detail"]
