"""The undo scripts, one by one, against a real redis-server. Each is the repair of a
purchase whose reply (or whose order write's reply) was lost, and each may run twice:
its own reply can be lost too, and the worker's retry queue runs it again. A repair that
gives twice, gives someone else's units, or forgets the sold-out flag puts the stock
above the truth (an oversell) or below it (stuck units). A mutation audit changed each
of these lines and no test noticed."""

from __future__ import annotations

from typing import Any

from webapp import scripts
from webapp.keys import SaleKeys


def fresh(redis_client: Any, sku: str) -> SaleKeys:
    keys = SaleKeys(sku)
    redis_client.delete(*keys.all())
    return keys


def test_undo_take_gives_the_units_back_once(redis_client):
    keys = fresh(redis_client, "sku-undo-take")
    redis_client.set(keys.stock, 4)
    redis_client.hset(keys.taken, "alice", "n1")  # the take that lost its reply
    undo = scripts.script(redis_client, "undo_take")
    assert undo(keys=[keys.stock, keys.taken], args=["alice", "n1", 2]) == 1
    assert undo(keys=[keys.stock, keys.taken], args=["alice", "n1", 2]) == 0  # its retry
    assert redis_client.get(keys.stock) == b"6"


def test_undo_take_leaves_a_later_purchase_of_the_same_buyer_alone(redis_client):
    keys = fresh(redis_client, "sku-undo-take-own")
    redis_client.set(keys.stock, 4)
    redis_client.hset(keys.taken, "alice", "n2")  # her later purchase took these
    undo = scripts.script(redis_client, "undo_take")
    assert undo(keys=[keys.stock, keys.taken], args=["alice", "n1", 1]) == 0
    assert redis_client.get(keys.stock) == b"4"


def test_undo_lost_of_the_last_unit_reopens_the_sale(redis_client):
    keys = fresh(redis_client, "sku-undo-lost")
    redis_client.hset(keys.info, "strategy", "atomic")
    redis_client.set(keys.stock, 0)
    redis_client.set(keys.soldout, 1)  # the lost purchase took the last unit
    redis_client.sadd(keys.buyers, "alice")
    redis_client.hset(keys.reservations, "alice", "n1")
    undo = scripts.script(redis_client, "undo_lost")
    given = [keys.buyers, keys.reservations, keys.info, keys.stock, keys.soldout]
    assert undo(keys=given, args=["alice", "n1", 1, "1"]) == 2
    assert redis_client.get(keys.stock) == b"1"
    assert not redis_client.exists(keys.soldout)  # else: 1 unit, and "sold out" for good
    assert not redis_client.sismember(keys.buyers, "alice")
    assert undo(keys=given, args=["alice", "n1", 1, "1"]) == 0  # its retry
    assert redis_client.get(keys.stock) == b"1"


def test_give_back_once_gives_the_quantity_to_its_own_generation_only(redis_client):
    keys = fresh(redis_client, "sku-give-back")
    redis_client.set(keys.stock, 5)
    redis_client.set(keys.stock_gen, "g2")
    give = scripts.script(redis_client, "give_back_once")
    old = [keys.stock, keys.stock_gen, f"{keys.stock}:settled:n1"]
    assert give(keys=old, args=[2, "g1", 60_000]) == -1  # the old sale's: not the new's
    assert redis_client.get(keys.stock) == b"5"
    mine = [keys.stock, keys.stock_gen, f"{keys.stock}:settled:n2"]
    assert give(keys=mine, args=[2, "g2", 60_000]) == 1
    assert give(keys=mine, args=[2, "g2", 60_000]) == 0  # its retry
    assert redis_client.get(keys.stock) == b"7"


def test_give_back_once_and_give_back_make_no_stock_of_their_units_alone(redis_client):
    """A stock key gone (evicted alone, its generation kept): made again of the units
    given back, the next section or purchase would sell them as the whole sale. The
    reload the next buyer starts counts them instead."""
    keys = fresh(redis_client, "sku-give-back-gone")
    redis_client.set(keys.stock_gen, "g2")
    once = scripts.script(redis_client, "give_back_once")
    marker = [keys.stock, keys.stock_gen, f"{keys.stock}:settled:n1"]
    assert once(keys=marker, args=[2, "g2", 60_000]) == -2
    assert once(keys=marker, args=[2, "g2", 60_000]) == 0  # its retry
    give = scripts.script(redis_client, "give_back")
    assert give(keys=[keys.stock, keys.stock_gen], args=[2, "g2"]) == -2
    assert give(keys=[keys.stock, keys.stock_gen], args=[2, "g1"]) == -1  # the old sale's
    assert not redis_client.exists(keys.stock)
    redis_client.set(keys.stock, 0)  # there, at zero: given back
    assert give(keys=[keys.stock, keys.stock_gen], args=[2, "g2"]) == 2
    marker = [keys.stock, keys.stock_gen, f"{keys.stock}:settled:n2"]
    assert once(keys=marker, args=[1, "g2", 60_000]) == 1
    assert redis_client.get(keys.stock) == b"3"


def test_reread_stock_names_its_count_with_a_new_generation(redis_client):
    """A lock section's count of the stock from the database, after a reload: a new
    generation (started in the database by the caller), over the generation counted
    from only; into a copy that is there only."""
    keys = fresh(redis_client, "sku-reread")
    redis_client.set(keys.reloaded, 1)
    redis_client.set(keys.stock_gen, "2")
    redis_client.hset(keys.info, mapping={"generation": "2", "strategy": "token"})
    count = scripts.script(redis_client, "reread_stock")
    sale_keys = [keys.stock, keys.reloaded, keys.info, keys.stock_gen]
    assert count(keys=sale_keys, args=[7, "1", "3"]) == -1  # moved on since: nothing
    assert (redis_client.get(keys.stock), redis_client.exists(keys.reloaded)) == (None, 1)
    assert count(keys=sale_keys, args=[7, "2", "3"]) == 1
    assert (redis_client.get(keys.stock), redis_client.exists(keys.reloaded),
            redis_client.get(keys.stock_gen), redis_client.hgetall(keys.info)) == \
        (b"7", 0, b"3", {b"generation": b"3", b"strategy": b"token"})
    redis_client.delete(keys.info)  # gone: no copy made of a generation alone
    assert count(keys=sale_keys, args=[6, "3", "4"]) == 0
    assert (redis_client.get(keys.stock), redis_client.get(keys.stock_gen),
            redis_client.exists(keys.info)) == (b"6", b"4", 0)
    assert count(keys=sale_keys, args=[5, "", ""]) == 0  # no generation known
    assert (redis_client.get(keys.stock), redis_client.get(keys.stock_gen)) == (b"5", b"4")
