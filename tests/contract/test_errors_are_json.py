"""Every error the served app sends is ``{"error", "detail"}`` JSON, whatever provoked it:
an unknown route, a wrong method, a malformed HTTP request, a huge or deeply nested body.
No 500, no HTML."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from tests.contract.wire import assert_error, raw_exchange

SKU = "qa-api-1"

ROUTES = {
    "/healthz": {"GET"},
    "/api/products": {"GET"},
    f"/api/products/{SKU}": {"GET"},
    f"/api/products/{SKU}/purchase": {"POST"},
    f"/api/admin/sales/{SKU}": {"PUT"},
    f"/api/admin/sales/{SKU}/buyers": {"GET"},
    f"/api/sales/{SKU}/audit": {"GET"},
    "/api/openapi.json": {"GET"},
}


@pytest.mark.parametrize("path", ["/nope", "/api", "/api/products/", "/api/products/x/y/z",
                                  "/api/sales/qa-api-1", "/%ff%fe", "/api/products/qa-api-1/buy"])
def test_an_unknown_route_is_a_json_404(shop, path):
    assert_error(shop.call("GET", path), 404)


WRONG_METHODS = [(path, method) for path in sorted(ROUTES)
                 for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "TRACE", "BREW")
                 if method not in ROUTES[path]]


@pytest.mark.parametrize("path, method", WRONG_METHODS)
def test_a_wrong_method_is_a_json_405_with_allow(shop, path, method):
    answer = shop.call(method, path)
    assert_error(answer, 405)
    allowed = {m.strip() for m in answer.headers["allow"].split(",")}
    assert ROUTES[path] <= allowed


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_options_names_the_methods_without_a_body_to_type(shop, path):
    # its empty body was typed text/html on every route of a JSON API (an audit)
    answer = shop.call("OPTIONS", path)
    assert answer.status == 200 and answer.body == b"", answer
    assert "content-type" not in answer.headers, answer.headers
    allowed = {m.strip() for m in answer.headers["allow"].split(",")}
    assert ROUTES[path] | {"OPTIONS"} <= allowed


@pytest.mark.parametrize("sku", ["nope", "x" * 65, "x" * 4000, "%00", "a%0Ab", "caf%C3%A9"])
def test_an_unknown_sku_is_unknown_sku_on_every_sku_route(shop, sku):
    assert_error(shop.call("GET", f"/api/products/{sku}"), 404, "unknown_sku")
    assert_error(shop.buy("ann", sku), 404, "unknown_sku")
    assert_error(shop.call("GET", f"/api/sales/{sku}/audit"), 404, "unknown_sku")


def test_a_percent_encoded_slash_in_a_sku_is_a_json_404(shop):
    # the server decodes %2F before routing, so this is a path with one more segment
    assert_error(shop.call("GET", "/api/products/qa%2Fapi-1"), 404)
    assert_error(shop.buy("ann", "qa%2Fapi-1"), 404)


def test_a_query_string_does_not_change_a_purchase(shop):
    shop.reset(SKU, 3)
    answer = shop.call("POST", f"/api/products/{SKU}/purchase?user_id=mallory&quantity=3",
                       {"user_id": "query-ann"})
    assert answer.status == 201 and answer.json["user_id"] == "query-ann"
    assert answer.json["quantity"] == 1


def test_a_deeply_nested_json_body_is_400_not_500(shop):
    deep = b'{"user_id": "deep", "junk": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    answer = shop.call("POST", f"/api/products/{SKU}/purchase", raw=deep,
                       headers={"Content-Type": "application/json"})
    assert_error(answer, 400, "invalid_request")


def test_a_deeply_nested_json_object_is_400_not_500(shop):
    deep = b'{"a":' * 5_000 + b"1" + b"}" * 5_000
    answer = shop.call("POST", f"/api/products/{SKU}/purchase", raw=deep,
                       headers={"Content-Type": "application/json"})
    assert_error(answer, 400, "invalid_request")


def test_a_huge_body_is_refused_with_413(shop):
    huge = b'{"user_id": "huge", "pad": "' + b"x" * (8 * 1024 * 1024) + b'"}'
    answer = shop.call("POST", f"/api/products/{SKU}/purchase", raw=huge,
                       headers={"Content-Type": "application/json"})
    assert_error(answer, 413)


def test_a_duplicate_content_type_header_is_a_json_400(shop):
    body = b'{"user_id": "twice"}'
    answer = raw_exchange(shop.url, (
        f"POST /api/products/{SKU}/purchase HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
    assert_error(answer, 400)


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
    (b"POST /api/products/qa-api-1/purchase HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
     400),
    (b"GET /api/products/" + b"x" * 8_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"POST /api/products/qa-api-1/purchase HTTP/1.1\r\nHost: x\r\nIdempotency-Key: "
     + b"k" * 10_000 + b"\r\n\r\n", 431),
    (b"POST /api/products/qa-api-1/purchase HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST /api/products/qa-api-1/purchase HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: br, chunked\r\n\r\n", 501),  # named "Bad Request": an audit
], ids=["garbage", "http-9.9", "header-without-colon", "negative-content-length",
        "8k-sku-in-the-url", "10k-idempotency-key", "content-length-and-chunked",
        "unsupported-transfer-coding"])
def test_a_malformed_http_request_is_answered_with_json(shop, request_bytes, status):
    answer = raw_exchange(shop.url, request_bytes)
    body = assert_error(answer, status)
    if status == 501:
        assert body["error"] == "not_implemented", body


def test_options_lists_the_allowed_methods(shop):
    answer = shop.call("OPTIONS", f"/api/products/{SKU}/purchase")
    assert answer.status == 200
    assert "POST" in answer.headers["allow"]


def test_the_storefront_is_html_and_the_api_is_json(shop):
    assert shop.call("GET", "/").content_type.startswith("text/html")
    for path in ("/healthz", "/api/products", f"/api/products/{SKU}", f"/api/sales/{SKU}/audit"):
        assert shop.call("GET", path).content_type.startswith("application/json"), path


def test_a_kept_alive_connection_survives_a_413_and_a_400(shop):
    # the refused body must be drained, or the next request on the connection would be
    # parsed from the middle of it
    shop.reset(SKU, 5)
    parts = urlsplit(shop.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    answers = []
    try:
        for body in (b'{"user_id": "' + b"x" * 200_000 + b'"}', b'{"user_id": "alive-1"}',
                     b"[" * 5_000, b'{"user_id": "alive-2"}'):
            connection.request("POST", f"/api/products/{SKU}/purchase", body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())))
    finally:
        connection.close()
    assert [status for status, _ in answers] == [413, 201, 400, 201], answers
    assert answers[3][1]["user_id"] == "alive-2"


@pytest.mark.parametrize("framing", ["chunked", "http-1.0"])
def test_a_chunked_or_http_1_0_purchase_is_sold_like_any_other(shop, framing):
    shop.reset(SKU, 5)
    body = f'{{"user_id": "framed-{framing}"}}'.encode()
    if framing == "chunked":
        head = "HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close"
        payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        head, payload = f"HTTP/1.0\r\nContent-Length: {len(body)}", body
    answer = raw_exchange(shop.url, f"POST /api/products/{SKU}/purchase {head}\r\n"
                          "Content-Type: application/json\r\n\r\n".encode() + payload)
    assert answer.status == 201, answer.body
    assert json.loads(answer.body)["user_id"] == f"framed-{framing}"


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "*/*", "text/plain;q=1"])
def test_errors_are_json_whatever_the_client_accepts(shop, accept):
    assert_error(shop.call("GET", "/nope", headers={"Accept": accept}), 404)
    answer = shop.call("POST", f"/api/products/{SKU}/purchase", {"user_id": ""},
                       headers={"Accept": accept})
    assert_error(answer, 400, "invalid_request")


def chunked(path: str, payload: bytes, method: str = "POST", headers: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\nConnection: close\r\n{headers}\r\n").encode() \
        + payload


@pytest.mark.parametrize("payload", [
    b"ZZ\r\n{}\r\n0\r\n\r\n",
    b'10\r\n{"user_id":"c78"}XX0\r\n\r\n',
    b'11\r\n{"user_id":"c79"}\r\n',  # no last chunk: the client's FIN comes instead
], ids=["bad-chunk-size", "chunk-without-its-crlf", "no-last-chunk"])
@pytest.mark.parametrize("route", ["purchase", "reset", "noop"])
def test_a_malformed_chunked_body_is_a_json_400_not_a_500(shop, payload, route):
    """gunicorn's parser raised as the body was read (InvalidChunkSize,
    ChunkMissingTerminator, NoMoreData): 500 internal_error on every body's route."""
    path, headers, method = {
        "purchase": (f"/api/products/{SKU}/purchase", "", "POST"),
        "reset": (f"/api/admin/sales/{SKU}", f"Authorization: Bearer {shop.admin_token}\r\n",
                  "PUT"),
        "noop": ("/api/noop", "", "POST"),
    }[route]
    answer = raw_exchange(shop.url, chunked(path, payload, method, headers))
    assert_error(answer, 400, "invalid_request")


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_transfer_coding_besides_chunked_is_a_400_naming_it_not_a_sale(shop, coding):
    """gunicorn hands gzip and deflate over undecoded: plain JSON sent as "deflate,
    chunked" bought (201), a real gzip body was "not valid JSON" (an API fuzz audit)."""
    import gzip

    shop.reset(SKU, 5)
    body = b'{"user_id": "coded-%s"}' % coding.encode()
    payload = gzip.compress(body) if coding == "gzip" else body
    answer = raw_exchange(shop.url, (
        f"POST /api/products/{SKU}/purchase HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\n"
        f"Transfer-Encoding: {coding}, chunked\r\nConnection: close\r\n\r\n").encode()
        + chunks_of(payload))
    detail = assert_error(answer, 400, "invalid_request")["detail"]
    assert f"Transfer-Encoding {coding!r}" in detail, detail
    assert shop.audit(SKU)["orders"] == 0


