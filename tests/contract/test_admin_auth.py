"""``PUT /api/admin/sales/<sku>`` answers 401 ``unauthorized`` to anything but the
exact token after ``Bearer`` (the scheme is case-insensitive, RFC 7235), checks the
token before it looks at the sku or the body, and rejects odd reset bodies with 400."""

from __future__ import annotations

import pytest

from tests.contract.wire import assert_error

SKU = "qa-auth-1"
BODY = {"stock": 5, "strategy": "token"}


def put(shop, headers, sku=SKU, body=None):
    return shop.call("PUT", f"/api/admin/sales/{sku}", BODY if body is None else body,
                     headers=headers)


def refused_headers(token: str) -> dict[str, dict[str, str]]:
    same_length = ("x" if token[0] != "x" else "y") + token[1:]
    return {
        "none": {},
        "no-scheme": {"Authorization": token},
        "basic": {"Authorization": f"Basic {token}"},
        "scheme-only": {"Authorization": "Bearer"},
        "empty-token": {"Authorization": "Bearer "},
        "wrong-same-length": {"Authorization": f"Bearer {same_length}"},
        "prefix": {"Authorization": f"Bearer {token[:-1]}"},
        "suffix": {"Authorization": f"Bearer {token}x"},
        "two-tokens": {"Authorization": f"Bearer {token}, Bearer {token}"},
        "non-ascii": {"Authorization": "Bearer " + "é".encode().decode("latin-1")},
        "other-header": {"X-Admin-Token": token},
        "token-as-cookie": {"Cookie": f"token={token}"},
    }


@pytest.mark.parametrize("variant", list(refused_headers("t")))
def test_anything_but_the_bearer_token_is_401(shop, variant):
    headers = refused_headers(shop.admin_token)[variant]
    before = shop.call("GET", f"/api/products/{SKU}").json
    answer = put(shop, headers, body={"stock": 999, "strategy": "naive"})
    assert_error(answer, 401, "unauthorized")
    assert shop.call("GET", f"/api/products/{SKU}").json == before


def test_a_401_names_the_bearer_scheme_in_www_authenticate(shop):
    # RFC 9110 15.5.2: a 401 MUST carry WWW-Authenticate, so clients know what to send
    answer = put(shop, {})
    assert answer.status == 401
    assert answer.headers.get("www-authenticate", "").lower().startswith("bearer")


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_scheme_is_case_insensitive(shop, scheme):
    assert put(shop, {"Authorization": f"{scheme} {shop.admin_token}"}).status == 200


def test_the_token_is_checked_before_the_sku_and_the_body(shop):
    assert_error(put(shop, {}, sku="no-such-sku"), 401, "unauthorized")
    assert_error(shop.call("PUT", f"/api/admin/sales/{SKU}", raw=b"{junk",
                           headers={"Content-Type": "application/json"}), 401, "unauthorized")


def test_an_unknown_sku_with_the_right_token_is_404(shop):
    answer = put(shop, {"Authorization": f"Bearer {shop.admin_token}"}, sku="no-such-sku")
    assert_error(answer, 404, "unknown_sku")


BAD_RESETS = {
    "unknown-strategy": {"stock": 5, "strategy": "quantum"},
    "strategy-case": {"stock": 5, "strategy": "TOKEN"},
    "missing-strategy": {"stock": 5},
    "missing-stock": {"strategy": "token"},
    "negative-stock": {"stock": -1, "strategy": "token"},
    "float-stock": {"stock": 5.0, "strategy": "token"},
    "string-stock": {"stock": "5", "strategy": "token"},
    "bool-stock": {"stock": True, "strategy": "token"},
    "huge-stock": {"stock": 2**63, "strategy": "token"},
    "negative-work": {"stock": 5, "strategy": "token", "work_ms": -1},
    "null-work": {"stock": 5, "strategy": "token", "work_ms": None},
    "zero-limit": {"stock": 5, "strategy": "token", "limit": 0},
    "array": [{"stock": 5, "strategy": "token"}],
}


@pytest.mark.parametrize("body", BAD_RESETS.values(), ids=BAD_RESETS.keys())
def test_an_odd_reset_body_is_400_and_changes_nothing(shop, body):
    before = shop.call("GET", f"/api/products/{SKU}").json
    answer = put(shop, {"Authorization": f"Bearer {shop.admin_token}"}, body=body)
    assert_error(answer, 400, "invalid_request")
    assert shop.call("GET", f"/api/products/{SKU}").json == before


def test_a_reset_is_visible_in_the_product_and_the_audit(shop):
    shop.reset(SKU, 7, "sql", work_ms=3)
    product = shop.call("GET", f"/api/products/{SKU}").json
    assert (product["stock"], product["sold"], product["strategy"]) == (7, 0, "sql")
    audit = shop.assert_books_balance(SKU)
    assert (audit["initial_stock"], audit["orders"]) == (7, 0)
