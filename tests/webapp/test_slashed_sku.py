"""A sku with a ``/`` (``%2F``, decoded before routing) is an unknown sku, as every
other sku no product has: 404 ``unknown_sku``, not the server's "The requested URL was
not found..." (a storefront audit); the admin routes ask for the token first."""

from __future__ import annotations

import pytest

from tests.webapp.conftest import auth
from webapp.validation import plausible_sku


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/api/products/sku%2F1"), ("head", "/api/products/sku%2F1"),
    ("post", "/api/products/sku%2F1/purchase"), ("get", "/api/sales/a%2Fb%2Fc/audit"),
    ("put", "/api/admin/sales/sku%2F1"), ("get", "/api/admin/sales/sku%2F1/buyers")])
def test_a_sku_with_a_slash_is_an_unknown_sku(client, method, path):
    body = {"user_id": "ann"} if method == "post" else {"stock": 1, "strategy": "token"}
    answer = getattr(client, method)(path, json=body, headers=auth())
    assert answer.status_code == 404
    if method != "head":
        assert answer.get_json()["error"] == "unknown_sku", answer.get_json()
    if "/admin/" in path:
        refused = getattr(client, method)(path, json=body)
        assert refused.status_code == 401, refused.get_json()


def test_other_unknown_paths_stay_not_found(client):
    answer = client.get("/api/nothing/here")
    assert (answer.status_code, answer.get_json()["error"]) == (404, "not_found")
    answer = client.get("/api/products/sku-1/audit")  # a mistyped route, no %2F: a review
    assert (answer.status_code, answer.get_json()["error"]) == (404, "not_found")
    answer = client.delete("/api/products/sku%2F1")  # no route takes a DELETE
    assert answer.get_json()["error"] in ("not_found", "method_not_allowed")


def test_no_product_can_have_a_slash_in_its_sku():
    assert not plausible_sku("sku/1") and plausible_sku("sku-1")
