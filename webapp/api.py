"""The JSON API: products, purchases, audits, health and the OpenAPI document."""

from __future__ import annotations

import functools
from typing import Any

from flask import Blueprint, Request, Response, current_app, jsonify, request
from redis.exceptions import ResponseError
from sqlalchemy import text as sql

from . import locks, sales, validation
from .batching import gevent_time_limit
from .commits import came_of
from .config import SERVE_ID_HEADER
from .extensions import Backends, get_backends, read_only_renewal_due
from .keys import SaleKeys
from .openapi import document
from .problems import InvalidRequest, UnknownSku, first_line
from .saleinfo import cached_sale, load_sale
from .services import Checkout, PurchaseRequest, checkout, new_nonce

bp = Blueprint("api", __name__)

#: no sale's limit is above it; the exact limit is the sale's and checked in ``checkout``
MAX_QUANTITY = sales.NO_LIMIT


def _known_sku(sku: str) -> str:
    if not validation.plausible_sku(sku):
        raise UnknownSku("no product with that sku")
    return sku


#: a PostgreSQL session's read-only setting (a hot standby, or a database set read-only)
READ_ONLY = sql("SELECT current_setting('transaction_read_only')")


#: how long ``/healthz`` waits for the database: a server that accepts and then says
#: nothing (a frozen host or backend) held it until the caller gave up (a PostgreSQL
#: audit: 30 s), and the storefront's banner never came
HEALTH_DATABASE_S = 2.0


#: what /healthz writes to learn that the shop's Redis takes writes (it expires)
HEALTH_KEY, HEALTH_KEY_TTL_MS = "seckill:healthz", 10_000


class _Silent(BaseException):
    """The database did not answer ``/healthz`` in time (a BaseException, like gevent's
    own timeout: SQLAlchemy then discards the connection it interrupted)."""


def _silenced(error: BaseException | None) -> bool:
    """Whether ``error`` came of ``/healthz``'s own time limit (``_Silent``)."""
    return came_of(error, lambda found: isinstance(found, _Silent))


def _within(seconds: float) -> Any:
    """A time limit on the greenlet's waits under gunicorn's gevent workers (the shop
    as served); none elsewhere (a test client, a sync worker)."""
    return gevent_time_limit(seconds, _Silent())


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    backends = get_backends()
    status = {"redis": "ok", "database": "ok"}
    try:  # a write, not a PING: a replica (or a full noeviction Redis) answers PING
        # and refuses every purchase; /healthz said "ok" (a Redis audit)
        backends.health_redis.set(HEALTH_KEY, 1, px=HEALTH_KEY_TTL_MS)
    except Exception as exc:
        status["redis"] = f"down: {_refusal(exc)}"
    try:
        with _within(HEALTH_DATABASE_S), backends.engine.connect() as connection:
            if connection.dialect.name == "postgresql":  # one that cannot take an order
                if connection.execute(READ_ONLY).scalar() == "on":
                    status["database"] = "down: read-only"
                    # the setting came with the pool's connections when they opened:
                    # new ones see the database flipped back (a PostgreSQL audit)
                    connection.invalidate()
                    if read_only_renewal_due():
                        backends.engine.dispose()
            else:
                connection.execute(sql("SELECT 1"))
    except Exception as exc:
        # SQLAlchemy, cleaning up the connection the timer interrupted (its pre-ping),
        # may raise an error of its own over it ("down: ProgrammingError" for a database
        # that said nothing: a PostgreSQL audit, and a fresh-clone run)
        status["database"] = (f"down: no answer in {HEALTH_DATABASE_S:g} s"
                              if _silenced(exc) else f"down: {type(exc).__name__}")
    except _Silent:  # the connection it interrupted is discarded, not pooled
        status["database"] = f"down: no answer in {HEALTH_DATABASE_S:g} s"
    down = [part for part, state in status.items() if state != "ok"]
    if down:
        body = {**status, "error": "unavailable", "detail": f"{', '.join(down)} down"}
        response = jsonify(body)
        response.headers["Retry-After"] = "1"
        return _serve_named(response), 503
    return _serve_named(jsonify(status)), 200


def _refusal(exc: Exception) -> str:
    """An error's type, and for Redis refusing (out of memory, no permission, read-only)
    its own words: "down: ResponseError" told the operator nothing (a Redis audit)."""
    name = type(exc).__name__
    said = first_line(exc)[:160] if isinstance(exc, ResponseError) else ""
    return f"{name} ({said})" if said else name


def _serve_named(response: Response) -> Response:
    """``response`` naming the serve that started this shop, if one did (``ServedApp``
    sets ``SECKILL_SERVE_ID``): its health check knows its own gunicorn by it."""
    serve_id = current_app.config.get("SERVE_ID")
    if serve_id:
        response.headers[SERVE_ID_HEADER] = serve_id
    return response


@bp.get("/api/noop")
def noop() -> Response:
    """Nothing but Flask and gunicorn: the old baseline of the sustained showdown, kept
    so its figure stays comparable. ``/healthz`` is not one: it pings Redis and the DB."""
    return jsonify({})


