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


def test_a_shards_lost_key_is_not_made_again_of_its_units_alone(redis_client):
    """A shard's stock key lost alone: a give-back or an undo made it again of their
    units alone, the shard's other units stranded (a review); now the take that finds
    the key lost answers 'lost' and the sale is reloaded (``sharded_take.lua``), and
    a reset's retry of its own generation does not write its whole share over units
    bought since (``restore_shard.lua``)."""
    fresh(redis_client, "sku-give-back-shard")
    shard, shard_gen = "sale:{sku-give-back-shard#1}:stock", "sale:{sku-give-back-shard#1}:gen"
    taken = "sale:{sku-give-back-shard#1}:taken"
    redis_client.delete(shard, taken)
    redis_client.set(shard_gen, "7")
    give = scripts.script(redis_client, "give_back")
    assert give(keys=[shard, shard_gen], args=[2, "7"]) == -2
    once = scripts.script(redis_client, "give_back_once")
    assert once(keys=[shard, shard_gen, f"{shard}:settled:n1"], args=[1, "7", 60_000]) == -2
    undo = scripts.script(redis_client, "undo_take")
    redis_client.hset(taken, "alice", "n1")
    assert undo(keys=[shard, taken], args=["alice", "n1", 3]) == -2
    assert not redis_client.exists(shard)
    take = scripts.script(redis_client, "sharded_take")
    assert take(keys=[shard, shard_gen, taken], args=[1, "7"]) == b"lost"
    restore = scripts.script(redis_client, "restore_shard")
    assert restore(keys=[shard, shard_gen, taken], args=["7", 25]) == 0  # its own: stands
    assert not redis_client.exists(shard)
    assert restore(keys=[shard, shard_gen, taken], args=["8", 25]) == 1  # the reload's
    assert take(keys=[shard, shard_gen, taken], args=[1, "8"]) == 24
    redis_client.delete(shard_gen)  # the generation alone lost
    assert take(keys=[shard, shard_gen, taken], args=[1, "8"]) == b"lost"
    redis_client.delete(shard)  # both: as before a reset's first shards, stale
    assert take(keys=[shard, shard_gen, taken], args=[1, "8"]) == b"stale"
    redis_client.delete(shard, shard_gen, taken)


def test_the_undos_make_no_stock_of_their_units_alone(redis_client):
    """A lost reply's units, where the sale's stock key was lost (evicted alone): the
    purchase that finds it lost reloads the sale, which counts them; made again of them
    alone, the key was sold as the whole sale (a review)."""
    keys = fresh(redis_client, "sku-undo-gone")
    undo = scripts.script(redis_client, "undo_take")
    redis_client.hset(keys.taken, "alice", "n1")
    assert undo(keys=[keys.stock, keys.taken], args=["alice", "n1", 2]) == -2
    assert not redis_client.hexists(keys.taken, "alice")  # its mark dropped
    assert not redis_client.exists(keys.stock)
    lost = scripts.script(redis_client, "undo_lost")
    redis_client.hset(keys.info, "strategy", "atomic")
    redis_client.sadd(keys.buyers, "bob")
    redis_client.hset(keys.reservations, "bob", "n2")
    given = [keys.buyers, keys.reservations, keys.info, keys.stock, keys.soldout]
    assert lost(keys=given, args=["bob", "n2", 1, "1"]) == 1  # reservation only
    assert not redis_client.exists(keys.stock)
    assert not redis_client.sismember(keys.buyers, "bob")


def test_the_sold_out_flag_is_not_set_over_a_lost_stock_key(redis_client):
    """A combined batch flags the sale after its rows; a failed row's give-back may have
    found the key gone (evicted alone). Flagged, every buyer heard 409 before reaching
    the section that finds the key lost and reloads the sale (a review)."""
    keys = fresh(redis_client, "sku-flag-gone")
    redis_client.set(keys.stock_gen, "g2")
    flag = scripts.script(redis_client, "flag_soldout")
    assert flag(keys=[keys.soldout, keys.stock_gen, keys.stock], args=["g2"]) == 0
    assert not redis_client.exists(keys.soldout)
    redis_client.set(keys.stock, 0)
    assert flag(keys=[keys.soldout, keys.stock_gen, keys.stock], args=["g1"]) == 0  # reset
    assert flag(keys=[keys.soldout, keys.stock_gen, keys.stock], args=["g2"]) == 1
    assert flag(keys=[keys.soldout, keys.stock_gen], args=["g2"]) == 1  # a sharded sale's
