"""The OpenAPI 3.1 document of the JSON API (``GET /api/openapi.json``), built by hand:
the API is small, and a generator would be a dependency for one page.

It describes this server: a reset's ``strategy`` lists the strategies it has the
servers for. What a schema cannot say (the Unicode rules of ``validation.text``, a
sale's own per-buyer limit) its description does: a client generated from the document
sent ids, strategies and quantities the shop refused with 400 (an API audit)."""

from __future__ import annotations

from typing import Any

from .sales import NO_LIMIT

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: tuple[int, str]) -> dict[str, Any]:
    return {str(status): _json(_ERROR, text) for status, text in codes}


#: ``_visible``'s first half: what ``validation.is_clean_text`` refuses of the controls
_NO_CONTROLS = r"^(?![\s\S]*[\x00-\x1f\x7f-\x9f\u2028\u2029])"


def _visible(excluded: str = "") -> str:
    r"""A JSON Schema ``pattern`` that the server's rules imply (``validation.text``'s,
    ``idempotency_key``'s), so it refuses no text the server accepts: no C0 or C1
    control anywhere, nor a line or paragraph separator (nor a character of
    ``excluded``), and one character at least that is not whitespace (NBSP and U+3000
    are). The rest of the rules are Unicode categories (format characters such as the
    zero-width space, private-use, unassigned, a lone combining mark): the description
    says them.

    ECMA-262 (JSON Schema's dialect) and Python's ``re`` (the ``jsonschema`` package's)
    read it alike: a lookahead, and no ``$``, which in Python lets a final newline
    through (``^[^\x00-\x1f]*$`` matched ``"ann\n"``). Either's ``\s`` is separators
    and controls only (categories Z and C), and an accepted id has a character of
    neither, so ``\S`` finds it in both."""
    return rf"^(?![\s\S]*[{excluded}\x00-\x1f\x7f-\x9f\u2028\u2029])[\s\S]*\S"


#: ``validation.is_clean_text``, then ``has_something_to_see`` (ids only: a key is
#: refused only when blank)
_PRINTABLE = ("printable: no control, format (zero-width, bidi; the zero-width "
              "(non-)joiners excepted), surrogate, private-use or unassigned character, "
              "nor a line or paragraph separator (U+2028, U+2029)")
_VISIBLE = "and one visible character at least (not only spaces, marks or blank letters)"

#: what ``type: integer`` cannot say: JSON Schema takes 1.0 for an integer, and
#: ``validation.integer`` refuses it (an API fuzz audit: a client held to the document
#: sent 1.0 and heard 400 "must be an integer")
_LITERAL = "written as an integer literal (1, not 1.0, which is 400)"

_SKU = {"name": "sku", "in": "path", "required": True, "schema": {"type": "string"}}
_BUSY = (503, "busy: lock not acquired in time or a backend down; see Retry-After")
#: a product read with Redis down comes from the database; with the database down, 503
_DATABASE_DOWN = (503, "busy: the database is down; see Retry-After")
_TOO_LARGE = (413, "request_entity_too_large: the body is over 64 KiB")
#: ``validation.read_body``'s limit on a body that comes in too slowly
_SLOW_BODY = (408, "request_timeout: the body did not arrive in time")

_IN_CHECKOUT = {"type": "integer", "description": "units Redis has taken whose orders "
                "are not written yet (amid a sale: in checkout; the audit is consistent "
                "only once they are 0); approximate, and 0 for sql"}
_PRODUCT = {"type": "object", "required": ["sku", "name", "price", "stock", "sold", "strategy"],
            "properties": {"sku": {"type": "string"}, "name": {"type": "string"},
                           "price": {"type": "number", "description": "in currency "
                                     "units (49.0), from whole cents"},
                           "description": {"type": "string"},
                           "stock": {"type": "integer"},
                           "sold": {"type": "integer"}, "strategy": {"type": "string"},
                           "work_ms": {"type": "integer", "description": "the simulated "
                                       "work inside each purchase's critical section"},
                           "initial_stock": {"type": "integer"},
                           "in_checkout": _IN_CHECKOUT,
                           "limit": {"type": "integer", "description": "units one buyer "
                                     "may buy in this sale (a purchase's quantity)"},
                           "sale_started_at": {"type": "string", "format": "date-time",
                                               "description": "set anew by every reset"}}}
