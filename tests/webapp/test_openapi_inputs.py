"""What ``GET /api/openapi.json`` says a request may hold is what the server accepts:
a client generated from it, or a fuzzer fed by it, sent ids, strategies and quantities
the shop refused with 400 (an API audit). A schema cannot say every rule (the Unicode
categories of ``validation.is_clean_text``): what it cannot, its description says."""

from __future__ import annotations

import contextlib
import random
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from tests.webapp.conftest import SKU, auth, buy, reset
from webapp import validation
from webapp.openapi import document
from webapp.paths import names
from webapp.problems import InvalidRequest


def request_schema(spec: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    body = spec["paths"][path][method]["requestBody"]
    schema: dict[str, Any] = body["content"]["application/json"]["schema"]
    return schema


def purchase_schema(spec: dict[str, Any]) -> dict[str, Any]:
    return request_schema(spec, "/api/products/{sku}/purchase", "post")


def strategy_schema(spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = request_schema(spec, "/api/admin/sales/{sku}", "put")
    return found["properties"]["strategy"]


def fits(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


#: refused by the server, and by a pattern (ECMA-262 and Python's ``re`` alike): blank,
#: whitespace only (NBSP and the ideographic space too), a C0 or C1 control
REFUSED_BY_THE_PATTERN = [" ", "   ", "\u00a0", "\u3000 ", "\t", "ann\x00", "ann\n",
                          "\x85", "bob\x9f", "\u2028a", "a\u2029b"]  # line breaks too
#: refused by the server for what only the description can say: invisible (zero-width
#: space, BOM, a lone combining mark, a blank letter) or private-use characters
REFUSED_AS_DESCRIBED = ["\u200b", "ann\ufeff", "\u0301", "\u3164", "\ue000"]
ACCEPTED = ["ann", "ann smith", " ann", "é", "🔑", "a\u200db", "ک\u200cک",
            "مرحبا", "x" * 64]


def test_user_id_refuses_blank_whitespace_and_control_ids_the_server_refuses(client):
    user_id = purchase_schema(client.get("/api/openapi.json").get_json())
    user_id = user_id["properties"]["user_id"]
    for value in REFUSED_BY_THE_PATTERN:
        assert buy(client, value).status_code == 400, repr(value)
        assert not fits(user_id, value), repr(value)
    for value in REFUSED_AS_DESCRIBED:
        assert buy(client, value).status_code == 400, repr(value)
    assert "printable" in user_id["description"]
    assert "visible" in user_id["description"]
    reset(client, stock=len(ACCEPTED), strategy="atomic")
    for value in ACCEPTED:
        assert fits(user_id, value), repr(value)
        assert buy(client, value).status_code == 201, repr(value)


def test_the_patterns_never_refuse_an_id_or_a_key_the_server_accepts():
    # implied by validation's rules, never stricter: random texts of letters, marks,
    # spaces, commas, controls, format and private-use characters
    spec = document({"REDLOCK_URLS": [], "ZOOKEEPER_HOSTS": None})
    user_id = purchase_schema(spec)["properties"]["user_id"]
    parameters = spec["paths"]["/api/products/{sku}/purchase"]["post"]["parameters"]
    key = next(p for p in parameters if p["name"] == "Idempotency-Key")["schema"]
    alphabet = ("ab é漢🔑,\u0301\u200b\u200c\u200d\u2028\u3000\u00a0\t\n\x00\x85\x9f"
                "\ufeff\ue000\u3164\u2800\u202e")
    draw = random.Random(20_240_917)
    accepted = {"user_id": 0, "key": 0}
    for _ in range(20_000):
        value = "".join(draw.choice(alphabet) for _ in range(draw.randint(1, 6)))
        with contextlib.suppress(InvalidRequest):  # refused: the schema may say either
            validation.text({"user_id": value}, "user_id", 64)
            assert fits(user_id, value), repr(value)
            accepted["user_id"] += 1
        as_sent = SimpleNamespace(environ={"HTTP_IDEMPOTENCY_KEY":
                                           value.encode().decode("latin-1")})
        with contextlib.suppress(InvalidRequest):
            validation.idempotency_key(as_sent)  # type: ignore[arg-type]
            assert fits(key, value), repr(value)
            accepted["key"] += 1
    # the draws reached the patterns' edges, not only refusals
    assert min(accepted.values()) > 1_000, accepted


def test_an_idempotency_key_of_spaces_is_refused_by_the_document_and_the_server(client):
    spec = client.get("/api/openapi.json").get_json()
    parameters = spec["paths"]["/api/products/{sku}/purchase"]["post"]["parameters"]
    key = next(p for p in parameters if p["name"] == "Idempotency-Key")["schema"]
    for value in ("   ", "a,b", "ann\x00"):
        assert not fits(key, value), repr(value)
    assert fits(key, "order 42 ✓")
    answer = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"},
                         headers={"Idempotency-Key": "   "})
    assert answer.status_code == 400


def test_the_strategies_offered_are_those_a_reset_here_accepts(client):
    strategy = strategy_schema(client.get("/api/openapi.json").get_json())
    assert strategy["enum"] == client.get("/api/strategies?usable=true").get_json()
    assert "redlock" not in strategy["enum"] and "zookeeper" not in strategy["enum"]
    for name in names():
        answer = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                            json={"stock": 3, "strategy": name})
        assert answer.status_code == (200 if name in strategy["enum"] else 400), \
            (name, answer.get_json())


@pytest.mark.parametrize("config, offered", [
    ({"REDLOCK_URLS": ["redis://a"], "ZOOKEEPER_HOSTS": None}, {"redlock"}),
    ({"REDLOCK_URLS": [], "ZOOKEEPER_HOSTS": "zk:2181"}, {"zookeeper"}),
    ({"REDLOCK_URLS": ["redis://a"], "ZOOKEEPER_HOSTS": "zk:2181"},
     {"redlock", "zookeeper"}),
])
def test_a_strategy_is_offered_once_its_servers_are_configured(config, offered):
    strategy = strategy_schema(document(config))
    assert {"redlock", "zookeeper"} & set(strategy["enum"]) == offered
    assert set(strategy["enum"]) <= set(names())
    assert "unusable=true" in strategy["description"]


def test_quantity_names_the_sales_own_limit(client):
    spec = client.get("/api/openapi.json").get_json()
    quantity = purchase_schema(spec)["properties"]["quantity"]
    assert "limit" in quantity["description"]
    product = spec["paths"]["/api/products/{sku}"]["get"]["responses"]["200"]
    product = product["content"]["application/json"]["schema"]
    assert product["properties"]["limit"]["type"] == "integer"
    # the limit the document points to is the one a purchase is refused by
    reset(client, stock=5, strategy="token", limit=2)
    assert client.get(f"/api/products/{SKU}").get_json()["limit"] == 2
    answer = buy(client, "ann", quantity=3)
    assert answer.status_code == 400 and "quantity" in answer.get_json()["detail"]
    assert buy(client, "ann", quantity=2).status_code == 201


def test_the_noops_body_is_documented_as_any_body_as_the_server_reads_it(client):
    """It said ``type: object`` while the server reads any body and ignores it: a client
    or fuzzer held to the document never sent what the shop accepts (an API fuzz audit)."""
    body = client.get("/api/openapi.json").get_json()["paths"]["/api/noop"]["post"]
    content = body["requestBody"]["content"]
    assert set(content) == {"application/json", "*/*"}
    for raw, content_type, value in ((b"[1]", "application/json", [1]),
                                     (b'"x"', "application/json", "x"),
                                     (b"null", "application/json", None),
                                     (b"not json", "text/plain", "not json")):
        assert fits(content["application/json"]["schema"], value), raw
        assert fits(content["*/*"]["schema"], value), raw
        answer = client.post("/api/noop", data=raw, headers={"Content-Type": content_type})
        assert answer.status_code == 200, raw


def test_after_is_held_to_the_rules_the_server_holds_it_to(client):
    """``after`` said only ``maxLength: 64``, and the server refused control characters
    in it with 400 (an API fuzz audit): it declares them now, and not user_id's
    visible character: a blank ``after`` is the first page."""
    spec = client.get("/api/openapi.json").get_json()
    parameters = spec["paths"]["/api/admin/sales/{sku}/buyers"]["get"]["parameters"]
    after = next(p for p in parameters if p["name"] == "after")["schema"]
    for value in ("", "   "):
        assert fits(after, value), repr(value)
        answer = client.get(f"/api/admin/sales/{SKU}/buyers", query_string={"after": value},
                            headers=auth())
        assert answer.status_code == 200, repr(value)
    for value in ("ann\x00", "ann\n", "\x85", "bob\x9f", "a\u2029b"):
        assert not fits(after, value), repr(value)
        answer = client.get(f"/api/admin/sales/{SKU}/buyers", query_string={"after": value},
                            headers=auth())
        assert answer.status_code == 400, repr(value)
    for value in ACCEPTED:
        assert fits(after, value), repr(value)
        answer = client.get(f"/api/admin/sales/{SKU}/buyers", query_string={"after": value},
                            headers=auth())
        assert answer.status_code == 200, repr(value)
