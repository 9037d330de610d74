"""No input produces a 500: odd bodies, headers and skus are 400 (or 404), always JSON."""

from __future__ import annotations

import pytest

from lockcore.embedded import free_port
from tests.webapp.conftest import SKU, auth, backends, make_app

ODD_BODIES = [
    {}, {"user_id": ""}, {"user_id": "   "}, {"user_id": None}, {"user_id": 42},
    {"user_id": ["a"]}, {"user_id": {"a": 1}}, {"user_id": "x" * 65},
    {"user_id": "nul\u0000byte"}, {"user_id": "lone \ud800 surrogate"},
    {"user_id": "\u0085c1"}, {"user_id": "\u200b"}, {"user_id": "\u202eevil"},
    {"user_id": "\ufeff"}, {"user_id": "\u2028"}, {"user_id": "\u00a0"},
    {"user_id": "private\ue000use"}, {"user_id": "unassigned\u0378"},
    {"user_id": "ann", "quantity": 0}, {"user_id": "ann", "quantity": -1},
    {"user_id": "ann", "quantity": 1.0}, {"user_id": "ann", "quantity": 1.5},
    {"user_id": "ann", "quantity": "1"}, {"user_id": "ann", "quantity": True},
    {"user_id": "ann", "quantity": None}, {"user_id": "ann", "quantity": [1]},
    {"user_id": "ann", "quantity": 10**400}, {"user_id": "ann", "quantity": 10**6 + 1},
    {"user_id": "ann", "quantity": float("inf")},
]


@pytest.mark.parametrize("body", ODD_BODIES, ids=range(len(ODD_BODIES)))
def test_an_odd_purchase_body_is_400_invalid_request(client, body):
    response = client.post(f"/api/products/{SKU}/purchase", json=body)
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.get_json()["error"] == "invalid_request"


@pytest.mark.parametrize("raw, content_type", [
    (b"{not json", "application/json"), (b"[1, 2]", "application/json"),
    (b'"ann"', "application/json"), (b"null", "application/json"),
    (b'{"user_id": "ann"}', "text/plain"), (b"user_id=ann", "application/x-www-form-urlencoded"),
    (b"\xff\xfe", "application/json"), (b"", "application/json"),
    (b'{"user_id": "ann", "quantity": NaN}', "application/json"),
    (b"[" * 50_000, "application/json"), (b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
                                          "application/json"),
])
def test_a_body_that_is_not_a_json_object_is_400(client, raw, content_type):
    response = client.post(f"/api/products/{SKU}/purchase", data=raw,
                           headers={"Content-Type": content_type})
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_request"


