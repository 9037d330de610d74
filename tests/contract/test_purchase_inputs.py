"""What a buyer may send to ``POST /api/products/<sku>/purchase``, as raw bytes: every
malformed body, header or number is a 400 ``invalid_request``, every sane one a 201."""

from __future__ import annotations

import json

import pytest

from tests.contract.wire import assert_error

SKU = "qa-input-1"
LIMITED = "qa-input-2"  # per-user limit 5
PATH = f"/api/products/{SKU}/purchase"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module", autouse=True)
def stocked(shop):
    shop.reset(SKU, 1_000)
    shop.reset(LIMITED, 1_000, "atomic", limit=5)


BAD_BODIES = {
    "empty": b"",
    "array": b'[{"user_id": "ann"}]',
    "string": b'"ann"',
    "number": b"42",
    "null": b"null",
    "truncated": b'{"user_id": "ann"',
    "trailing-junk": b'{"user_id": "ann"} x',
    "single-quotes": b"{'user_id': 'ann'}",
    "not-utf8": b'{"user_id": "caf\xe9"}',
    "lone-surrogate": b'{"user_id": "x\\ud800y"}',
    "nul": b'{"user_id": "a\\u0000b"}',
    "user-id-number": b'{"user_id": 7}',
    "user-id-null": b'{"user_id": null}',
    "user-id-bool": b'{"user_id": true}',
    "user-id-object": b'{"user_id": {"$ne": null}}',
    "user-id-blank": b'{"user_id": " \\t "}',
    "user-id-too-long": json.dumps({"user_id": "u" * 65}).encode(),
    "quantity-zero": b'{"user_id": "ann", "quantity": 0}',
    "quantity-negative": b'{"user_id": "ann", "quantity": -1}',
    "quantity-float": b'{"user_id": "ann", "quantity": 1.0}',
    "quantity-exponent": b'{"user_id": "ann", "quantity": 1e0}',
    "quantity-string": b'{"user_id": "ann", "quantity": "1"}',
    "quantity-bool": b'{"user_id": "ann", "quantity": true}',
    "quantity-null": b'{"user_id": "ann", "quantity": null}',
    "quantity-2**63": b'{"user_id": "ann", "quantity": 9223372036854775808}',
    "quantity-1e309": b'{"user_id": "ann", "quantity": 1e309}',
    "quantity-huge": b'{"user_id": "ann", "quantity": ' + b"9" * 4000 + b"}",
    "quantity-nan": b'{"user_id": "ann", "quantity": NaN}',
    "quantity-infinity": b'{"user_id": "ann", "quantity": -Infinity}',
    "quantity-over-any-limit": b'{"user_id": "ann", "quantity": 1000001}',
}


@pytest.mark.parametrize("raw", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_malformed_purchase_body_is_400_invalid_request(shop, raw):
    assert_error(shop.call("POST", PATH, raw=raw, headers=JSON), 400, "invalid_request")


BAD_CONTENT_TYPES = [None, "text/plain", "application/x-www-form-urlencoded",
                     "multipart/form-data; boundary=x", "application/jsonx", ""]


@pytest.mark.parametrize("content_type", BAD_CONTENT_TYPES)
def test_a_body_not_declared_as_json_is_400(shop, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    answer = shop.call("POST", PATH, raw=b'{"user_id": "ann"}', headers=headers)
    assert_error(answer, 400, "invalid_request")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "APPLICATION/JSON", "application/json;charset=UTF-8",
                                          "application/problem+json"])
def test_json_content_types_with_parameters_are_accepted(shop, content_type):
    user = f"ctype-{content_type}"[:64]
    answer = shop.call("POST", PATH, raw=json.dumps({"user_id": user}).encode(),
                       headers={"Content-Type": content_type})
    assert answer.status == 201, answer.body
    assert answer.json["user_id"] == user


@pytest.mark.parametrize("user", ["小明 🛒", "o'brien; DROP TABLE orders; --", "ann\u00e9",
                                  "🛒" * 64, "a\u200db", "<script>alert(1)</script>",
                                  "👨\u200d👩\u200d👧 family", "Zoë"])
def test_unicode_and_hostile_user_ids_are_stored_exactly(shop, user):
    answer = shop.buy(user, SKU)
    assert answer.status == 201, answer.body
    assert answer.json["user_id"] == user
    assert_error(shop.buy(user, SKU), 409, "already_purchased")


