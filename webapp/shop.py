"""The storefront page. Server-rendered once; ``static/shop.js`` keeps the stock live by
polling ``/api/products`` (short polling is robust under gevent and through proxies)."""

from __future__ import annotations

from flask import Blueprint, Response, render_template

from . import sales
from .extensions import get_backends

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


@bp.get("/")
def index() -> Response:
    backends = get_backends()
    return page(render_template("shop.html",
                                products=sales.list_products(backends.sessions, backends.redis)))
