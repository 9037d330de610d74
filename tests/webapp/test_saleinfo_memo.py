"""``cached_sale`` keeps the ``SaleInfo`` parsed from a hash, by the hash's bytes: a
reset's new hash must give the new sale, never the memoised old one."""

from __future__ import annotations

from webapp import saleinfo
from webapp.saleinfo import cached_sale


def _hash(strategy: str, generation: int, limit: int = 1) -> dict[bytes, bytes]:
    return {b"id": b"7", b"strategy": strategy.encode(), b"work_ms": b"0",
            b"per_user_limit": str(limit).encode(), b"initial_stock": b"100",
            b"generation": str(generation).encode()}


def test_the_same_bytes_give_the_same_parsed_copy() -> None:
    first = cached_sale(None, None, "sku-memo", _hash("atomic", 1))  # type: ignore[arg-type]
    again = cached_sale(None, None, "sku-memo", _hash("atomic", 1))  # type: ignore[arg-type]
    assert again is first
    assert first.keys is first.keys  # made once per copy
    assert first.keys.stock == "sale:{sku-memo}:stock"


def test_a_reset_hash_gives_the_new_sale_not_the_memoised_one() -> None:
    before = cached_sale(None, None, "sku-memo", _hash("atomic", 1))  # type: ignore[arg-type]
    after = cached_sale(None, None, "sku-memo", _hash("token", 2, limit=3))  # type: ignore[arg-type]
    assert (before.strategy, before.generation, before.per_user_limit) == ("atomic", 1, 1)
    assert (after.strategy, after.generation, after.per_user_limit) == ("token", 2, 3)


def test_the_same_hash_of_another_sku_is_another_sale() -> None:
    one = cached_sale(None, None, "sku-a", _hash("atomic", 1))  # type: ignore[arg-type]
    other = cached_sale(None, None, "sku-b", _hash("atomic", 1))  # type: ignore[arg-type]
    assert (one.sku, other.sku) == ("sku-a", "sku-b")


def test_the_memo_is_bounded() -> None:
    for generation in range(saleinfo._PARSED_MAX + 10):
        cached_sale(None, None, "sku-bound", _hash("atomic", generation))  # type: ignore[arg-type]
    assert len(saleinfo._PARSED) <= saleinfo._PARSED_MAX
