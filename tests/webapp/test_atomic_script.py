"""``atomic_purchase.lua`` and ``atomic_checkout.lua`` on a real redis-server: their
return codes, the reservation and the sold-out flag."""

from __future__ import annotations

from webapp import scripts
from webapp.keys import SaleKeys

KEYS = SaleKeys("sku-1")


def take(redis_client, quantity: int, limit: int = 5, generation: int | str = "") -> int:
    """The units left if taken, else the refusal's code (-1 not enough, -2, -3)."""
    script = scripts.script(redis_client, "atomic_purchase")
    code, left = script(keys=[KEYS.stock, KEYS.soldout, KEYS.stock_gen],
                        args=[quantity, limit, generation])
    return left if code == 1 else code


def test_not_enough_left_says_how_many_are(redis_client):
    script = scripts.script(redis_client, "atomic_purchase")
    redis_client.set(KEYS.stock, 2)
    assert script(keys=[KEYS.stock, KEYS.soldout, KEYS.stock_gen], args=[3, 5, ""]) == [-1, 2]
    redis_client.set(KEYS.stock, 0)
    assert script(keys=[KEYS.stock, KEYS.soldout, KEYS.stock_gen], args=[1, 5, ""]) == [-1, 0]


def test_it_decrements_and_returns_what_is_left(redis_client):
    redis_client.set(KEYS.stock, 3)
    assert take(redis_client, 2) == 1
    assert redis_client.get(KEYS.stock) == b"1"


def test_not_enough_left_changes_nothing_and_only_zero_sets_the_flag(redis_client):
    redis_client.set(KEYS.stock, 1)
    assert take(redis_client, 2) == -1
    assert redis_client.get(KEYS.stock) == b"1" and not redis_client.exists(KEYS.soldout)
    assert take(redis_client, 1) == 0
    assert take(redis_client, 1) == -1
    assert redis_client.exists(KEYS.soldout)


def test_a_quantity_above_the_limit_is_refused_before_the_stock_is_read(redis_client):
    redis_client.set(KEYS.stock, 100)
    assert take(redis_client, 6, limit=5) == -2
    assert redis_client.get(KEYS.stock) == b"100"


def test_it_takes_only_from_the_sale_generation_the_caller_looked_up(redis_client):
    redis_client.set(KEYS.stock, 10)
    assert take(redis_client, 1, generation=7) == -3  # no generation yet: mid-reset
    redis_client.set(KEYS.stock_gen, 8)
    assert take(redis_client, 1, generation=7) == -3  # reset since the lookup
    assert redis_client.get(KEYS.stock) == b"10"
    assert take(redis_client, 1, generation=8) == 9
    assert take(redis_client, 1) == 8  # no generation given: not checked


# atomic_checkout.lua: the atomic path's refusal checks, reservation and decrement at once

TAKEN, RESERVED, SOLD_OUT, OVER_LIMIT, ALREADY, NO_INFO = 1, 2, -1, -2, -3, -4


def checkout(redis_client, user: str, quantity: int = 1,
             known: int | str | None = None) -> tuple[int, int, dict]:
    script = scripts.script(redis_client, "atomic_checkout")
    code, units, *rest = script(keys=[KEYS.soldout, KEYS.buyers, KEYS.info, KEYS.stock],
                                args=[user, quantity] + ([] if known is None else [known]))
    flat = rest[0] if rest else []
    return code, units, dict(zip(flat[::2], flat[1::2], strict=True))


def sale(redis_client, stock: int, strategy: str = "atomic", limit: int = 1,
         generation: int | None = None) -> None:
    redis_client.set(KEYS.stock, stock)
    fields = {"id": 1, "strategy": strategy, "work_ms": 0, "per_user_limit": limit,
              "initial_stock": stock}
    if generation is not None:
        fields["generation"] = generation
    redis_client.hset(KEYS.info, mapping=fields)


def test_checkout_reserves_the_buyer_takes_the_units_and_returns_the_sale(redis_client):
    sale(redis_client, 3, limit=2)
    code, left, info = checkout(redis_client, "ann", 2)
    assert (code, left, info[b"strategy"]) == (TAKEN, 1, b"atomic")
    assert redis_client.get(KEYS.stock) == b"1" and redis_client.sismember(KEYS.buyers, "ann")


def test_checkout_refuses_a_second_purchase_by_the_same_buyer_and_takes_nothing(redis_client):
    sale(redis_client, 3)
    assert checkout(redis_client, "ann")[0] == TAKEN
    assert checkout(redis_client, "ann")[0] == ALREADY
    assert redis_client.get(KEYS.stock) == b"2"


