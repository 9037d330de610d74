"""A lock section's late give-back after Redis lost the sale: the reload counted it.

A section whose row failed after its lock ran out gives its units back later, under the
lock (``orders.give_back_under_lock``). A lock path's reload keeps the sale's
generation, so the generation alone did not tell a stock read again from the database,
which counts those units already (no row holds them), from the stock they were taken
from (session 42's note)::

    ann:    holds the lock: reads 10, sets 9; her row's write waits for the database
    redis:  restarts empty: the stock, the sale, ann's lock are gone
    ann:    her write fails; her lock is gone: her unit goes back later
    bob:    reloads the sale (the database: 10 left); after the hold-off reads 10,
            sets 9, writes his row: Redis 9, the database 9
    settle: ann's unit goes back: Redis 10, the database 9: one unit sold twice

Now the first section after a reload counts the stock from the database as a new
generation (``section._reread_stock``), and no section sells before it: the late
give-back, into its own generation only (``give_back_once.lua``), is refused after
the count, and goes into a stock the count overwrites before it. (A random "load" per
copy and count did this first; the count's new generation made it redundant, and it
went.) Reviews found the other cases here: a count without a reload, the sold-out
flag over a unit that a count will have, and a give-back into a stock key lost alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.webapp.conftest import SKU, backends, buy, buy_after_holdoff
from tests.webapp.lategiveback import stall_then_fail, token_shop
from webapp import orders, saleinfo, section
from webapp.keys import SaleKeys

KEYS = SaleKeys(SKU)
#: the lock's, and the hold-off's after a reload
TTL_MS = 300


def _ann_fails_late(app: Any, monkeypatch: Any, combine: bool,
                    meanwhile: Callable[[], None]) -> list[Any]:
    """Ann takes a unit; while her row's write waits, ``meanwhile`` runs (it takes her
    lock away); then her write fails. Returns her unit's late give-back, taken out of
    the worker's queue: in her worker, while the next buyers buy in another (in one
    process they share the queue, and their purchases would settle hers first)."""
    in_write, done = threading.Event(), threading.Event()

    def held() -> None:
        in_write.set()
        assert done.wait(10)

    stall_then_fail(monkeypatch, combine, "ann", held)
    answers: dict[str, int] = {}
    ann = threading.Thread(name="ann", target=lambda: answers.update(
        ann=buy(app.test_client(), "ann").status_code))
    ann.start()
    assert in_write.wait(10)
    meanwhile()
    done.set()
    ann.join(15)
    assert answers == {"ann": 503}
    waiting = list(orders.IN_DOUBT.waiting)
    assert [(e.user_id, e.failed) for e in waiting] == [("ann", True)]
    orders.IN_DOUBT.waiting.clear()
    return waiting


def _settle(waiting: list[Any]) -> None:
    """Her worker's next drain."""
    orders.IN_DOUBT.waiting.extend(waiting)
    orders.IN_DOUBT.next_drain = 0.0
    orders.IN_DOUBT.drain()
    assert not orders.IN_DOUBT


