"""The demo catalogue: ``sku-1`` is the featured flash sale (100 units, ``token``)."""

from __future__ import annotations

import logging

import redis
from sqlalchemy.orm import sessionmaker

from .extensions import make_engine
from .sales import create_product, reset_sale

logger = logging.getLogger(__name__)

#: sku, name, price in cents, stock, strategy, description
PRODUCTS = [
    ("sku-1", "Mechanical keyboard", 4_900, 100, "token",
     "The featured flash sale: 100 units for 1000 eager buyers."),
    ("sku-2", "Noise-cancelling headphones", 7_900, 50, "atomic",
     "Sold by one Lua script, no lock at all."),
    ("sku-3", "Espresso grinder", 12_900, 20, "sql",
     "Sold by a conditional UPDATE in the database."),
]


def seed(database_url: str, redis_url: str, *, reset: bool = True,
         featured_strategy: str | None = None) -> None:
    """Create the demo products if missing; with ``reset``, restock every sale.

    :param featured_strategy: the strategy of ``sku-1`` (``LOCK_STRATEGY``; ``token``).
    """
    engine = make_engine(database_url)
    client = redis.Redis.from_url(redis_url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        for sku, name, price, stock, strategy, description in PRODUCTS:
            if sku == "sku-1" and featured_strategy:
                strategy = featured_strategy
            create_product(sessions, sku, name, price, stock=stock, strategy=strategy,
                           description=description)
            if reset:
                reset_sale(sessions, client, sku, stock=stock, strategy=strategy)
        logger.info("demo catalogue ready: %s", ", ".join(p[0] for p in PRODUCTS))
    finally:
        client.close()
        engine.dispose()