@pytest.mark.parametrize("raw, detail", [
    (b"{not json", "not valid JSON"), (b'{"user_id": "ann"} trailing', "not valid JSON"),
    (b'{"user_id": "ann"}{"user_id": "bob"}', "not valid JSON"), (b"", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"), (b"null", "must be a JSON object"),
    # these named the wrong problem, or none: the last "user_id" silently won
    (b'{"user_id": "ann", "user_id": "bob"}', "names 'user_id' twice"),
    (b'{"user_id": "ann", "quantity": ' + b"9" * 5000 + b"}", "more digits than accepted"),
])
def test_the_error_says_whether_the_body_is_not_json_or_not_an_object(client, raw, detail):
    response = client.post(f"/api/products/{SKU}/purchase", data=raw,
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert detail in response.get_json()["detail"]


def test_a_compressed_body_is_400_naming_the_encoding(client):
    import gzip

    response = client.post(f"/api/products/{SKU}/purchase",
                           data=gzip.compress(b'{"user_id": "ann"}'),
                           headers={"Content-Type": "application/json",
                                    "Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert "Content-Encoding 'gzip'" in response.get_json()["detail"]


@pytest.mark.parametrize("header, value", [
    ("Content-Encoding", "x" * 8000),
    ("Transfer-Encoding", "y" * 8000 + ", chunked"),
    ("duplicate key", "k" * 32_000),
])
def test_an_error_quotes_at_most_64_characters_of_what_the_client_sent(client, header, value):
    """A 32,000-character key named twice came back whole in a 32 KB 400, and an
    8,000-character Content-Encoding too (a text audit): the detail quotes 64 and "…"."""
    import json

    data, headers, environ = b'{"user_id": "ann"}', {"Content-Type": "application/json"}, {}
    if header == "duplicate key":
        data = json.dumps({"user_id": "ann"}).encode()[:-1] + \
            f', "{value}": 1, "{value}": 2}}'.encode()
    elif header == "Content-Encoding":
        headers[header] = value
    else:
        environ = {"HTTP_TRANSFER_ENCODING": value, "wsgi.input_terminated": True}
    response = client.post(f"/api/products/{SKU}/purchase", data=data, headers=headers,
                           environ_overrides=environ)
    assert response.status_code == 400
    detail = response.get_json()["detail"]
    assert repr(value[:64] + "…") in detail
    assert len(detail) < 200


@pytest.mark.parametrize("codings, named", [("gzip, chunked", "gzip"),
                                            ("deflate, chunked", "deflate"),
                                            ("identity, Compress ,chunked", "compress")])
@pytest.mark.parametrize("route", ["purchase", "reset"])
def test_a_transfer_coding_besides_chunked_is_400_naming_it(client, codings, named, route):
    """gunicorn undoes the chunking and hands gzip, deflate and compress over undecoded:
    plain bytes sent as "deflate, chunked" bought (201), and a real gzip body was "not
    valid JSON" (an API fuzz audit). Neither writes anything now."""
    import gzip

    body = {"purchase": b'{"user_id": "ann"}',
            "reset": b'{"stock": 3, "strategy": "atomic"}'}[route]
    send = {"purchase": client.post, "reset": client.put}[route]
    path = {"purchase": f"/api/products/{SKU}/purchase",
            "reset": f"/api/admin/sales/{SKU}"}[route]
    response = send(path, data=gzip.compress(body) if named == "gzip" else body,
                    headers={"Content-Type": "application/json", **auth()},
                    environ_overrides={"HTTP_TRANSFER_ENCODING": codings,
                                       "wsgi.input_terminated": True})  # as gunicorn's
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"] == "invalid_request"
    assert f"Transfer-Encoding {named!r}" in response.get_json()["detail"]
    product = client.get(f"/api/products/{SKU}").get_json()
    assert (product["stock"], product["strategy"]) == (10, "token")
    assert client.get(f"/api/sales/{SKU}/audit").get_json()["orders"] == 0


@pytest.mark.parametrize("codings", ["chunked", "identity, chunked"])
def test_a_chunked_body_is_bought_as_gunicorn_hands_it_over(client, codings):
    response = client.post(f"/api/products/{SKU}/purchase", data=b'{"user_id": "ann"}',
                           headers={"Content-Type": "application/json"},
                           environ_overrides={"HTTP_TRANSFER_ENCODING": codings,
                                              "wsgi.input_terminated": True})
    assert response.status_code == 201, response.get_json()


@pytest.mark.parametrize("sku", ["x" * 5000, "%00", "caf%C3%A9", "%ED%A0%80", "a%0Ab",
                                 "' OR 1=1 --"])
def test_an_odd_sku_is_a_json_404(client, sku):
    for response in (client.get(f"/api/products/{sku}"),
                     client.post(f"/api/products/{sku}/purchase", json={"user_id": "ann"}),
                     client.get(f"/api/sales/{sku}/audit")):
        assert response.status_code == 404
        assert response.get_json()["error"] == "unknown_sku"


@pytest.mark.parametrize("key", ["", "   ", "k" * 129, "tab\there"])
def test_an_odd_idempotency_key_is_400(client, key):
    response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"},
                           headers={"Idempotency-Key": key})
    assert response.status_code == 400


def test_unicode_user_names_are_fine(client):
    for name in ("小明 🛒", "👨\u200d👩\u200d👧", "می\u200cخواهم"):  # joiners are needed
        response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": name})
        assert response.status_code == 201
        assert response.get_json()["user_id"] == name


@pytest.mark.parametrize("name", ["\u0301", "\u200d", " \u0301 ", "\u3164"])
def test_a_name_that_draws_nothing_is_400_saying_so(client, name):
    # its characters are allowed in a name ("cafe\u0301"): "not allowed" misled (an
    # API audit); the detail says what is missing
    response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": name})
    assert response.status_code == 400
    assert "must have a visible character" in response.get_json()["detail"]
    allowed = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "cafe\u0301"})
    assert allowed.status_code == 201


def test_a_utf8_idempotency_key_is_replayed(client):
    headers = {"Idempotency-Key": "ключ-🛒".encode().decode("latin-1")}  # as clients send
    first = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"},
                        headers=headers)
    again = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"},
                        headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)


