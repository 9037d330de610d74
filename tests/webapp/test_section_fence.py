"""A lock section whose lock was lost while it worked writes no stock once a newer
holder has read it (``section.stock_if_still`` fences, ``set_stock.lua`` checks).

A ZooKeeper audit sold the last unit twice with ``zookeeper``, a strategy marked safe:
a holder's session expired during its 10 s of work, the next holder (a new session,
a higher token) read stock 1, the first wrote stock 0 and its order, and so did the
second. Here the two sections run by hand, in that order, on a real redis-server."""

from __future__ import annotations

import pytest

from tests.webapp.conftest import SKU, backends, buy, reset
from webapp import section
from webapp.deadlines import set_stock
from webapp.problems import Busy
from webapp.saleinfo import load_sale
from webapp.services import Checkout


def sections(app):  # type: ignore[no-untyped-def]
    shop = backends(app)
    sale = load_sale(shop.sessions, SKU)
    deps = Checkout(sessions=shop.sessions, redis=shop.redis, lock_for=lambda s, u: None,
                    sleep=lambda seconds: None)
    return sale, deps, shop.redis


def write(redis, sale, left: int, generation: int | None, token: int | None) -> None:  # type: ignore[no-untyped-def]
    set_stock(redis, sale.keys.stock, left, generation=generation,
              generation_key=sale.keys.stock_gen, token=token,
              sections_key=sale.keys.sections)


def test_the_lost_holder_s_write_after_a_newer_read_is_refused(app, client):
    reset(client, stock=1, strategy="token")
    sale, deps, redis = sections(app)
    lost = section.stock_if_still(deps, sale, 841)  # A reads, then its lock is lost
    newer = section.stock_if_still(deps, sale, 843)  # B, the next holder, reads
    assert (lost.left, newer.left) == (1, 1)
    with pytest.raises(Busy, match="lock was lost"):
        write(redis, sale, lost.left - 1, lost.generation, 841)
    assert redis.get(sale.keys.stock) == b"1"  # A took nothing
    write(redis, sale, newer.left - 1, newer.generation, 843)  # B sells the unit
    assert redis.get(sale.keys.stock) == b"0"


def test_sections_in_token_order_write_as_before_and_a_reset_clears_the_fence(app, client):
    reset(client, stock=3, strategy="token")
    sale, deps, redis = sections(app)
    for token in (5, 6, 7):
        read = section.stock_if_still(deps, sale, token)
        write(redis, sale, read.left - 1, read.generation, token)
    assert redis.get(sale.keys.stock) == b"0"
    assert redis.zcard(sale.keys.sections) == 1  # the newest only
    reset(client, stock=2, strategy="token")  # a new sale: tokens of any height sell
    assert not redis.exists(sale.keys.sections)
    assert buy(client, "after-reset").status_code == 201


def test_an_unsafe_lock_s_section_carries_no_token_and_is_not_fenced(app, client):
    # naive's lost update is the lesson: its sections still overwrite each other
    reset(client, stock=1, strategy="naive")
    sale, deps, redis = sections(app)
    first = section.stock_if_still(deps, sale, None)
    second = section.stock_if_still(deps, sale, None)
    write(redis, sale, first.left - 1, first.generation, None)
    write(redis, sale, second.left - 1, second.generation, None)
    assert not redis.exists(sale.keys.sections)
