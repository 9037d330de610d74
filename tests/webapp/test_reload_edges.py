"""A reload's edges (``saleinfo.py``): one that read the sale before a reset starts no
generation, and one after Redis lost a sold-out sale puts its buyers back. Both were
mutation survivors: every unit of the reset's sale vanished (503, 503, 503, then
sold_out with 0 orders), and an earlier buyer heard sold_out instead of
already_purchased."""

from __future__ import annotations

from webapp import saleinfo, sales

SKU = "sku-1"


def test_a_reload_that_read_the_sale_before_a_reset_starts_no_generation(sessions, redis_client):
    # S6: new_generation's ``started_at == old`` guard. Without it a reload that looked
    # the sale up before a reset moves the reset's sale back to the old generation plus
    # 1 us: the Redis copy says the reset's generation, so every order row is refused
    # (503 for every buyer) while a purchase of the old sale is written into the new one
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=10, strategy="atomic")
    sales.reset_sale(sessions, redis_client, SKU, stock=10, strategy="atomic")
    before = saleinfo.load_sale(sessions, SKU)
    sales.reset_sale(sessions, redis_client, SKU, stock=10, strategy="atomic")
    after = saleinfo.load_sale(sessions, SKU)
    assert after.generation != before.generation
    assert saleinfo.new_generation(sessions, before) is None
    assert saleinfo.load_sale(sessions, SKU).generation == after.generation


def test_after_redis_lost_a_sold_out_sale_an_earlier_buyer_hears_already_purchased(deps):
    # S12: the reload puts the buyers back (``_write_back``'s staged set); without them
    # ann's retry of a purchase she made hears "sold out", as if she had none
    import pytest

    from webapp.problems import AlreadyPurchased
    from webapp.services import PurchaseRequest, checkout

    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=1, strategy="atomic")
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    deps.redis.flushall()  # a restart without persistence
    with pytest.raises(AlreadyPurchased):
        checkout(deps, PurchaseRequest(SKU, "ann"))


def test_a_reload_that_read_the_sale_before_a_reset_writes_nothing_over_the_new_stock(
        redis_client):
    # restore_sale.lua's stock-generation check (a mutation audit took it out; no test
    # noticed). The reset's hash copy is gone alone (an evicting Redis) and its stock
    # stands: a reload that read the old sale must not put the old one back over it, its
    # strategy, generation, sold-out flag and buyers (the script's header: a sale reset
    # to sql went on selling through the token lock, and oversold)
    from webapp import scripts
    from webapp.keys import SaleKeys

    keys = SaleKeys("sku-reload-late")
    redis_client.delete(*keys.all())
    redis_client.set(keys.stock_gen, 200)  # the reset's sale: generation 200, 50 units
    redis_client.set(keys.stock, 50)
    staged = f"{keys.buyers}:restoring:late"
    redis_client.sadd(staged, "ann")  # the old sale's buyers, read with it
    written = scripts.script(redis_client, "restore_sale")(
        keys=[keys.info, keys.stock_gen, keys.stock, keys.soldout, keys.buyers, staged,
              keys.reloaded, keys.holdoff, keys.key_owners, keys.reservations, keys.taken],
        args=[100, 0, "1", "", "strategy", "token", "generation", "100"])
    assert written == 0
    assert (redis_client.get(keys.stock_gen), redis_client.get(keys.stock)) == (b"200", b"50")
    assert not redis_client.exists(keys.info, keys.soldout, keys.buyers, staged)