@pytest.mark.parametrize("body", [
    {"stock": -1, "strategy": "token"}, {"stock": 10**12, "strategy": "token"},
    {"stock": "5", "strategy": "token"}, {"stock": 5}, {"stock": 5, "strategy": None},
    {"stock": 5, "strategy": "token", "work_ms": -5}, {"stock": 5, "strategy": "token",
                                                       "work_ms": 1.5},
    {"stock": 5, "strategy": "token", "limit": 0}, {"stock": True, "strategy": "token"},
])
def test_an_odd_reset_body_is_400(client, body):
    response = client.put(f"/api/admin/sales/{SKU}", json=body, headers=auth())
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_request"


def test_a_purchase_with_redis_down_is_503_busy_and_healthz_names_redis(app, database_url):
    # ``app`` seeded the database; this second app sees it with no Redis behind it
    app = make_app(database_url, f"redis://127.0.0.1:{free_port()}/0")
    try:
        check_redis_down(app.test_client())
    finally:
        backends(app).close()


def check_redis_down(client):
    health = client.get("/healthz")
    assert health.status_code == 503 and health.headers["Retry-After"] == "1"
    assert health.get_json()["redis"] != "ok" and health.get_json()["database"] == "ok"
    response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"})
    assert response.status_code == 503
    assert response.get_json()["error"] == "busy"
    assert "Retry-After" in response.headers
    assert client.get(f"/api/products/{SKU}").status_code == 200  # the database's count


def test_a_huge_body_is_a_json_413(client):
    response = client.post(f"/api/products/{SKU}/purchase",
                           json={"user_id": "ann", "padding": "x" * 200_000})
    assert response.status_code == 413
    assert set(response.get_json()) == {"error", "detail"}
    # the limit named, as for a chunked body: werkzeug's "The data value transmitted
    # exceeds the capacity limit." (an API audit)
    assert response.get_json()["detail"] == "the body is longer than the 65536 bytes accepted"


@pytest.mark.parametrize("user_id", ["   ", "\u3000", "\u00a0"])
def test_a_blank_user_id_is_called_blank_not_empty(client, user_id):
    response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": user_id})
    assert response.status_code == 400
    assert response.get_json()["detail"] == "user_id must not be blank (spaces only)"
    response = client.post(f"/api/products/{SKU}/purchase", json={"user_id": ""})
    assert response.get_json()["detail"] == "user_id must be a non-empty string"


def test_with_the_database_down_healthz_names_it_and_the_api_answers_503(redis_url, redis_client):
    app = make_app(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing", redis_url)
    try:
        client = app.test_client()
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.get_json()["database"] != "ok" and health.get_json()["redis"] == "ok"
        for response in (client.get("/api/products"),
                         client.post(f"/api/products/{SKU}/purchase", json={"user_id": "a"})):
            assert response.status_code == 503
            assert response.get_json()["error"] == "busy"
    finally:
        backends(app).close()


@pytest.mark.parametrize("sku", [".", "..", "..."])
def test_a_sku_of_dots_only_can_be_neither_created_nor_reached(client, app, sku):
    """Skus ``.`` and ``..`` passed every check and their products were made and listed,
    yet no browser could buy them: it resolves ``/api/products/../purchase`` to
    ``/api/purchase`` (a browser audit). Refused where skus are checked and made."""
    from webapp import sales, validation

    assert not validation.plausible_sku(sku)
    sent = sku.replace(".", "%2E")  # as sent: a raw client keeps the dots as they are
    for response in (client.get(f"/api/products/{sent}"),
                     client.post(f"/api/products/{sent}/purchase", json={"user_id": "ann"}),
                     client.get(f"/api/sales/{sent}/audit"),
                     client.put(f"/api/admin/sales/{sent}", headers=auth(),
                                json={"stock": 3, "strategy": "token"})):
        assert response.status_code == 404, response.get_json()
        assert response.get_json()["error"] == "unknown_sku"
    with pytest.raises(ValueError, match="not only dots"):
        sales.create_product(backends(app).sessions, sku, "Dots", 100, stock=3,
                             strategy="atomic")
    assert sku not in {product["sku"] for product in client.get("/api/products").get_json()}


@pytest.mark.parametrize("sku", [".hidden", "v1.2", "a..b", "sku."])
def test_a_sku_with_dots_and_more_is_still_made_and_sold(client, app, sku):
    from webapp import sales, validation

    assert validation.plausible_sku(sku)
    assert sales.create_product(backends(app).sessions, sku, "Dotted", 100, stock=3,
                                strategy="atomic")
    assert client.post(f"/api/products/{sku}/purchase", json={"user_id": "ann"}).status_code == 201
