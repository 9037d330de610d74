"""Two seeders at once (two hosts' migrate-and-seed lines of docs/deployment.md): the
one that finds the product added meanwhile has nothing to add, and says so."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from webapp import sales
from webapp.models import Product


def test_a_product_added_meanwhile_by_another_seeder_is_no_error(sessions, monkeypatch):
    sales.create_product(sessions, "sku-9", "Lamp", 1_000, stock=5, strategy="token")
    real = Session.get
    looks: list[Any] = []

    def not_yet(self: Session, entity: Any, ident: Any, **kwargs: Any) -> Any:
        looks.append(ident)
        if entity is Product and len(looks) == 1:  # the other seeder has not committed
            return None
        return real(self, entity, ident, **kwargs)

    monkeypatch.setattr(Session, "get", not_yet)
    assert sales.create_product(sessions, "sku-9", "Lamp", 1_000, stock=5,
                                strategy="token") is False
    with sessions() as session:
        assert session.get(Product, "sku-9") is not None
