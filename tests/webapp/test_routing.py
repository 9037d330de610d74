"""The purchase URL matched by its shape (``routing.py``) gives exactly Werkzeug's
answer, and leaves everything else to Werkzeug."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.ctx import RequestContext
from werkzeug.routing import MapAdapter
from werkzeug.test import EnvironBuilder

from webapp import create_app
from webapp.routing import HotRoute, ShopRequestContext

PURCHASE = "/api/products/sku-1/purchase"
WEBSOCKET = {"Connection": "Upgrade", "Upgrade": "websocket"}


@pytest.fixture(scope="module")
def app() -> Flask:
    # nothing here connects: the backends are made on first use
    return create_app({"TESTING": True, "DATABASE_URL": "sqlite://", "SECKILL_ADMIN_TOKEN": "t",
                       "REDIS_URL": "redis://127.0.0.1:1/0"})


def routed(context: RequestContext) -> tuple[Any, ...]:
    context.match_request()
    request, error = context.request, context.request.routing_exception
    return (request.url_rule, request.view_args, type(error),
            getattr(error, "new_url", None), getattr(error, "valid_methods", None))


CASES = [
    (PURCHASE, "POST", {}), (PURCHASE, "GET", {}), (PURCHASE, "PUT", {}),
    (PURCHASE, "OPTIONS", {}), (PURCHASE, "HEAD", {}), (PURCHASE, "POST", WEBSOCKET),
    ("/api/products//purchase", "POST", {}), ("/api/products/sku-1/purchase/", "POST", {}),
    ("/api/products/a/b/purchase", "POST", {}), ("/api/products/a%2Fb/purchase", "POST", {}),
    ("/api//products/sku-1/purchase", "POST", {}), ("//api/products/sku-1/purchase", "POST", {}),
    ("/api/products/sku-1//purchase", "POST", {}), ("/api/products/sku-1/purchasex", "POST", {}),
    ("/api/products/purchase", "POST", {}), ("/api/products/ü é ☃/purchase", "POST", {}),
    ("/api/products/%25/purchase", "POST", {}), ("/api/products/ /purchase", "POST", {}),
    ("/api/products/sku-1/purchase?x=1", "POST", {}), ("/api/products/sku-1", "POST", {}),
]


@pytest.mark.parametrize(("path", "method", "headers"), CASES)
def test_the_hot_route_answers_as_werkzeug_does(app, path, method, headers):
    environ = EnvironBuilder(path=path, method=method, headers=headers).get_environ()
    with app.app_context():
        assert routed(ShopRequestContext(app, environ)) == routed(RequestContext(app, environ))


def test_a_purchase_never_reaches_werkzeugs_matcher(app, monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("matched by Werkzeug")

    monkeypatch.setattr(MapAdapter, "match", refuse)
    for sku in ("sku-1", "ü é ☃", "%", "x" * 300):
        environ = EnvironBuilder(path=f"/api/products/{sku}/purchase", method="POST").get_environ()
        with app.app_context():
            rule, view_args, *_ = routed(ShopRequestContext(app, environ))
        assert (rule.endpoint, view_args) == ("api.purchase", {"sku": sku})


@pytest.mark.filterwarnings("ignore:Current server name")
def test_a_request_for_another_server_name_still_goes_to_werkzeug(app):
    # with subdomain matching on, Werkzeug answers 404 for a host outside SERVER_NAME
    environ = EnvironBuilder(path=PURCHASE, method="POST",
                             headers={"Host": "elsewhere.example"}).get_environ()
    app.config["SERVER_NAME"], app.subdomain_matching = "shop.example", True
    try:
        with app.app_context():
            assert (routed(ShopRequestContext(app, environ))
                    == routed(RequestContext(app, environ)))
    finally:
        app.config["SERVER_NAME"], app.subdomain_matching = None, False


def test_only_a_rule_of_the_simple_shape_gets_a_hot_route():
    shaped = Flask(__name__)
    for rule, endpoint in [("/a/<x>/b", "plain"), ("/a/<int:x>/b", "typed"),
                           ("/a/<string(minlength=2):x>/b", "bounded"), ("/a/<x>/<y>", "two")]:
        shaped.add_url_rule(rule, endpoint, lambda **kw: "")
    assert HotRoute.for_endpoint(shaped.url_map, "plain") is not None
    for endpoint in ("typed", "bounded", "two", "absent"):
        assert HotRoute.for_endpoint(shaped.url_map, endpoint) is None
