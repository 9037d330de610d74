"""The demo catalogue: ``sku-1`` is the featured flash sale (100 units, ``token``)."""

from __future__ import annotations

import logging

import redis
from sqlalchemy.orm import sessionmaker

from lockcore import LockError

from .extensions import make_engine
from .problems import Busy
from .saleinfo import Fence, cached_sale
from .sales import create_product, reset_sale
from .sharding import move_old_shard_keys

logger = logging.getLogger(__name__)

#: sku, name, price in cents, stock, strategy, description. The descriptions name no
#: count and no strategy: a reset changes both, and the card shows them live ("100
#: units" stayed on a sale reset to 5: a storefront audit)
PRODUCTS = [
    ("sku-1", "Mechanical keyboard", 4_900, 100, "token",
     "The featured flash sale: few units, a thousand eager buyers."),
    ("sku-2", "Noise-cancelling headphones", 7_900, 50, "atomic",
     "Quiet on a crowded sale day."),
    ("sku-3", "Espresso grinder", 12_900, 20, "sql",
     "For the coffee the sale will keep you up for."),
]


def seed(database_url: str, redis_url: str, *, reset: bool = False,
         featured_strategy: str | None = None, fence: Fence | None = None,
         fresh_redis: bool = False) -> None:
    """Create the demo products that are missing and start their sales. A sale that
    exists keeps its orders and stock (``seckill serve`` restarted on the same database):
    its Redis copy is loaded from the database if Redis lacks it. ``reset`` restocks
    every sale instead, deleting its orders.

    :param featured_strategy: the strategy of a new ``sku-1`` (``LOCK_STRATEGY``; ``token``).
    :param fence: raises a reloaded sale's fencing counter past its orders' tokens
        (``locks.raise_fence``); None: left as Redis has it.
    :param fresh_redis: Redis was started empty for this shop (``seckill serve``'s
        embedded one): loading the sales into it is news, not a loss (``cached_sale``'s
        ``at_start``). A Redis given by URL that lacks a sale lost it (or another shop
        on it is mid-reset: then the shop waits for that reset's copy).
    """
    engine = make_engine(database_url)
    client = redis.Redis.from_url(redis_url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        move_old_shard_keys(client, sessions)  # a shop of before 8e6bd40 left them
        for sku, name, price, stock, strategy, description in PRODUCTS:
            if sku == "sku-1" and featured_strategy:
                strategy = featured_strategy
            created = create_product(sessions, sku, name, price, stock=stock,
                                     strategy=strategy, description=description)
            if created or reset:
                reset_sale(sessions, client, sku, stock=stock, strategy=strategy)
            else:  # a restart: the database is the truth (a fresh embedded Redis is empty)
                try:
                    cached_sale(client, sessions, sku, fence=fence, at_start=fresh_redis)
                except (LockError, Busy) as exc:  # left unloaded: its first buyer tries again
                    logger.warning("%s not reloaded into Redis: %s", sku, exc)
        logger.info("demo catalogue ready: %s", ", ".join(p[0] for p in PRODUCTS))
    finally:
        client.close()
        engine.dispose()