def test_checkout_past_the_stock_unreserves_and_only_zero_sets_the_flag(redis_client):
    sale(redis_client, 1, limit=2)
    assert checkout(redis_client, "ann", 2)[:2] == (SOLD_OUT, 1)
    assert not redis_client.sismember(KEYS.buyers, "ann")
    assert not redis_client.exists(KEYS.soldout)
    assert checkout(redis_client, "bob")[0] == TAKEN
    assert checkout(redis_client, "cy")[0] == SOLD_OUT
    assert redis_client.exists(KEYS.soldout) and not redis_client.sismember(KEYS.buyers, "cy")


def test_after_the_sale_a_buyer_hears_already_purchased_before_sold_out(redis_client):
    sale(redis_client, 1)
    checkout(redis_client, "ann")
    redis_client.set(KEYS.soldout, 1)
    assert checkout(redis_client, "ann")[0] == ALREADY
    assert checkout(redis_client, "bob")[0] == SOLD_OUT


def test_checkout_refuses_a_quantity_above_the_limit_before_reserving(redis_client):
    sale(redis_client, 100, limit=2)
    assert checkout(redis_client, "ann", 3)[0] == OVER_LIMIT
    assert not redis_client.exists(KEYS.buyers) and redis_client.get(KEYS.stock) == b"100"


def test_checkout_of_another_strategy_reserves_the_buyer_but_takes_nothing(redis_client):
    sale(redis_client, 5, strategy="token", limit=2)
    code, _, info = checkout(redis_client, "ann")
    assert (code, info[b"strategy"]) == (RESERVED, b"token")
    assert redis_client.sismember(KEYS.buyers, "ann") and redis_client.get(KEYS.stock) == b"5"
    assert checkout(redis_client, "ann")[0] == ALREADY  # one order per buyer, as for atomic
    assert checkout(redis_client, "bob", 3)[0] == OVER_LIMIT
    assert not redis_client.sismember(KEYS.buyers, "bob")


def test_checkout_without_the_sale_row_asks_the_caller_to_reload_it(redis_client):
    redis_client.set(KEYS.stock, 5)
    assert checkout(redis_client, "ann") == (NO_INFO, 0, {})
    assert not redis_client.exists(KEYS.buyers) and redis_client.get(KEYS.stock) == b"5"


def test_a_caller_that_knows_the_sales_generation_gets_no_row_back(redis_client):
    sale(redis_client, 2, limit=2, generation=41)
    assert checkout(redis_client, "ann", known=41) == (TAKEN, 1, {})
    assert checkout(redis_client, "ann", known=41) == (ALREADY, 0, {})
    assert checkout(redis_client, "bob", 3, known=41) == (OVER_LIMIT, 0, {})
    assert checkout(redis_client, "bob", 2, known=41) == (SOLD_OUT, 1, {})
    assert redis_client.get(KEYS.stock) == b"1" and not redis_client.sismember(KEYS.buyers, "bob")
    sale(redis_client, 5, strategy="token", generation=41)
    assert checkout(redis_client, "cy", known=41) == (RESERVED, 0, {})


def test_a_stale_or_missing_generation_brings_the_row_back(redis_client):
    sale(redis_client, 10, limit=2, generation=42)
    for user, known in (("ann", 41), ("bob", ""), ("cy", None)):
        code, _, info = checkout(redis_client, user, known=known)
        assert (code, info[b"generation"], info[b"per_user_limit"]) == (TAKEN, b"42", b"2")
    sale(redis_client, 10)  # a row written without a generation
    redis_client.hdel(KEYS.info, "generation")
    code, _, info = checkout(redis_client, "dee", known="")
    assert code == TAKEN and info[b"strategy"] == b"atomic"


def test_a_row_without_its_stock_key_is_dropped_for_a_reload(redis_client):
    """An evicting Redis lost ``:stock`` alone: read as 0, every buyer heard "sold out"
    for good (a Redis audit). Now the row goes, the buyer is not reserved: -4, reload."""
    checkout = scripts.script(redis_client, "atomic_checkout")
    keys = [KEYS.soldout, KEYS.buyers, KEYS.info, KEYS.stock, KEYS.reservations]
    redis_client.hset(KEYS.info, mapping={"strategy": "atomic", "per_user_limit": 5,
                                          "generation": 7})
    assert checkout(keys=keys, args=["ann", 1, "", "", "n1"]) == [-4, 0]
    assert not redis_client.exists(KEYS.info, KEYS.soldout, KEYS.buyers, KEYS.reservations)
    take = scripts.script(redis_client, "atomic_purchase")
    assert take(keys=[KEYS.stock, KEYS.soldout, KEYS.stock_gen], args=[1, 5, ""]) == [-4, 0]
    assert not redis_client.exists(KEYS.soldout)
