"""The tables: products, one sale per product, and one order row per successful purchase.

The schema is owned by Alembic (``migrations/``); these classes are what its
``env.py`` compares against. Two UNIQUE constraints are the database's last word on
the rules the Redis fast path also enforces: one order per user per sale, and one
order per ``Idempotency-Key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column

# Named constraints make migrations portable between SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """``moment`` in UTC, aware (SQLite hands back naive UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def whole_ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def shown_sale_start(started_at: datetime) -> str:
    """A sale's ``started_at`` as the API shows it (``sale_started_at``): UTC, to the
    millisecond, without a reload's microseconds (``saleinfo.reloaded_started_at``)."""
    return whole_ms(aware(started_at)).isoformat()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Product(Base):
    __tablename__ = "products"

    sku: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    price_cents: Mapped[int] = mapped_column(Integer)
    description: Mapped[str] = mapped_column(String(500), default="")


class Sale(Base):
    """The sale of one product: its stock and the strategy that guards it."""

    __tablename__ = "sales"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sku: Mapped[str] = mapped_column(ForeignKey("products.sku"), unique=True)
    initial_stock: Mapped[int] = mapped_column(Integer)
    # the database's own count; the live count is in Redis, the audit compares them
    remaining: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(40))
    work_ms: Mapped[int] = mapped_column(Integer, default=0)
    per_user_limit: Mapped[int] = mapped_column(Integer)  # sales.NO_LIMIT: none
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    #: the fencing counter a reload after Redis lost its data last raised the sale's lock
    #: to: the next reload goes past it (``saleinfo.raise_fence_floor``; migration 0004)
    fence_floor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class Order(Base):
    __tablename__ = "orders"
    #: on SQLite, AUTOINCREMENT: a reset deletes orders, and an id is never reused
    #: (PostgreSQL's sequence never reuses one either; migration 0003)
    __table_args__ = (UniqueConstraint("sale_id", "user_id", name="uq_orders_sale_user"),
                      {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: no index of its own: uq_orders_sale_user's leading column serves lookups by sale
    sale_id: Mapped[int] = mapped_column(ForeignKey("sales.id"))
    sku: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    quantity: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(40))
    fencing_token: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    #: its sale's ``started_at``, read with the row (a row read is in the sale as it is
    #: then: a reset deletes the orders in the transaction that moves it on)
    sale_started: Mapped[datetime] = column_property(
        select(Sale.started_at).where(Sale.id == sale_id).correlate_except(Sale)
        .scalar_subquery())

    def to_json(self) -> dict[str, object]:
        body = order_json(self)
        body["sale_started_at"] = shown_sale_start(self.sale_started)
        return body


@dataclass(slots=True)
class PlacedOrder:
    """An order row as a purchase writes it: the same columns as ``Order``, as a plain
    value. A purchase never needs an ORM instance of the row it inserts (it is written
    with a Core ``INSERT``), and making one costs ~20 us of attribute instrumentation,
    a fifteenth of what a purchase adds to a request (docs/performance.md, session 4)."""

    sale_id: int
    sku: str
    user_id: str
    quantity: int
    strategy: str
    fencing_token: int | None
    idempotency_key: str | None
    created_at: datetime
    id: int | None = None
    #: the sale it was written in, as ``sale_started_at`` shows it, when the write was
    #: bound to a sale generation: a reset deletes it, so a watcher who then sees another
    #: ``sale_started_at`` knows it went, and one who sees this one that it stayed
    sale_started_at: str | None = None

    def to_json(self) -> dict[str, object]:
        body = order_json(self)
        if self.sale_started_at is not None:
            body["sale_started_at"] = self.sale_started_at
        return body


class OrderLike(Protocol):
    """What the API answers with: an ``Order`` read back, or a ``PlacedOrder`` written."""

    @property
    def id(self) -> int | None: ...
    @property
    def sku(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def quantity(self) -> int: ...
    @property
    def fencing_token(self) -> int | None: ...
    @property
    def idempotency_key(self) -> str | None: ...
    def to_json(self) -> dict[str, object]: ...


def order_json(order: OrderLike) -> dict[str, object]:
    body: dict[str, object] = {"order_id": order.id, "sku": order.sku,
                               "user_id": order.user_id, "quantity": order.quantity}
    if order.fencing_token is not None:
        body["fencing_token"] = order.fencing_token
    return body