_ORDER = {"type": "object", "required": ["order_id", "sku", "user_id", "quantity"],
          "properties": {"order_id": {"type": "integer"}, "sku": {"type": "string"},
                         "user_id": {"type": "string"}, "quantity": {"type": "integer"},
                         "fencing_token": {"type": "integer"},
                         "sale_started_at": {
                             "type": "string", "format": "date-time",
                             "description": "the sale the order was written in (the "
                             "product's sale_started_at then): a reset deletes it, so a "
                             "product now showing a later one has lost it; a replay (200) "
                             "has it too, read with the order"}}}
_AUDIT_COUNTS = ("initial_stock", "remaining", "database_remaining", "orders",
                 "units_sold", "oversold", "duplicate_buyers", "in_checkout")
_AUDIT = {"type": "object", "required": ["sku", "strategy", *_AUDIT_COUNTS, "consistent"],
          "properties": {"sku": {"type": "string"}, "strategy": {"type": "string"}}
          | {name: {"type": "integer"} for name in _AUDIT_COUNTS}
          | {"remaining": {"type": "integer", "description": "Redis's stock"},
             "database_remaining": {"type": "integer",
                                    "description": "the database's stock"},
             "in_checkout": _IN_CHECKOUT,
             "consistent": {"type": "boolean", "description": "remaining + units_sold == "
                            "initial_stock, oversold == 0, duplicate_buyers == 0 and "
                            "remaining == database_remaining"}}}


