"""atomic-sharded on a real redis-server: no oversell, and the remainder it trades for speed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot
from sqlalchemy.orm import Session, sessionmaker

from webapp import orders, paths, sales
from webapp.extensions import make_engine
from webapp.models import Base
from webapp.problems import AlreadyPurchased, ShopError, SoldOut
from webapp.services import Checkout, PurchaseRequest, checkout, load_sale
from webapp.sharding import ShardedPath, shard_gen_key, shard_key, split

SKU = "sku-1"


@pytest.fixture
def sessions(tmp_path) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'shop.sqlite'}")
    Base.metadata.create_all(engine)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


@pytest.fixture
def deps(sessions, redis_client) -> Checkout:
    sales.create_product(sessions, SKU, "Hot phone", 99_900, stock=1, strategy="atomic")
    return Checkout(sessions=sessions, redis=redis_client, lock_for=lambda sale, user: None)


def open_sale(deps: Checkout, monkeypatch, *, stock: int, shards: int = 4,
              probes: int | None = None, limit: int = 1) -> ShardedPath:
    """Reset the sale onto a sharded path (registered for this test only)."""
    path = ShardedPath(shards=shards, probes=probes)
    monkeypatch.setitem(paths._paths(), "atomic-sharded", path)
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=stock, strategy="atomic-sharded",
                     limit=limit)
    return path


def buy(deps: Checkout, user: str, quantity: int = 1) -> Any:
    return checkout(deps, PurchaseRequest(SKU, user, quantity))


def users_starting_at(path: ShardedPath, shard: int, count: int) -> list[str]:
    found = [f"user-{i}" for i in range(1000) if path.first_shard(f"user-{i}") == shard]
    return found[:count]


def test_each_shard_has_its_own_hash_tag_so_a_cluster_spreads_them():
    slots = {key_slot(shard_key(SKU, i).encode()) for i in range(4)}
    assert len(slots) == 4
    assert shard_key(SKU, 0) == "shard:{sku-1#0}:stock"


def test_stock_is_dealt_over_the_shards_as_evenly_as_possible(deps, monkeypatch):
    assert split(10, 4) == [3, 3, 2, 2]
    path = open_sale(deps, monkeypatch, stock=10)
    sale = load_sale(deps.sessions, SKU)
    assert path.read_shards(deps.redis, sale) == [3, 3, 2, 2]
    assert sales.get_product(deps.sessions, deps.redis, SKU)["stock"] == 10


def test_concurrent_buyers_never_oversell_and_the_audit_is_exact(deps, monkeypatch):
    open_sale(deps, monkeypatch, stock=10)
    start, outcomes = threading.Barrier(40), []

    def shopper(n: int) -> None:
        start.wait()
        try:
            buy(deps, f"buyer-{n}")
            outcomes.append("order")
        except ShopError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=shopper, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcomes.count("order") == 10
    assert outcomes.count("sold_out") == 30
    report = sales.audit(deps.sessions, deps.redis, SKU)
    assert report["consistent"], report
    assert (report["units_sold"], report["remaining"], report["oversold"]) == (10, 0, 0)


def test_probing_every_shard_sells_the_last_unit_whoever_asks(deps, monkeypatch):
    path = open_sale(deps, monkeypatch, stock=4)  # one unit per shard
    same_first_shard = users_starting_at(path, 0, 5)
    for user in same_first_shard[:4]:
        buy(deps, user)
    with pytest.raises(SoldOut):
        buy(deps, same_first_shard[4])
    assert deps.redis.get(load_sale(deps.sessions, SKU).keys.soldout) == b"1"
    assert sales.audit(deps.sessions, deps.redis, SKU)["consistent"]


def test_a_single_probe_says_sold_out_while_other_shards_still_hold_units(deps, monkeypatch):
    path = open_sale(deps, monkeypatch, stock=4, probes=1)
    first, second = users_starting_at(path, 0, 2)
    buy(deps, first)
    with pytest.raises(SoldOut):
        buy(deps, second)  # shard 0 is empty; shards 1-3 are never asked
    report = sales.audit(deps.sessions, deps.redis, SKU)
    assert report["remaining"] == 3 and report["units_sold"] == 1  # the unsold remainder
    assert report["consistent"]  # nothing lost: the units are just never offered
    assert not deps.redis.get(load_sale(deps.sessions, SKU).keys.soldout)


def test_a_multi_unit_purchase_can_find_no_shard_big_enough_although_the_sum_is(
        deps, monkeypatch):
    path = open_sale(deps, monkeypatch, stock=4, limit=2)  # 1 + 1 + 1 + 1
    with pytest.raises(SoldOut, match="no shard had 2"):
        buy(deps, "big-spender", quantity=2)
    sale = load_sale(deps.sessions, SKU)
    assert path.read_shards(deps.redis, sale) == [1, 1, 1, 1]
    assert not deps.redis.get(sale.keys.soldout), "units remain: the sale is not over"
    buy(deps, "small-spender", quantity=1)  # single units still sell


def test_a_failed_order_write_returns_the_unit_to_the_shard_it_came_from(deps, monkeypatch):
    path = open_sale(deps, monkeypatch, stock=8)
    buy(deps, "alice")
    sale = load_sale(deps.sessions, SKU)
    before = path.read_shards(deps.redis, sale)
    deps.redis.srem(sale.keys.buyers, "alice")  # let a second purchase reach the database
    with pytest.raises(AlreadyPurchased):
        buy(deps, "alice")  # the UNIQUE (sale, user) constraint refuses the second row
    assert path.read_shards(deps.redis, sale) == before
    assert sales.audit(deps.sessions, deps.redis, SKU)["consistent"]


def test_after_redis_loses_its_data_the_shards_are_rebuilt_from_the_database(
        deps, monkeypatch):
    path = open_sale(deps, monkeypatch, stock=8)
    for n in range(3):
        buy(deps, f"early-{n}")
    # Redis restarted without persistence: every key of the sale is gone
    deps.redis.delete(*deps.redis.keys(f"sale:{{{SKU}*"))
    for n in range(5):
        buy(deps, f"late-{n}")  # the first one rebuilds the shards from `remaining`
    with pytest.raises(SoldOut):
        buy(deps, "one-too-many")
    assert path.read_shards(deps.redis, load_sale(deps.sessions, SKU)) == [0, 0, 0, 0]
    report = sales.audit(deps.sessions, deps.redis, SKU)
    assert report["consistent"], report
    assert (report["units_sold"], report["remaining"], report["oversold"]) == (8, 0, 0)


def test_the_sold_out_flag_is_not_set_while_a_shard_still_holds_a_unit(deps, monkeypatch):
    # a give-back can land on a shard behind a buyer's probes: the flag re-reads them
    path = open_sale(deps, monkeypatch, stock=4)  # one unit per shard
    sale = load_sale(deps.sessions, "sku-1")
    deps.redis.set(path.keys(sale)[2], 0)  # shard 2 empties after its probe...
    deps.redis.set(path.keys(sale)[2], 1)  # ...and a give-back returns its unit
    path._flag_sold_out(deps.redis, sale)  # a buyer whose probes all saw 0
    assert not deps.redis.get(sale.keys.soldout)
    buy(deps, "still-sells")
    assert sales.audit(deps.sessions, deps.redis, "sku-1")["consistent"]


def test_the_sold_out_flag_is_not_set_while_a_shard_is_missing(deps, monkeypatch):
    """A missing shard is not an empty one: a reset deletes the old shards before it
    loads the new ones, and Redis may have lost that key. Read as 0, the flag went up
    over a sale whose units were on their way (a mutation survivor)."""
    path = open_sale(deps, monkeypatch, stock=4)
    sale = load_sale(deps.sessions, "sku-1")
    for key in path.keys(sale)[:3]:
        deps.redis.set(key, 0)
    deps.redis.delete(path.keys(sale)[3])
    path._flag_sold_out(deps.redis, sale)
    assert not deps.redis.get(sale.keys.soldout)


def test_a_give_back_between_the_flags_check_and_its_set_lifts_the_flag(deps, monkeypatch):
    """The flag's check (the shards, one round trip) and its set (``flag_soldout.lua``,
    another) are apart, and a give-back (an order row that failed: INCRBY, then DEL of
    the flag) can land between them. The flag then went up over the returned unit, and
    the sale answered ``sold_out`` with a unit on the shelf, for good (an audit). The
    shards are read again after the set: a unit there lifts the flag."""
    path = open_sale(deps, monkeypatch, stock=4)  # one unit per shard
    for n in range(3):
        buy(deps, f"early-{n}")
    sale = load_sale(deps.sessions, SKU)
    last = path.read_shards(deps.redis, sale).index(1)
    deps.redis.decr(path.keys(sale)[last])  # ann takes the last unit; her row then fails
    real = deps.redis

    class GiveBackLandsAfterTheCheck:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def pipeline(self, **options: Any) -> Any:
            pipe = real.pipeline(**options)
            execute = pipe.execute

            def then_ann_gives_back() -> Any:
                read = execute()
                if not real.exists(sale.keys.soldout + ":gave-back"):
                    real.set(sale.keys.soldout + ":gave-back", 1)
                    orders.give_back(real, SKU, 1, sale.generation,
                                     (path.keys(sale)[last], shard_gen_key(SKU, last)))
                return read
            pipe.execute = then_ann_gives_back
            return pipe

    path._flag_sold_out(GiveBackLandsAfterTheCheck(), sale)  # bob's probes all saw 0
    assert not real.get(sale.keys.soldout)
    buy(deps, "carl")  # the returned unit sells
    with pytest.raises(SoldOut):
        buy(deps, "dave")
    assert sales.audit(deps.sessions, deps.redis, SKU)["consistent"]


def test_a_product_whose_sku_reads_like_a_shard_keeps_a_stock_of_its_own(deps, monkeypatch):
    """A shard's key was ``sale:{sku-1#0}:stock``, the stock key of a product whose sku
    is ``sku-1#0`` too (a text audit): that product's ``atomic`` sale read 25 units of
    the shard for its 10 and sold 20. Shards have a prefix of their own now."""
    twin = f"{SKU}#0"
    sales.create_product(deps.sessions, twin, "Cable", 900, stock=10, strategy="atomic")
    sales.reset_sale(deps.sessions, deps.redis, twin, stock=10, strategy="atomic")
    open_sale(deps, monkeypatch, stock=100)
    sold = 0
    for i in range(20):
        try:
            checkout(deps, PurchaseRequest(twin, f"u{i}", 1))
            sold += 1
        except SoldOut:
            pass
    assert sold == 10
    for sku in (SKU, twin):
        audit = sales.audit(deps.sessions, deps.redis, sku)
        assert audit["consistent"], audit


def test_a_sale_left_under_the_old_shard_names_sells_on_once_a_shop_starts(deps,
                                                                          monkeypatch):
    """A shop of before the rename left its shards at ``sale:{sku#i}:*``: its copy stood
    and no shard did under the new names, and every purchase was 503 until an admin
    reset (a review). A starting shop moves them (``demo.seed``)."""
    from webapp.sharding import _old_shard_keys, move_old_shard_keys, shard_taken_key

    path = open_sale(deps, monkeypatch, stock=10)
    for i in range(3):
        buy(deps, f"a{i}")
    for index in range(path.shards):
        new = (shard_key(SKU, index), shard_gen_key(SKU, index), shard_taken_key(SKU, index))
        for after, before in zip(new, _old_shard_keys(SKU, index), strict=True):
            if deps.redis.exists(after):
                deps.redis.rename(after, before)  # what the old code had written
    with pytest.raises(ShopError):
        buy(deps, "stuck")
    assert move_old_shard_keys(deps.redis, deps.sessions) == path.shards
    assert move_old_shard_keys(deps.redis, deps.sessions) == 0  # once
    for i in range(7):
        buy(deps, f"b{i}")
    with pytest.raises(SoldOut):
        buy(deps, "late")
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    assert audit["consistent"] and audit["units_sold"] == 10, audit