@bp.post("/api/noop")
def noop_post() -> Response:
    """The sustained showdown's baseline: a purchase's request shape (a POST with a small
    JSON body, read and ignored) and a small JSON answer, so that the load generator does
    the same work around both sides of the ratio; only the shop's own work differs."""
    validation.read_body(request)  # read like a purchase's body is; never parsed
    return jsonify({"ok": True})


@bp.get("/api/products")
def products() -> Response:
    backends = get_backends()
    return jsonify(sales.list_products(backends.sessions, backends.view_redis))


@bp.get("/api/products/<sku>")
def product(sku: str) -> Response:
    backends = get_backends()
    return jsonify(sales.get_product(backends.sessions, backends.view_redis,
                                     _known_sku(sku)))


@bp.post("/api/products/<sku>/purchase")
def purchase(sku: str) -> tuple[Response, int]:
    # the request itself, not the proxy: each attribute read through ``request`` is a
    # context lookup (docs/performance.md, session 9)
    this: Request = request._get_current_object()  # type: ignore[attr-defined]
    backends = get_backends()
    _known_sku(sku)  # an impossible sku is 404 before its body is read (or refused: 413)
    try:
        body = validation.json_object(this)
        purchase_request = PurchaseRequest(
            sku=sku,
            user_id=validation.text(body, "user_id", backends.config["MAX_USER_ID_LENGTH"]),
            quantity=validation.integer(body, "quantity", low=1, high=MAX_QUANTITY,
                                        default=1),
            idempotency_key=validation.idempotency_key(this), nonce=new_nonce())
    except InvalidRequest:
        refuse_unknown(backends, sku)
        raise
    backends.history.before_purchase()  # a failover's old copy of the sale: reloaded
    deps = Checkout(sessions=backends.sessions, redis=backends.redis,
                    lock_for=functools.partial(locks.lock_for, backends),
                    lock_timeout_s=backends.config["LOCK_TIMEOUT_S"],
                    lock_budget_s=backends.config["LOCK_TIMEOUT_S"],
                    lock_slots=backends.purchase_slots,
                    combined_slots=backends.combined_slots,
                    script_pipeline=backends.script_pipeline,
                    fence=functools.partial(locks.raise_fence, backends))
    result = checkout(deps, purchase_request)
    return jsonify(result.order.to_json()), 201 if result.created else 200


def refuse_unknown(backends: Backends, sku: str) -> None:
    """Raise ``UnknownSku`` for a request that is bad *and* names no product: the
    contract's 404 comes first, whatever the body (a bad body for a sku that does not
    exist answered 400: a contract audit; an admin reset's, and a bad ``after`` of its
    buyers, too: an API fuzz audit). On the error path only: the sale's Redis
    copy says it exists (one EXISTS), else the database is asked; a lookup that fails
    leaves the 400 standing. (The database alone made every 400, a bad body for a real
    sku too, a read beside the purchases on their pool: a review.)"""
    try:
        if backends.view_redis.exists(SaleKeys(sku).info):  # bounded: a view's timeout
            return
        load_sale(backends.sessions, sku)
    except UnknownSku:
        raise
    except Exception:  # the lookup's own failure is not this request's answer
        return


def reload_lost_sale(backends: Backends, sku: str) -> None:
    """Reload ``sku``'s sale into Redis if Redis lost it (``saleinfo.cached_sale``); one
    HGETALL when it did not."""
    cached_sale(backends.redis, backends.sessions, sku,
                fence=functools.partial(locks.raise_fence, backends))


@bp.get("/api/sales/<sku>/audit")
def audit(sku: str) -> Response:
    backends = get_backends()
    sku = _known_sku(sku)
    # a Redis that lost its data has no copy to compare: reload it as the next buyer
    # would (stock, buyers, the lock's fence), so the audit compares the sale it sells
    backends.history.before_purchase()  # a new history's stale copy: dropped first
    reload_lost_sale(backends, sku)
    return jsonify(sales.audit(backends.sessions, backends.redis, sku))


@bp.get("/api/strategies")
def strategies() -> Response:
    """Every strategy a sale may name; ``?usable=true``: only those this shop has the
    servers for (``zookeeper`` needs ZOOKEEPER_HOSTS and kazoo, ``redlock``
    REDLOCK_URLS); ``?unusable=true``: the others, each with what it lacks, so that a
    showdown skips them up front instead of failing them."""
    from .paths import names
    from .problems import InvalidRequest

    usable, unusable = request.args.get("usable"), request.args.get("unusable")
    if usable is None and unusable is None:
        return jsonify(names())
    # by presence, not by truth: "?usable=&unusable=true" read the empty usable as left
    # out (200, the unusable ones) while "?usable=" alone was 400 (an API fuzz audit)
    if (usable, unusable) not in (("true", None), (None, "true")):
        raise InvalidRequest("give usable=true or unusable=true (or neither, for every "
                             "strategy)")
    config = get_backends().config
    if usable is not None:
        return jsonify([name for name in names() if locks.configured(name, config)])
    # {name: why}: what the shop lacks for each strategy it cannot run
    return jsonify({name: why for name in names()
                    if (why := locks.missing_backend(name, config)) is not None})


@bp.get("/api/openapi.json")
def openapi() -> Response:
    return jsonify(document(get_backends().config))

