"""The flash-sale web app: a storefront, a JSON API and an admin page over one sale per
product, whose stock is guarded by any ``lockcore`` strategy (or by none: ``atomic``,
``sql``).

``create_app()`` is the factory gunicorn calls (``webapp:create_app()``); the schema
comes from the Alembic migrations (``webapp.db.upgrade``), never from ``create_all``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``webapp.create_app``, imported on first use (``webapp/app.py`` says why)."""
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module 'webapp' has no attribute {name!r}")