def document(config: dict[str, Any]) -> dict[str, Any]:
    """The document for a server of this ``config`` (``REDLOCK_URLS``,
    ``ZOOKEEPER_HOSTS``: the strategies a reset accepts)."""
    # the bounds the handlers keep, from where they keep them (both modules import this)
    from .admin import MAX_STOCK, MAX_WORK_MS
    from .api import MAX_QUANTITY
    from .locks import configured
    from .paths import names

    return {
        "openapi": "3.1.0",
        "info": {"title": "seckill flash-sale API", "version": "0.1.0"},
        "paths": {
            "/healthz": {"get": {"summary": "Are Redis and the database reachable?",
                                 "responses": {"200": {"description": "all parts ok"},
                                               "503": {"description": "names the part down"}}}},
            "/api/noop": {
                "get": {"summary": "Does nothing: the ceiling of this server and load "
                                   "generator (the showdown's old, bare baseline)",
                        "responses": {"200": _json({"type": "object"}, "{}")}},
                "post": {"summary": "Does nothing with a purchase-shaped request: the "
                                    "sustained showdown's baseline",
                         # the server reads the body and never parses it: "type:
                         # object" was a rule it does not keep ([1], or text, is 200
                         # too: an API fuzz audit)
                         "requestBody": {"required": False, "description": "read and "
                                         "ignored, never parsed: any JSON, any other "
                                         "body (up to 64 KiB), or none",
                                         "content": {"application/json": {"schema": {}},
                                                     "*/*": {"schema": {}}}},
                         "responses": {"200": _json(
                             {"type": "object", "required": ["ok"],
                              "properties": {"ok": {"type": "boolean", "const": True}}},
                             '{"ok": true}'), **_errors(_TOO_LARGE, _SLOW_BODY)}}},
            "/api/products": {"get": {"summary": "Every product with its live stock",
                                      "responses": {"200": _json({"type": "array",
                                                                  "items": _PRODUCT}, "ok"),
                                                    **_errors(_DATABASE_DOWN)}}},
            "/api/products/{sku}": {"get": {
                "summary": "One product", "parameters": [_SKU],
                "responses": {"200": _json(_PRODUCT, "ok"),
                              **_errors((404, "unknown_sku"), _DATABASE_DOWN)}}},
            "/api/products/{sku}/purchase": {"post": {
                "summary": "Buy; one order per user per sale",
                "parameters": [_SKU, {"name": "Idempotency-Key", "in": "header",
                                      "description": "1-128 characters, sent as UTF-8, "
                                                     "not only spaces, no commas; "
                                                     f"{_PRINTABLE}",
                                      "schema": {"type": "string", "maxLength": 128,
                                                 "pattern": _visible(",")}}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["user_id"],
                    "properties": {"user_id": {"type": "string", "minLength": 1,
                                               "maxLength": 64, "pattern": _visible(),
                                               "description": f"the buyer; {_PRINTABLE}, "
                                                              f"{_VISIBLE}. Compared as "
                                                              "sent"},
                                   "quantity": {"type": "integer", "minimum": 1,
                                                "maximum": MAX_QUANTITY, "default": 1,
                                                "description": "at most the sale's "
                                                               "per-buyer limit (its "
                                                               "product's limit): 400 "
                                                               f"above it; {_LITERAL}"}}}}}},
                "responses": {"201": _json(_ORDER, "order created"),
                              "200": _json(_ORDER, "the order this Idempotency-Key made"),
                              **_errors((400, "invalid_request"), (404, "unknown_sku"),
                                        (409, "sold_out or already_purchased"), _TOO_LARGE,
                                        _SLOW_BODY, _BUSY)}}},
            "/api/admin/sales/{sku}": {"put": {
                "summary": "Reset a sale: delete its orders, set stock and strategy",
                "security": [{"bearer": []}], "parameters": [_SKU],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["stock", "strategy"],
                    "properties": {"stock": {"type": "integer", "minimum": 0,
                                             "maximum": MAX_STOCK, "description": _LITERAL},
                                   "strategy": {"type": "string",
                                                "enum": [name for name in names()
                                                         if configured(name, config)],
                                                "description": "those this shop has the "
                                                               "servers for (GET /api/"
                                                               "strategies?usable=true); "
                                                               "the others are 400, GET "
                                                               "/api/strategies?unusable="
                                                               "true says what each "
                                                               "lacks"},
                                   "work_ms": {"type": "integer", "minimum": 0,
                                               "maximum": MAX_WORK_MS, "default": 0,
                                               "description": "the simulated work in each "
                                                              "purchase's critical "
                                                              f"section; {_LITERAL}"},
                                   "limit": {"type": "integer", "minimum": 1,
                                             "maximum": NO_LIMIT, "default": NO_LIMIT,
                                             "description": "units per buyer; default: "
                                                            "no limit but the stock; "
                                                            f"{_LITERAL}"}}}}}},
                "responses": {"200": {"description": "the sale as reset"},
                              **_errors((400, "invalid_request"), (401, "unauthorized"),
                                        (404, "unknown_sku"), _TOO_LARGE, _SLOW_BODY,
                                        (503, "busy: a purchase or another reset held the "
                                              "sale too long, or a backend is down"))}}},
            "/api/admin/sales/{sku}/buyers": {"get": {
                "summary": "The buyers with an order in a sale, a page at a time",
                "security": [{"bearer": []}],
                "parameters": [_SKU, {"name": "after", "in": "query", "required": False,
                                      "description": "the next of the page before (a "
                                                     "user id; no control characters); "
                                                     "leave it out for the first page",
                                      # no control character: one was 400 with only
                                      # maxLength said (an API fuzz audit); blank is
                                      # taken (the first page), so not user_id's rule
                                      "schema": {"type": "string", "maxLength": 64,
                                                 "pattern": _NO_CONTROLS}}],
                "responses": {"200": _json({
                    "type": "object", "required": ["buyers", "next"],
                    "properties": {"buyers": {"type": "array", "items": {"type": "string"},
                                              "description": "user ids, in order"},
                                   "next": {"type": ["string", "null"],
                                            "description": "null: this was the last page"}}},
                    "a page of buyers"),
                              **_errors((400, "invalid_request"), (401, "unauthorized"),
                                        (404, "unknown_sku"), _DATABASE_DOWN)}}},
            "/api/sales/{sku}/audit": {"get": {
                "summary": "Did the sale oversell or lose an order?", "parameters": [_SKU],
                "responses": {"200": _json(_AUDIT, "the audit"),
                              **_errors((404, "unknown_sku"), (503, "busy: Redis is down"))}}},
            "/api/strategies": {"get": {
                "summary": "The strategies a sale may be reset to",
                "parameters": [{"name": "usable", "in": "query", "required": False,
                                "description": "true: only those this shop has the "
                                               "servers for (ZooKeeper, RedLock nodes)",
                                "schema": {"type": "string", "enum": ["true"]}},
                               {"name": "unusable", "in": "query", "required": False,
                                "description": "true: the others, as {name: what it "
                                               "lacks}",
                                "schema": {"type": "string", "enum": ["true"]}}],
                "responses": {"200": _json({"oneOf": [
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "object", "additionalProperties": {"type": "string"}}]},
                    "their names (unusable=true: name -> what it lacks)"),
                              **_errors((400, "invalid_request"))}}},
        },
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error", "detail"],
                                  "properties": {"error": {"type": "string"},
                                                 "detail": {"type": "string"}}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
