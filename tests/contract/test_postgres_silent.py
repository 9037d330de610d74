"""PostgreSQL that stops answering without failing (a database of our own, dropped at
the end): a server that says nothing held ``/healthz`` until its caller gave up, and an
order write stuck behind another transaction's lock held its buyer for as long as the
lock was held (a PostgreSQL audit). Both are bounded now, and the unit goes back."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.contract.shop import served_shop
from tests.contract.silentproxy import SilentProxy
from tests.contract.wire import assert_error
from tests.support import PG_ADMIN_URL, scratch_postgres
from webapp.db import PG_STATEMENT_TIMEOUT_MS, connect_args
from webapp.gunicorn_conf import RETRY_LATER_EVERY_S
from webapp.orders import SETTLE_LOCK_WAIT_S
from webapp.writedeadline import ORDER_WRITE_S, SLACK_S

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[object, str, str]]:
    with scratch_postgres("seckill_silent") as found:
        yield found


def test_healthz_names_a_database_that_stopped_answering(database):
    _, _, url = database
    port = urlsplit(PG_ADMIN_URL).port or 5432
    with SilentProxy(port) as proxy:
        proxied = url.replace(f":{port}/", f":{proxy.port}/")
        assert proxied != url
        with served_shop(["qa-pg-silent"], database_url=proxied, workers=1) as shop:
            assert shop.call("GET", "/healthz").status == 200
            proxy.silent.set()
            try:
                started = time.monotonic()
                body = assert_error(shop.call("GET", "/healthz", timeout=20), 503)
                waited = time.monotonic() - started
            finally:
                proxy.silent.clear()
            assert body["database"].startswith("down: no answer") and body["redis"] == "ok"
            assert waited < 10, waited  # its own limit is 2 s; the caller's was 20
            deadline = time.monotonic() + 30
            while shop.call("GET", "/healthz").status != 200:
                assert time.monotonic() < deadline, "the shop did not recover"
                time.sleep(0.2)


def test_an_order_write_stuck_behind_a_lock_is_cancelled_and_its_unit_returned(database):
    import psycopg

    _, _, url = database
    sku = "qa-pg-locked"
    with served_shop([sku], database_url=url, workers=1) as shop:
        shop.reset(sku, 3, "token")
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as holder:
            holder.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            answer = shop.buy("stuck", sku)  # before: waited until the lock went (never)
            waited = time.monotonic() - started
            holder.rollback()
        assert_error(answer, 503, "busy")
        assert waited >= PG_STATEMENT_TIMEOUT_MS / 1000 * 0.9, waited  # it did wait on it
        # The write ran out of time as the lock (10 s each) ran out: its unit goes back
        # under the lock, at the worker's next drain (orders.give_back_under_lock), not
        # over a holder that may have read the stock since. No purchase needed for it.
        deadline = time.monotonic() + RETRY_LATER_EVERY_S + SETTLE_LOCK_WAIT_S + 2
        while (audit := shop.audit(sku))["remaining"] != 3:
            assert time.monotonic() < deadline, audit
            time.sleep(0.2)
        audit = shop.assert_books_balance(sku)
        assert audit["remaining"] == 3 and audit["units_sold"] == 0, audit
        assert shop.buy("stuck", sku).status == 201  # nothing of the first attempt stayed


@pytest.mark.parametrize("strategy", ["atomic", "sql"])
def test_buyers_of_two_workers_behind_a_held_lock_hear_within_the_order_write_budget(
        database, strategy):
    """Buyers arriving all along behind ``LOCK TABLE orders`` (22 s), on two workers:
    each hears within the order write's budget (``ORDER_WRITE_S``), 503 with its unit
    back or 201 once the lock goes. Before, ``statement_timeout`` bounded a statement,
    not the write: one worker's UPDATE waited 10 s on the other's row lock, then its
    INSERT 10 s on the table, and the buyers queued behind them longer still: waits of
    26-30 s, a 201 after 29.6 s, where 10 s were promised (a PostgreSQL audit)."""
    import psycopg

    _, _, url = database
    sku = f"qa-pg-held-{strategy}"
    with served_shop([sku], database_url=url, workers=2) as shop:
        shop.reset(sku, 100, strategy)
        waits: dict[str, tuple[int, float, str]] = {}

        def buyer(user: str, after_s: float) -> None:
            time.sleep(after_s)
            started = time.monotonic()
            answer = shop.call("POST", f"/api/products/{sku}/purchase", {"user_id": user},
                               timeout=60)
            waits[user] = (answer.status, time.monotonic() - started,
                           (answer.json or {}).get("error", ""))

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as holder:
            holder.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
            buyers = [threading.Thread(target=buyer, args=(f"held-{n}", n * 0.5))
                      for n in range(40)]  # one every half second for 20 s
            for thread in buyers:
                thread.start()
            time.sleep(22)
            holder.rollback()
        for thread in buyers:
            thread.join(70)
        assert len(waits) == 40
        longest = max(wait for _, wait, _ in waits.values())
        assert longest <= ORDER_WRITE_S + SLACK_S + 3, sorted(waits.values(),
                                                              key=lambda w: -w[1])[:5]
        assert {(status, error) for status, _, error in waits.values()} <= {
            (201, ""), (503, "busy")}, waits
        audit = shop.assert_books_balance(sku)
        assert audit["orders"] == sum(status == 201 for status, _, _ in waits.values())


def test_the_shops_connections_carry_the_timeouts_unless_the_url_sets_its_own():
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/x"
    serving = connect_args(url, serving=True)
    assert f"statement_timeout={PG_STATEMENT_TIMEOUT_MS}" in serving["options"]
    assert serving["tcp_user_timeout"] > 0 and serving["keepalives"] == 1
    assert "options" not in connect_args(url)  # migrations may run long
    own = connect_args(url + "?options=-c%20statement_timeout%3D0&tcp_user_timeout=1000",
                       serving=True)
    assert "options" not in own and "tcp_user_timeout" not in own
    assert connect_args("sqlite:///x.db", serving=True) == {}


@pytest.mark.parametrize(("query", "inside"), [
    ("", "10s"),  # the shop's own 10 s: already the budget, no SET sent
    ("?options=-c%20statement_timeout%3D2000", "2s"),  # the URL's own, lower: kept
], ids=["shop-options", "url-timeout-2s"])
def test_a_bounded_write_never_raises_the_statement_timeout_in_force(database, query, inside):
    """A URL with ``options=`` of its own was taken as "timeout unknown": every write
    sent ``SET LOCAL statement_timeout`` with the time left, 10 s over the URL's 2 s (a
    review)."""
    import time as clock

    from sqlalchemy import text

    from webapp.extensions import make_engine
    from webapp.writedeadline import ORDER_WRITE_S, bounded

    _, _, url = database
    engine = make_engine(url + query)
    try:
        with engine.begin() as connection:
            bounded(connection, clock.monotonic() + ORDER_WRITE_S)
            assert connection.execute(text("SHOW statement_timeout")).scalar() == inside
    finally:
        engine.dispose()


def test_a_url_that_lifts_the_timeout_still_has_its_writes_bounded(database):
    from sqlalchemy import text

    from webapp.extensions import make_engine
    from webapp.writedeadline import ORDER_WRITE_S, bounded, timeout_ms

    _, _, url = database
    engine = make_engine(url + "?options=-c%20search_path%3Dpublic")  # no timeout: 0
    try:
        with engine.begin() as connection:
            bounded(connection, time.monotonic() + ORDER_WRITE_S)
            shown = connection.execute(text("SHOW statement_timeout")).scalar()
            assert 0 < (timeout_ms(shown) or 0) <= ORDER_WRITE_S * 1000, shown
    finally:
        engine.dispose()
    assert [timeout_ms(t) for t in ("0", "2s", "1500ms", "1min")] == [None, 2000, 1500, 60_000]


@contextlib.contextmanager
def _behind_a_proxy(database, sku: str) -> Iterator[tuple[SilentProxy, Any]]:
    """A one-worker shop selling ``sku`` whose database is reached through a
    ``SilentProxy`` (``_proxied``): the proxy and the shop."""
    _, _, url = database
    with SilentProxy(urlsplit(PG_ADMIN_URL).port or 5432) as proxy, \
            served_shop([sku], database_url=_proxied(url, proxy), workers=1) as shop:
        yield proxy, shop


def _while_silent(proxy: SilentProxy, threads: list[threading.Thread],
                  answers: dict[str, Any], most_s: float) -> None:
    """Run ``threads`` (each puts its answer into ``answers``) with the database silent
    until all have answered or ``most_s`` passed, then let it speak and join them."""
    proxy.silent.set()
    for thread in threads:
        thread.start()
    silent_until = time.monotonic() + most_s
    while len(answers) < len(threads) and time.monotonic() < silent_until:
        time.sleep(0.1)
    proxy.silent.clear()
    for thread in threads:
        thread.join(60)
    assert len(answers) == len(threads), answers


def _proxied(url: str, proxy: SilentProxy) -> str:
    port = urlsplit(PG_ADMIN_URL).port or 5432
    proxied = url.replace(f":{port}/", f":{proxy.port}/")
    assert proxied != url
    return proxied + "?sslmode=disable"  # the proxy reads the COMMIT on the wire


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_buyers_hear_within_the_write_budget_from_a_database_that_says_nothing(
        database, strategy):
    """A database that stops answering with its network up (a frozen backend, a pooler
    queueing its clients: the kernel acknowledges what the shop sends, so neither
    ``tcp_user_timeout`` nor the keepalives fire) held every buyer for as long as it
    said nothing: 41 s for 40 s of silence (a PostgreSQL audit), past the write's budget,
    the page's "no answer" and nginx's 45 s. ``statement_timeout`` is the server's, and
    a silent server enforces nothing. Now the worker gives the write up itself."""
    from webapp.shop import ORDER_WRITE_WORST_S

    sku = f"qa-pg-mute-{strategy}"
    with _behind_a_proxy(database, sku) as (proxy, shop):
        shop.reset(sku, 10, strategy)
        assert shop.buy("before", sku).status == 201  # a pooled connection to reuse
        waits: dict[str, tuple[int, float, str]] = {}

        def buyer(user: str) -> None:
            started = time.monotonic()
            answer = shop.call("POST", f"/api/products/{sku}/purchase",
                               {"user_id": user}, timeout=60)
            waits[user] = (answer.status, time.monotonic() - started,
                           (answer.json or {}).get("error", ""))

        buyers = [threading.Thread(target=buyer, args=(f"mute-{n}",)) for n in range(4)]
        _while_silent(proxy, buyers, waits, 20)
        longest = max(wait for _, wait, _ in waits.values())
        assert longest <= ORDER_WRITE_WORST_S + 1.5, waits
        assert {(status, error) for status, _, error in waits.values()} == {
            (503, "busy")}, waits
        deadline = time.monotonic() + 20  # a write in doubt is settled once it answers
        while not shop.audit(sku)["consistent"] and time.monotonic() < deadline:
            time.sleep(0.5)
        audit = shop.assert_books_balance(sku)
        assert audit["orders"] == 1, audit


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_a_commit_stuck_past_its_deadline_is_settled_by_what_it_did_not_by_a_guess(
        database, strategy):
    """One backend stuck in a COMMIT (held here by the proxy; a frozen backend process
    in life) while the database answers everyone else: the buyer waited for as long as
    it stayed stuck. Given up on at its deadline, the write is in doubt, and its row
    must not be looked for in a snapshot taken while its transaction is still open: that
    said "not written", the unit went back, and the COMMIT landed after (one unit sold
    twice). The look waits for the write's lock on the sale row, so the units stay taken
    until the transaction has ended either way."""
    from webapp.shop import ORDER_WRITE_WORST_S

    sku = f"qa-pg-stuck-{strategy}"
    with _behind_a_proxy(database, sku) as (proxy, shop):
        shop.reset(sku, 5, strategy)
        proxy.hold_commit.set()
        threading.Timer(20, proxy.release.set).start()  # (before the fix: the answer)
        started = time.monotonic()
        answer = shop.call("POST", f"/api/products/{sku}/purchase",
                           {"user_id": "stuck"}, timeout=60)
        waited = time.monotonic() - started
        assert proxy.holding.is_set()
        assert waited <= ORDER_WRITE_WORST_S + 1.5, (waited, answer.status)
        assert_error(answer, 503, "busy")
        time.sleep(3)  # settles tried meanwhile: the transaction is still open
        assert not proxy.release.is_set()
        assert shop.audit(sku)["remaining"] == 4  # its unit stays taken: unknown yet
        proxy.release.set()  # the COMMIT goes on and commits
        deadline = time.monotonic() + 20
        while not shop.audit(sku)["consistent"] and time.monotonic() < deadline:
            time.sleep(0.5)
        audit = shop.assert_books_balance(sku)
        assert (audit["orders"], audit["remaining"]) == (1, 4), audit
        buyers = shop.call("GET", f"/api/admin/sales/{sku}/buyers",
                           headers={"Authorization": f"Bearer {shop.admin_token}"})
        assert buyers.json["buyers"] == ["stuck"]


def test_keyed_purchases_and_product_views_are_bounded_while_the_database_is_silent(
        database):
    """A buyer's Idempotency-Key is looked up in the database before the write, and the
    product views read it too: neither was bounded, and on a silent database (a paused
    proxy) keyed purchases (every storefront purchase) and product views waited out the
    whole 45 s silence (a PostgreSQL audit). Each read has ``commits.READ_S`` now."""
    from webapp.commits import READ_S
    from webapp.shop import ORDER_WRITE_WORST_S

    sku = "qa-pg-mute-reads"
    with _behind_a_proxy(database, sku) as (proxy, shop):
        shop.reset(sku, 10, "atomic")
        assert shop.buy("before", sku, key="key-before").status == 201  # pooled
        assert shop.call("GET", "/api/products").status == 200
        answers: dict[str, tuple[int, float]] = {}

        def ask(name: str, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> None:
            started = time.monotonic()
            answer = shop.call(method, path, body, headers=headers or {}, timeout=60)
            answers[name] = (answer.status, time.monotonic() - started)

        askers = [
            threading.Thread(target=ask, args=(
                f"keyed-{n}", "POST", f"/api/products/{sku}/purchase",
                {"user_id": f"keyed-{n}"}, {"Idempotency-Key": f"key-{n}"}))
            for n in range(2)] + [
            threading.Thread(target=ask, args=("products", "GET", "/api/products")),
            threading.Thread(target=ask, args=("product", "GET", f"/api/products/{sku}"))]
        _while_silent(proxy, askers, answers, 30)
        longest = max(wait for _, wait in answers.values())
        assert longest <= max(ORDER_WRITE_WORST_S, READ_S) + 2, answers
        deadline = time.monotonic() + 20
        while not shop.audit(sku)["consistent"] and time.monotonic() < deadline:
            time.sleep(0.5)
        shop.assert_books_balance(sku)
