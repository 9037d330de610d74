"""The storefront page. Server-rendered once; ``static/shop.js`` keeps the stock live by
polling ``/api/products`` (short polling is robust under gevent and through proxies)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, current_app, render_template
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from . import sales
from .extensions import get_backends
from .writedeadline import LANDED_CHECK_S, NO_ANSWER_S, ORDER_WRITE_S, SLACK_S

bp = Blueprint("shop", __name__)

#: the pages load only their own scripts and styles: an injected <script> (a product
#: name from a careless admin, say) does not run, and the admin token in the admin
#: page's sessionStorage stays where it is. Inline style attributes stay allowed (the
#: stock bars' first width is one).
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def page(html: str) -> Response:
    """An HTML page with ``PAGE_HEADERS`` (the JSON API needs none of them)."""
    return Response(html, mimetype="text/html", headers=PAGE_HEADERS)


#: the longest an order write takes, from when it queued to its answer: its budget, the
#: most a statement may run past it, then, from a database that said nothing, the wait
#: before the worker gives it up and the look for its row (``writedeadline.py``)
ORDER_WRITE_WORST_S = ORDER_WRITE_S + SLACK_S + NO_ANSWER_S + LANDED_CHECK_S


def purchase_timeout_s(config: Mapping[str, Any]) -> int:
    """How long the page waits for a purchase's answer before it says "no answer": past
    the shop's own worst case, lock wait + the longest simulated work + the order write
    (``ORDER_WRITE_WORST_S``; SQLite's busy wait is shorter: ``extensions.py``).
    A fixed 20 s was shorter than 10 + 10 + a write: a buyer heard "no answer" for a
    purchase that was still going through. The wait for the buyer's other purchase in
    flight (``twinwait.py``) comes off the lock wait, but may be longer than a short
    ``LOCK_TIMEOUT_S``. The write's term was PostgreSQL's statement timeout, which
    bounds one statement and not the write (a PostgreSQL audit: 30 s)."""
    from .admin import MAX_WORK_MS  # (admin imports this module for ``page``)
    from .services import Checkout

    waits = max(float(config["LOCK_TIMEOUT_S"]), Checkout.replay_wait_s)
    worst = waits + MAX_WORK_MS / 1000 + ORDER_WRITE_WORST_S
    return math.ceil(worst) + 5


#: how often the storefront's "cannot open" page tries again
UNAVAILABLE_RETRY_S = 5


@bp.get("/")
def index() -> Response:
    backends = get_backends()
    try:
        products = sales.list_products(backends.sessions, backends.view_redis)
    except (RedisError, DBAPIError, PoolTimeout) as exc:
        return _unavailable(exc)
    return page(render_template("shop.html", products=products,
                                purchase_timeout_s=purchase_timeout_s(backends.config),
                                max_user_id=backends.config["MAX_USER_ID_LENGTH"]))


def _unavailable(exc: Exception) -> Response:
    """A page, not the API's JSON, for a person whose storefront cannot be drawn (its
    products come from the database): a browser showed the raw 503 body, and stayed on
    it after the database came back (a docs audit). Same 503, ``Retry-After`` and log
    line as the API's answer (``errors.py``'s handler for it, found as Flask finds it);
    the page reloads itself."""
    answer = current_app.make_response(current_app.handle_user_exception(exc))
    status = answer.status_code
    detail = str((answer.get_json() or {}).get("detail", "the shop is unavailable"))
    html = render_template("unavailable.html", detail=detail[:1].upper() + detail[1:],
                           retry_s=UNAVAILABLE_RETRY_S)
    response = page(html)
    response.status_code = status
    response.headers["Retry-After"] = str(UNAVAILABLE_RETRY_S)
    return response
