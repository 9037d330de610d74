"""``SaleInfo``: what a purchase needs to know about its sale, and where it comes from.

The row lives in the database; every reset also copies it into the Redis hash
``sale:{sku}:info``, so the purchase path reads it with one HGETALL. Under a spike the
database then does only what it alone can do, writing orders: a lock holder never
queues for a pooled connection behind a thousand sale lookups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from .keys import SaleKeys
from .models import Sale
from .problems import UnknownSku


@dataclass(frozen=True)
class SaleInfo:
    """A sale as the purchase paths see it (a plain copy, safe across sessions)."""

    id: int
    sku: str
    strategy: str
    work_ms: int
    per_user_limit: int
    initial_stock: int

    @property
    def keys(self) -> SaleKeys:
        return SaleKeys(self.sku)


def load_sale(sessions: sessionmaker[Session], sku: str) -> SaleInfo:
    with sessions() as session:
        sale = session.scalars(select(Sale).where(Sale.sku == sku)).first()
        if sale is None:
            raise UnknownSku(f"no product with sku {sku!r}")
        return SaleInfo(sale.id, sale.sku, sale.strategy, sale.work_ms, sale.per_user_limit,
                        sale.initial_stock)


def cached_sale(redis: Any, sessions: sessionmaker[Session], sku: str) -> SaleInfo:
    """The sale from its Redis hash (written by every reset), else from the database."""
    key = SaleKeys(sku).info
    cached = redis.hgetall(key)
    if cached:
        fields = {k.decode(): v.decode() for k, v in cached.items()}
        return SaleInfo(int(fields["id"]), sku, fields["strategy"], int(fields["work_ms"]),
                        int(fields["per_user_limit"]), int(fields["initial_stock"]))
    sale = load_sale(sessions, sku)
    cache_sale(redis, sale)
    return sale


def cache_sale(redis: Any, sale: SaleInfo) -> None:
    redis.hset(sale.keys.info, mapping={
        "id": sale.id, "strategy": sale.strategy, "work_ms": sale.work_ms,
        "per_user_limit": sale.per_user_limit, "initial_stock": sale.initial_stock})
