"""``GET /api/openapi.json`` is a valid OpenAPI 3 document, documents every route and
status of the contract, and the live answers match the schemas it gives for them."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.contract.wire import Answer

SKU, SMALL = "qa-spec-1", "qa-spec-2"

#: the contract's table: path template, method -> the statuses it promises
CONTRACT = {
    ("/healthz", "get"): {200, 503},
    ("/api/products", "get"): {200},
    ("/api/products/{sku}", "get"): {200, 404},
    ("/api/products/{sku}/purchase", "post"): {201, 200, 400, 404, 409, 503},
    ("/api/admin/sales/{sku}", "put"): {200, 401, 400},
    ("/api/sales/{sku}/audit", "get"): {200},
}


@pytest.fixture(scope="module")
def spec(shop) -> dict[str, Any]:
    answer = shop.call("GET", "/api/openapi.json")
    assert answer.status == 200 and answer.content_type.startswith("application/json")
    document: dict[str, Any] = answer.json
    return document


def inline_refs(node: Any, document: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target: Any = document
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            return inline_refs(copy.deepcopy(target), document)
        return {key: inline_refs(value, document) for key, value in node.items()}
    if isinstance(node, list):
        return [inline_refs(item, document) for item in node]
    return node


def check_answer(spec: dict[str, Any], path: str, method: str, answer: Answer) -> None:
    """The status is documented for the operation and the body fits its schema."""
    responses = spec["paths"][path][method]["responses"]
    documented = responses.get(str(answer.status)) or responses.get("default")
    assert documented is not None, f"{method.upper()} {path} -> {answer.status} undocumented"
    schema = documented.get("content", {}).get("application/json", {}).get("schema")
    if schema is not None:
        jsonschema.validate(answer.json, inline_refs(schema, spec),
                            cls=jsonschema.Draft202012Validator)


def test_the_document_is_valid_openapi_3(spec):
    assert spec["openapi"].startswith("3.")
    validate(spec)


@pytest.mark.parametrize("route", sorted(CONTRACT), ids=lambda r: f"{r[1]} {r[0]}")
def test_every_contract_route_and_status_is_documented(spec, route):
    path, method = route
    assert method in spec["paths"].get(path, {}), f"{method} {path} missing"
    documented = {int(status) for status in spec["paths"][path][method]["responses"]}
    assert CONTRACT[route] <= documented


def test_every_documented_operation_exists_on_the_server(shop, spec):
    for path, operations in spec["paths"].items():
        for method in operations:
            if method not in {"get", "post", "put", "delete", "patch"}:
                continue
            answer = shop.call(method.upper(), path.replace("{sku}", SKU), raw=b"{}",
                               headers={"Content-Type": "application/json"})
            assert answer.status not in (404, 405) or \
                answer.json.get("error") == "unknown_sku", (method, path, answer.body)


def test_live_answers_match_their_documented_schemas(shop, spec):
    shop.reset(SMALL, 1, "token")
    token = {"Authorization": f"Bearer {shop.admin_token}"}
    purchase = "/api/products/{sku}/purchase"
    seen = [
        ("/healthz", "get", shop.call("GET", "/healthz")),
        ("/api/products", "get", shop.call("GET", "/api/products")),
        ("/api/products/{sku}", "get", shop.call("GET", f"/api/products/{SMALL}")),
        ("/api/products/{sku}", "get", shop.call("GET", "/api/products/none")),
        (purchase, "post", shop.buy("spec-ann", SMALL, key="spec-ann")),
        (purchase, "post", shop.buy("spec-ann", SMALL, key="spec-ann")),
        (purchase, "post", shop.buy("spec-bob", SMALL)),
        (purchase, "post", shop.buy("spec-ann", SMALL)),
        (purchase, "post", shop.buy("", SMALL)),
        (purchase, "post", shop.buy("spec-ann", "none")),
        ("/api/admin/sales/{sku}", "put", shop.call("PUT", f"/api/admin/sales/{SKU}",
                                                    {"stock": 3, "strategy": "sql"},
                                                    headers=token)),
        ("/api/admin/sales/{sku}", "put", shop.call("PUT", f"/api/admin/sales/{SKU}", {})),
        ("/api/admin/sales/{sku}", "put", shop.call("PUT", f"/api/admin/sales/{SKU}",
                                                    {"stock": -3}, headers=token)),
        ("/api/sales/{sku}/audit", "get", shop.call("GET", f"/api/sales/{SMALL}/audit")),
        ("/api/sales/{sku}/audit", "get", shop.call("GET", "/api/sales/none/audit")),
        ("/api/admin/sales/{sku}/buyers", "get",
         shop.call("GET", f"/api/admin/sales/{SMALL}/buyers", headers=token)),
        ("/api/admin/sales/{sku}/buyers", "get",
         shop.call("GET", f"/api/admin/sales/{SMALL}/buyers")),
    ]
    assert [answer.status for _, _, answer in seen] == [
        200, 200, 200, 404, 201, 200, 409, 409, 400, 404, 200, 401, 400, 200, 404, 200, 401]
    assert seen[-2][2].json == {"buyers": ["spec-ann"], "next": None}
    for path, method, answer in seen:
        check_answer(spec, path, method, answer)


def test_a_product_and_an_audit_carry_every_field_the_contract_names(shop):
    product = shop.call("GET", f"/api/products/{SKU}").json
    assert {"sku", "name", "price", "stock", "sold", "strategy"} <= set(product)
    audit = shop.audit(SKU)
    assert {"initial_stock", "remaining", "orders", "units_sold", "oversold",
            "duplicate_buyers", "consistent"} <= set(audit)
    listing = shop.call("GET", "/api/products").json
    assert isinstance(listing, list) and SKU in {item["sku"] for item in listing}


def test_every_field_the_server_sends_is_in_its_schema(shop, spec):
    """A field the server sends and the document leaves out is one a generated client
    drops (the audit's ``sku``, ``strategy`` and ``database_remaining``, the product's
    ``description`` and ``work_ms`` were: a contract audit); an audit's fields are all
    required, as the server always sends them."""
    shop.reset(SMALL, 2, "token")
    order = shop.buy("spec-fields", SMALL)
    assert order.status == 201, order.body
    schemas = {name: inline_refs(schema, spec) for name, schema in (
        ("product", spec["paths"]["/api/products/{sku}"]["get"]["responses"]["200"]),
        ("order", spec["paths"]["/api/products/{sku}/purchase"]["post"]["responses"]
         ["201"]),
        ("audit", spec["paths"]["/api/sales/{sku}/audit"]["get"]["responses"]["200"]))}
    answers = {"product": shop.call("GET", f"/api/products/{SMALL}").json,
               "order": order.json, "audit": shop.audit(SMALL)}
    for name, answer in answers.items():
        schema = schemas[name]["content"]["application/json"]["schema"]
        undocumented = set(answer) - set(schema["properties"])
        assert not undocumented, (name, undocumented)
    audit = schemas["audit"]["content"]["application/json"]["schema"]
    assert set(audit["required"]) == set(answers["audit"])


#: answers the served app really gives (each seen in this package's other modules)
#: that a client generated from the document must expect
SEEN_ELSEWHERE = [
    ("/api/products/{sku}/purchase", "post", 413),  # test_errors_are_json: a huge body
    ("/api/products/{sku}/purchase", "post", 408),  # webapp/test_hostile_clients
    ("/api/admin/sales/{sku}", "put", 408),
    ("/api/admin/sales/{sku}", "put", 413),
    ("/api/sales/{sku}/audit", "get", 503),  # test_outages: Redis down
    ("/api/admin/sales/{sku}", "put", 503),  # a buyer holds the stock lock too long
    # the database down (a contract audit: Redis down, they read the database instead)
    ("/api/products", "get", 503),
    ("/api/products/{sku}", "get", 503),
]


def test_every_status_the_app_really_sends_is_documented(spec):
    missing = [(method, path, status) for path, method, status in SEEN_ELSEWHERE
               if str(status) not in spec["paths"][path][method]["responses"]]
    if "/api/strategies" not in spec["paths"]:
        missing.append(("get", "/api/strategies", "the route"))
    assert not missing, missing


@pytest.mark.parametrize(("path", "method", "field"), [
    ("/api/products/{sku}/purchase", "post", "quantity"),
    ("/api/admin/sales/{sku}", "put", "stock"),
    ("/api/admin/sales/{sku}", "put", "work_ms"),
    ("/api/admin/sales/{sku}", "put", "limit"),
])
def test_every_bound_the_server_keeps_is_in_the_document(shop, spec, path, method, field):
    """The document gave quantity, stock and work_ms no maximum while the server refused
    1,000,001 units and 10,001 ms: a client generated from it sent what the shop
    refuses (an HTTP audit). The documented maximum is accepted, one more is not."""
    schema = spec["paths"][path][method]["requestBody"]["content"]["application/json"]
    bound = schema["schema"]["properties"][field].get("maximum")
    assert isinstance(bound, int), f"{field} has no documented maximum"
    shop.reset(SKU, 5, "token")
    token = {"Authorization": f"Bearer {shop.admin_token}"}

    def send(value: float) -> Answer:
        if method == "post":
            return shop.call("POST", path.replace("{sku}", SKU),
                             {"user_id": f"bound-{value}", field: value})
        return shop.call("PUT", path.replace("{sku}", SKU),
                         {"stock": 5, "strategy": "token", field: value}, headers=token)

    over = send(bound + 1)
    assert over.status == 400 and field in over.json["detail"], over.body
    at = send(bound)
    assert at.status != 400 or field not in at.json["detail"], at.body
    # type: integer takes 1.0, the server does not: the description says so (an API
    # fuzz audit: a client held to the document sent 1.0 and heard 400)
    assert "integer literal (1, not 1.0" in schema["schema"]["properties"][field].get(
        "description", ""), field
    fraction = send(1.0)
    assert fraction.status == 400 and f"{field} must be an integer" in \
        fraction.json["detail"], fraction.body


def test_the_strategies_the_document_offers_are_the_ones_a_reset_accepts(shop, spec):
    # those this shop has the servers for: it offered every strategy, and a reset to
    # one without them (zookeeper, with no ZOOKEEPER_HOSTS) is 400
    schema = spec["paths"]["/api/admin/sales/{sku}"]["put"]["requestBody"]
    offered = schema["content"]["application/json"]["schema"]["properties"]["strategy"]
    usable = shop.call("GET", "/api/strategies?usable=true")
    assert usable.status == 200, usable.body
    assert sorted(offered.get("enum", [])) == sorted(usable.json)
