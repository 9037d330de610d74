"""The storefront page. Server-rendered once; ``static/shop.js`` keeps the stock live by
polling ``/api/products`` (short polling is robust under gevent and through proxies)."""

from __future__ import annotations

from flask import Blueprint, render_template

from . import sales
from .extensions import get_backends

bp = Blueprint("shop", __name__)


@bp.get("/")
def index() -> str:
    backends = get_backends()
    return render_template("shop.html",
                           products=sales.list_products(backends.sessions, backends.redis))
