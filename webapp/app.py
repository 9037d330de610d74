"""``create_app``: the Flask app of the shop, as gunicorn builds it (``webapp:create_app()``).

Kept out of ``webapp/__init__.py``: importing the package (``seckill``, whose console
script lives in ``webapp.cli``) would otherwise import Flask and the whole shop first,
1.4 s in which a background job's Ctrl-C, ignored until ``webapp.cli`` takes it, was
lost."""


from __future__ import annotations

import logging
import os
import secrets
from typing import Any

from flask import Flask

from . import config as settings
from .extensions import Backends
from .routing import HotRoute, ShopFlask

logger = logging.getLogger(__name__)


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    app = ShopFlask("webapp", instance_relative_config=True)  # the package's folders
    app.config.update(settings.from_env(app.instance_path))
    if test_config is not None:
        app.config.update(test_config)
    settings.check_urls(app.config)
    if app.config["DATABASE_URL"] == settings.default_database_url(app.instance_path):
        os.makedirs(app.instance_path, exist_ok=True)  # only the default SQLite lives there
    if not app.config["SECKILL_ADMIN_TOKEN"]:
        # never run the admin routes open; seckill serve, and gunicorn with the shop's
        # settings (``gunicorn_conf.on_starting``), always pass one in: this is a
        # process of its own (``flask run``), and its token is printed, as the contract
        # says, or nobody could use it
        app.config["SECKILL_ADMIN_TOKEN"] = secrets.token_urlsafe(24)
        logger.warning("SECKILL_ADMIN_TOKEN unset: the admin token of this process is %s "
                       "(another process makes another: set SECKILL_ADMIN_TOKEN for more "
                       "than one)", app.config["SECKILL_ADMIN_TOKEN"])
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["seckill"] = Backends(app.config)

    # Werkzeug answers a doubled slash (``/api//products``) with a 308 and an HTML page,
    # and folds ``/api/products//purchase`` into the product URL (a 405 for a POST): an
    # API's odd path is a JSON 404 like any unknown one (``errors.py``)
    app.url_map.merge_slashes = False

    from . import admin, api, errors, shop

    app.register_blueprint(errors.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(shop.bp)
    app.hot_route = HotRoute.for_endpoint(app.url_map, "api.purchase")  # routing.py
    return app
