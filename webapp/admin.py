"""Admin: reset a sale (``PUT /api/admin/sales/<sku>``, bearer token) and its page.

The token is compared with ``hmac.compare_digest`` on bytes, so the time taken does
not reveal how many leading characters were right (and a non-ASCII header cannot
raise ``TypeError``, as ``compare_digest`` on ``str`` would).
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, jsonify, render_template, request

from . import locks, paths, sales, validation
from .extensions import get_backends
from .problems import Unauthorized, UnknownSku

bp = Blueprint("admin", __name__)

MAX_STOCK = 1_000_000
MAX_WORK_MS = 10_000
MAX_LIMIT = 1_000


def _require_token() -> None:
    expected = get_backends().config["SECKILL_ADMIN_TOKEN"].encode("utf-8")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8", "surrogateescape"), expected):
        raise Unauthorized("send Authorization: Bearer <the admin token>")


@bp.put("/api/admin/sales/<sku>")
def reset_sale(sku: str) -> Response:
    _require_token()
    if not validation.plausible_sku(sku):
        raise UnknownSku("no product with that sku")
    body = validation.json_object(request)
    stock = validation.integer(body, "stock", low=0, high=MAX_STOCK)
    strategy = validation.text(body, "strategy", 40)
    paths.path_for(strategy)  # unknown -> 400 invalid_request
    backends = get_backends()
    locks.check_configured(strategy, backends.config)
    work_ms = validation.integer(body, "work_ms", low=0, high=MAX_WORK_MS, default=0)
    limit = validation.integer(body, "limit", low=1, high=MAX_LIMIT, default=1)
    return jsonify(sales.reset_sale(backends.sessions, backends.redis, sku, stock=stock,
                                    strategy=strategy, work_ms=work_ms, limit=limit))


@bp.get("/admin")
def page() -> str:
    strategies = []
    for name in paths.names():
        try:
            safe = paths.path_for(name).safe
        except (ImportError, AttributeError):  # a strategy module still being written
            safe = False
        strategies.append((name, safe))
    return render_template("admin.html", strategies=strategies)