def _books(app: Any) -> tuple[Any, ...]:
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    return (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"])


both = pytest.mark.parametrize("combine", [False, True], ids=["plain", "combined"])


@pytest.fixture
def shop(database_url: str, redis_url: str, redis_client: Any,
         combine: bool) -> Iterator[Callable[..., Any]]:
    """``token_shop`` for the test's ``combine``, closed after it, failed or not (a
    worker left open drains the next test's queue)."""
    apps: list[Any] = []

    def made(stock: int = 10) -> Any:
        apps.append(token_shop(database_url, redis_url, combine, TTL_MS, stock=stock))
        return apps[-1]

    yield made
    for app in apps:
        backends(app).close()

@both
def test_a_late_give_back_after_a_reload_is_not_counted_twice(
        shop, redis_client, monkeypatch, combine):
    app = shop()

    def restart() -> None:
        assert redis_client.get(KEYS.stock) == b"9"
        redis_client.flushall()  # our own server: a restart without persistence

    waiting = _ann_fails_late(app, monkeypatch, combine, restart)
    # the reload, its hold-off, his unit
    assert buy_after_holdoff(app.test_client(), "bob").status_code == 201
    _settle(waiting)
    assert _books(app) == (9, 9, 1, True)


@both
def test_a_late_give_back_between_a_reload_and_its_count_is_overwritten_by_the_count(
        shop, redis_client, monkeypatch, combine):
    """Settled after the reload and before the first section counts: the reload kept
    the generation, so the unit goes back into the reloaded stock; the count, which has
    it already, replaces that stock before anything is sold from it."""
    app = shop()

    def restart() -> None:
        redis_client.flushall()  # our own server: a restart without persistence

    waiting = _ann_fails_late(app, monkeypatch, combine, restart)
    assert buy(app.test_client(), "bob").status_code == 503  # the reload: held off
    assert redis_client.exists(KEYS.reloaded)
    _settle(waiting)
    assert redis_client.get(KEYS.stock) == b"11"  # 10 reloaded, and her unit
    assert buy_after_holdoff(app.test_client(), "bob").status_code == 201
    assert _books(app) == (9, 9, 1, True)


@both
def test_a_late_give_back_after_a_count_without_a_reload_is_not_counted_twice(
        shop, redis_client, monkeypatch, combine):
    """A reset that could not reach its lock server holds the sections off
    (``section.hold_off``) and may then fail: the first section after counts the stock
    from the database, with no reload and no new copy."""
    app = shop()
    parts = backends(app)

    def lock_lost_and_held_off() -> None:
        redis_client.delete("lock:{stock:" + SKU + "}")  # her lock ran out
        section.hold_off(parts.redis, saleinfo.cached_sale(parts.redis, parts.sessions, SKU), 0)

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost_and_held_off)
    # counts 10 from the database, sells him 1
    assert buy(app.test_client(), "bob").status_code == 201
    _settle(waiting)
    assert _books(app) == (9, 9, 1, True)


@both
def test_the_section_that_counts_gives_back_into_its_own_count(
        shop, redis_client, monkeypatch, combine):
    """Ann's own section counts the stock (a reload marked it): her units came from that
    count, and go back into it (its generation); under the copy's older one they would
    be refused with no count to come, and lost (a review, when a per-copy "load" did
    what the generation does now)."""
    app = shop()
    parts = backends(app)
    section.hold_off(parts.redis, saleinfo.cached_sale(parts.redis, parts.sessions, SKU), 0)

    def lock_lost() -> None:
        assert not redis_client.exists(KEYS.reloaded)  # her section counted
        redis_client.delete("lock:{stock:" + SKU + "}")

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost)
    _settle(waiting)
    assert _books(app) == (10, 10, 0, True)


@both
def test_a_late_give_back_into_a_reloaded_sale_lifts_the_sold_out_flag(
        shop, redis_client, monkeypatch, combine):
    """The copy alone evicted, and reloaded with the stock key kept (its SET is NX): the
    stock is counted again only in a section, and the flag sent every buyer away before
    one (a review). The give-back goes into the kept stock, which the count replaces."""
    app = shop(stock=1)

    def lock_lost() -> None:
        redis_client.delete("lock:{stock:" + SKU + "}")

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost)
    assert buy(app.test_client(), "bob").status_code == 409  # refused at 0: the sold-out flag
    assert redis_client.exists(KEYS.soldout)
    redis_client.delete(KEYS.info)  # evicted
    assert _books(app)[:2] == (0, 1)  # the audit reloads the sale; Redis keeps its 0
    assert redis_client.exists(KEYS.reloaded)  # a section counts before it sells
    _settle(waiting)
    assert not redis_client.exists(KEYS.soldout)
    assert buy_after_holdoff(app.test_client(), "carl").status_code == 201
    assert _books(app) == (0, 0, 1, True)


@both
def test_a_late_give_back_does_not_make_a_stock_of_its_own_units_where_the_key_was_lost(
        shop, redis_client, monkeypatch, combine):
    """The stock key alone evicted (an evicting Redis; its generation and the copy kept):
    ``INCRBY`` made a stock of the give-back's units alone, which the next section sold
    as the whole sale: no reload, the database's other units stranded (a review). Now
    nothing goes back into a stock that is gone: the reload the next buyer starts
    counts them."""
    app = shop()

    def lock_lost() -> None:
        redis_client.delete("lock:{stock:" + SKU + "}")

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost)
    redis_client.delete(KEYS.stock)  # evicted alone
    _settle(waiting)
    assert not redis_client.exists(KEYS.stock)
    client = app.test_client()
    assert buy(client, "bob").status_code == 503  # the key lost: the sale to reload
    assert buy_after_holdoff(client, "carl").status_code == 201
    assert _books(app) == (9, 9, 1, True)
