"""Every error is JSON ``{"error": CODE, "detail": TEXT}``, whatever raised it.

Shop errors carry their own status; a backend that is down or a lock not acquired in
time is 503 ``busy`` with ``Retry-After`` (microblog's ``errors/handlers.py`` idea), and
so is any error the database answers with (``DBAPIError``: read-only, a trigger);
any other HTTP error (404, 405, 413...) keeps its status with a JSON body; anything
else is a bug: logged with its traceback, answered 500 without one.

What every request may hit (a backend down, a database refusing, a bug on a busy
path) is logged once a minute per kind, not once a request (``logthrottle.py``).
"""

from __future__ import annotations

import logging
import re
import traceback

from flask import Blueprint, Response, jsonify, request
from redis.exceptions import RedisError, ResponseError
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from lockcore import LockError

from .logthrottle import PER_REQUEST
from .problems import Busy, ShopError, Unauthorized, UnknownSku
from .redishistory import HistoryChanged, HistoryUnknown
from .validation import too_long_body

logger = logging.getLogger(__name__)

bp = Blueprint("errors", __name__)


def error_response(code: str, detail: str, status: int,
                   retry_after_s: int | None = None) -> tuple[Response, int]:
    response = jsonify(error=code, detail=detail)
    if retry_after_s is not None:
        response.headers["Retry-After"] = str(retry_after_s)
    return response, status


@bp.app_errorhandler(ShopError)
def shop_error(exc: ShopError) -> tuple[Response, int]:
    retry = exc.retry_after_s if isinstance(exc, Busy) else None
    response, status = error_response(exc.code, exc.detail, exc.status, retry)
    if isinstance(exc, Unauthorized):  # RFC 9110: a 401 names the scheme it wants
        response.headers["WWW-Authenticate"] = 'Bearer realm="seckill admin"'
    return response, status


def _unavailable(part: str, exc: Exception) -> tuple[Response, int]:
    PER_REQUEST.log(logger, logging.WARNING, ("unavailable", part, type(exc).__name__),
                    "%s unavailable: %s", part, exc)
    return error_response("busy", f"{part} is unavailable, try again shortly", 503, 1)


@bp.app_errorhandler(RedisError)
def redis_down(exc: RedisError) -> tuple[Response, int]:
    if isinstance(exc, (HistoryChanged, HistoryUnknown)):  # said in the shop's words
        return error_response("busy", str(exc), 503, 1)
    if isinstance(exc, ResponseError):
        # Redis answered, refusing (out of memory, no permission, read-only): "redis is
        # unavailable" sent the operator looking for a server that was up (a Redis audit)
        PER_REQUEST.log(logger, logging.WARNING, ("refused", "redis", type(exc).__name__),
                        "redis refused: %s", exc)
        return error_response("busy", f"redis refused the request ({type(exc).__name__}), "
                              "try again shortly", 503, 1)
    return _unavailable("redis", exc)


@bp.app_errorhandler(OperationalError)
@bp.app_errorhandler(PoolTimeout)
def database_down(exc: Exception) -> tuple[Response, int]:
    return _unavailable("the database", exc)


@bp.app_errorhandler(DBAPIError)
def database_refused(exc: DBAPIError) -> tuple[Response, int]:
    """The database answered with an error of its own (read-only, a trigger, a missing
    privilege): not the buyer's fault, and nothing was bought; 503 like a database
    that is down (it was 500), logged with its traceback, since it may be a bug: once
    a minute per kind (a read-only database logged 5,150 tracebacks in 40 s)."""
    kind = type(exc.orig or exc).__name__
    PER_REQUEST.log(logger, logging.ERROR, ("refused", kind), "the database refused: %s",
                    kind, exc_info=exc)
    return error_response("busy", "the database refused the request, try again shortly",
                          503, 1)


@bp.app_errorhandler(LockError)
def lock_trouble(exc: LockError) -> tuple[Response, int]:
    return _unavailable("the lock service", exc)


#: the routes naming a sku, as (method, path): a sku holding a ``/`` (sent as ``%2F``,
#: which the server decodes before routing) matched none of them
_SKU_ROUTES = [("POST", re.compile(r"/api/products/(.+)/purchase")),
               ("GET", re.compile(r"/api/products/(.+)")),
               ("GET", re.compile(r"/api/sales/(.+)/audit")),
               ("GET", re.compile(r"/api/admin/sales/(.+)/buyers")),
               ("PUT", re.compile(r"/api/admin/sales/(.+)"))]


def _slashed_sku() -> bool:
    """Whether this request is to a sku's route with a sku holding a ``/``: no product's can
    (``validation.plausible_sku``). It was a plain 404 ``not_found``, "The requested URL
    was not found on the server...", which the admin page showed for the product
    ``sku/1`` (a storefront audit)."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or "%2F"
    if "%2f" not in raw.lower():  # a path of more parts (a mistyped route): not found
        return False
    method = "GET" if request.method == "HEAD" else request.method
    for route_method, route in _SKU_ROUTES:
        found = route.fullmatch(request.path)
        if found and route_method == method and "/" in found.group(1):
            return True
    return False


@bp.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> tuple[Response, int]:
    if exc.code == 404 and _slashed_sku():
        if request.path.startswith("/api/admin/"):  # the token first, as for any sku
            from .admin import _require_token

            try:
                _require_token()
            except Unauthorized as refused:
                return shop_error(refused)
        return shop_error(UnknownSku("no product with that sku"))
    code = re.sub(r"[^a-z0-9]+", "_", (exc.name or "error").lower()).strip("_")
    detail = exc.description or code
    if isinstance(exc, RequestEntityTooLarge) and detail == RequestEntityTooLarge.description:
        # werkzeug's own, for a Content-Length over the limit: "The data value transmitted
        # exceeds the capacity limit." where a chunked body heard the limit (an API audit)
        detail = too_long_body(request.max_content_length)
    response, status = error_response(code, detail, exc.code or 500)
    if exc.code == 405 and exc.valid_methods:  # type: ignore[attr-defined]
        response.headers["Allow"] = ", ".join(exc.valid_methods)  # type: ignore[attr-defined]
    return response, status


@bp.app_errorhandler(Exception)
def bug(exc: Exception) -> tuple[Response, int]:
    try:  # kazoo is optional; its errors mean ZooKeeper trouble, not a bug of ours
        from kazoo.exceptions import KazooException

        if isinstance(exc, KazooException):
            return _unavailable("zookeeper", exc)
    except ImportError:
        pass
    frames = traceback.extract_tb(exc.__traceback__)  # a bug is a type and a place
    place = (frames[-1].filename, frames[-1].lineno) if frames else None
    PER_REQUEST.log(logger, logging.ERROR, ("bug", type(exc).__name__, place),
                    "unhandled error", exc_info=exc)
    return error_response("internal_error", "an unexpected error occurred; it was logged", 500)