def chunks_of(body: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                    for part in (body[i:i + 8_192] for i in range(0, len(body), 8_192))) \
        + b"0\r\n\r\n"


def test_a_chunked_body_past_the_limit_is_413_not_cut_and_sold(shop):
    """No Content-Length to refuse it by: the stream stopped at 64 KiB without a word,
    and the first 64 KiB of a 100 KB body bought (201)."""
    shop.reset(SKU, 5)
    body = b'{"user_id": "padded"}' + b" " * 100_000
    answer = raw_exchange(shop.url, chunked(f"/api/products/{SKU}/purchase", chunks_of(body)))
    assert_error(answer, 413)
    assert shop.audit(SKU)["orders"] == 0


@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-limit", "one-byte-past"])
def test_a_chunked_body_is_held_to_the_same_limit_as_a_declared_one(shop, extra):
    """A chunked body of exactly 64 KiB was 413 where the same body with its
    Content-Length bought: the check was "reached the limit" (an HTTP audit)."""
    shop.reset(SKU, 5)
    limit = 64 * 1024
    head = b'{"user_id": "exactly-%d"}' % extra
    body = head + b" " * (limit + extra - len(head))
    answer = raw_exchange(shop.url, chunked(f"/api/products/{SKU}/purchase", chunks_of(body)))
    if extra:
        assert_error(answer, 413)
    else:
        assert answer.status == 201, (answer.status, answer.body[:300])