@pytest.mark.parametrize("user", [
    pytest.param("\u0085c1-control", id="c1-control"),
    pytest.param("\u200b", id="zero-width-space"),
    pytest.param("\u202eevil", id="bidi-override"),
    pytest.param("\ufeff", id="bom-only"),
    pytest.param("\u2028", id="line-separator"),
    # inside an id: it split log lines and CSV rows (accepted; an HTTP audit)
    pytest.param("a\u2028b", id="line-separator-inside"),
    pytest.param("a\u2029b", id="paragraph-separator-inside"),
    pytest.param("\u00a0", id="nbsp-only"),
    pytest.param("\u200d\u200d", id="joiners-only"),
    pytest.param("\u3164", id="hangul-filler"),
    pytest.param("\u0301\u0301", id="combining-marks-only"),
    pytest.param("bob\ue000", id="private-use"),
    pytest.param("carol\u0378", id="unassigned"),
])
def test_invisible_or_control_user_ids_are_400(shop, user):
    assert_error(shop.buy(user, SKU), 400, "invalid_request")


def test_a_json_body_with_a_utf8_bom_is_accepted(shop):
    answer = shop.call("POST", PATH, raw=b'\xef\xbb\xbf{"user_id": "bom-ann"}', headers=JSON)
    assert answer.status == 201


def test_unknown_fields_are_ignored_and_quantity_defaults_to_one(shop):
    answer = shop.call("POST", PATH, {"user_id": "extra-ann", "price": 0, "sku": "other"})
    assert answer.status == 201
    assert answer.json == {**answer.json, "sku": SKU, "user_id": "extra-ann", "quantity": 1}


def test_the_order_has_exactly_the_documented_fields(shop):
    order = shop.buy("shape-ann", SKU).json
    assert set(order) <= {"order_id", "sku", "user_id", "quantity", "fencing_token",
                          "sale_started_at"}
    assert {"order_id", "sku", "user_id", "quantity", "sale_started_at"} <= set(order)
    assert isinstance(order["order_id"], int) and isinstance(order["quantity"], int)
    # the sale it was written in, as the product shows its sale (README)
    assert order["sale_started_at"] == shop.call("GET", f"/api/products/{SKU}").json[
        "sale_started_at"]


@pytest.mark.parametrize("quantity", [1, 3, 5])
def test_any_quantity_up_to_the_sale_limit_is_sold(shop, quantity):
    before = shop.audit(LIMITED)["remaining"]
    answer = shop.buy(f"limited-{quantity}", LIMITED, quantity)
    assert answer.status == 201 and answer.json["quantity"] == quantity
    assert shop.audit(LIMITED)["remaining"] == before - quantity


def test_a_quantity_above_the_sale_limit_is_400_and_takes_nothing(shop):
    before = shop.audit(LIMITED)["remaining"]
    assert_error(shop.buy("greedy", LIMITED, 6), 400, "invalid_request")
    assert shop.audit(LIMITED)["remaining"] == before
    assert shop.buy("greedy", LIMITED, 5).status == 201  # the 400 reserved nothing


@pytest.mark.parametrize("strategy", ["token", "atomic", "sql"])
def test_a_sale_reset_without_a_limit_sells_any_quantity_the_stock_covers(shop, strategy):
    """The contract's PUT takes stock, strategy and work_ms; its purchase any quantity.
    Only the stock refuses: 409 sold_out, never a 400 for a limit nobody set."""
    sku = "qa-input-3"
    shop.reset(sku, 2, strategy)
    assert_error(shop.buy(f"{strategy}-three", sku, 3), 409, "sold_out")
    answer = shop.buy(f"{strategy}-two", sku, 2)
    assert answer.status == 201 and answer.json["quantity"] == 2, answer.body
    assert_error(shop.buy(f"{strategy}-one", sku, 1), 409, "sold_out")
    audit = shop.audit(sku)
    assert (audit["remaining"], audit["units_sold"], audit["consistent"]) == (0, 2, True)


def test_the_books_balance_after_all_that(shop):
    shop.assert_books_balance(SKU)
    shop.assert_books_balance(LIMITED)
