"""The database misbehaving under a purchase (a helper's audit with a proxy that drops
connections mid-COMMIT, a read-only database, a CHECK constraint and a trigger).

* A COMMIT that landed but whose reply was lost: the purchase gave its units back and
  answered 503, and the sale later sold them again (49 oversold). Now the row is looked
  for first; if the database cannot tell, the units stay taken until it can.
* A row refused by a trigger or a CHECK: the buyer heard 409 already_purchased with no
  order, and stayed locked out after the fault was gone. Now 503, and a retry buys.
* A read-only database: 500 internal_error for every purchase, and /healthz said ok.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from tests.support import scratch_postgres
from webapp import db, groupcommit, orders, sales
from webapp.commits import CommitLost, committing
from webapp.extensions import READ_ONLY_RENEW_S
from webapp.keys import SaleKeys
from webapp.problems import AlreadyPurchased, Busy, OrderInDoubt
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


def lost_reply() -> OperationalError:
    """What ``commits.committing`` raises when PostgreSQL's reply to a COMMIT is lost
    (SQLite, which these tests run on, commits in-process and never loses one)."""
    return CommitLost("COMMIT", {}, Exception("server closed the connection"))


def books(deps: Checkout) -> tuple[object, ...]:
    audit = sales.audit(deps.sessions, deps.redis, SKU)
    return (audit["orders"], audit["remaining"], audit["database_remaining"],
            audit["consistent"])


@pytest.fixture(autouse=True)
def nothing_in_doubt() -> Iterator[None]:
    orders.IN_DOUBT.waiting.clear()
    orders.IN_DOUBT.next_drain = 0.0
    yield
    orders.IN_DOUBT.waiting.clear()
    orders.IN_DOUBT.next_drain = 0.0


def commit_then_lose_the_reply(monkeypatch: pytest.MonkeyPatch, *, commits: bool,
                               writer: Any = groupcommit.OrderWriter) -> None:
    """``writer``'s transactions (committed, or not) end with their COMMIT's reply lost."""
    real = writer._transaction

    def lossy(self: Any, batch: Any) -> Any:
        if commits:
            real(self, batch)
        raise lost_reply()

    monkeypatch.setattr(writer, "_transaction", lossy)


def database_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*args: Any, **kwargs: Any) -> Any:
        raise lost_reply()

    monkeypatch.setattr(orders, "_written_rows", down)


def settle_now() -> None:
    orders.IN_DOUBT.next_drain = 0.0
    orders.IN_DOUBT.drain()


def test_a_committed_order_whose_reply_was_lost_is_the_buyers_order(deps, monkeypatch):
    commit_then_lose_the_reply(monkeypatch, commits=True)
    result = checkout(deps, PurchaseRequest(SKU, "ann"))
    assert result.created and result.order.user_id == "ann" and result.order.id
    assert books(deps) == (1, 49, 49, True)  # before: 503, and Redis 50 beside 49


def test_a_lost_reply_the_database_cannot_explain_keeps_the_units_until_it_can(
        deps, monkeypatch):
    commit_then_lose_the_reply(monkeypatch, commits=True)
    database_cannot_tell(monkeypatch)
    with pytest.raises(OrderInDoubt) as raised:
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert raised.value.status == 503
    assert books(deps) == (1, 49, 49, True)  # not given back: it was written
    monkeypatch.undo()
    settle_now()
    assert not orders.IN_DOUBT
    assert books(deps) == (1, 49, 49, True)
    with pytest.raises(AlreadyPurchased):  # it is her order
        checkout(deps, PurchaseRequest(SKU, "ann"))


def test_an_order_in_doubt_that_was_not_written_gives_its_units_back_once_known(
        deps, monkeypatch):
    commit_then_lose_the_reply(monkeypatch, commits=False)
    database_cannot_tell(monkeypatch)
    with pytest.raises(OrderInDoubt):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert books(deps)[:3] == (0, 49, 50)  # taken, in doubt
    settle_now()  # the database still cannot tell: it stays in doubt
    assert orders.IN_DOUBT and books(deps)[:3] == (0, 49, 50)
    monkeypatch.undo()
    settle_now()
    assert not orders.IN_DOUBT
    assert books(deps) == (0, 50, 50, True)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created  # her reservation went
    assert books(deps) == (1, 49, 49, True)


def test_a_lost_reply_of_an_order_never_written_still_gives_the_units_back(
        deps, monkeypatch):
    commit_then_lose_the_reply(monkeypatch, commits=False)
    with pytest.raises(OperationalError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert books(deps) == (0, 50, 50, True)


def test_a_row_refused_by_a_trigger_is_not_already_purchased_and_a_retry_buys(deps):
    engine = deps.sessions.kw["bind"]
    with engine.begin() as connection:
        connection.execute(text(
            "CREATE TRIGGER no_bad_buyers BEFORE INSERT ON orders "
            "WHEN NEW.user_id LIKE 'bad-%' BEGIN SELECT RAISE(ABORT, 'bad buyer'); END"))
    with pytest.raises(Busy) as raised:
        checkout(deps, PurchaseRequest(SKU, "bad-1"))
    assert not isinstance(raised.value, AlreadyPurchased) and raised.value.status == 503
    assert books(deps) == (0, 50, 50, True)
    with engine.begin() as connection:
        connection.execute(text("DROP TRIGGER no_bad_buyers"))
    assert checkout(deps, PurchaseRequest(SKU, "bad-1")).created  # not locked out
    assert books(deps) == (1, 49, 49, True)


@pytest.fixture
def refusing_postgres(redis_url: str) -> Iterator[tuple[Any, str, str]]:
    """A shop on a PostgreSQL database of its own, with a trigger refusing 'bad-' buyers."""
    with scratch_postgres("seckill_faults") as (admin, name, url):
        db.upgrade(url)
        from sqlalchemy import create_engine

        engine = create_engine(url)
        with engine.begin() as connection:
            connection.execute(text(
                "CREATE FUNCTION refuse_bad() RETURNS trigger AS $$ BEGIN "
                "IF NEW.user_id LIKE 'bad-%' THEN RAISE EXCEPTION 'bad buyer'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"))
            connection.execute(text(
                "CREATE TRIGGER no_bad_buyers BEFORE INSERT ON orders "
                "FOR EACH ROW EXECUTE FUNCTION refuse_bad()"))
        engine.dispose()
        yield admin, name, url


@pytest.mark.postgres
def test_one_refused_row_in_a_group_commit_is_not_the_other_buyers(refusing_postgres):
    # a trigger's error (ProgrammingError) failed every order of the batch: 500s
    from sqlalchemy.orm import sessionmaker

    from webapp.extensions import make_engine
    from webapp.models import PlacedOrder

    _, _, url = refusing_postgres
    engine = make_engine(url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        sales.create_product(sessions, SKU, "Lamp", 1_000, stock=5, strategy="atomic")
        from webapp.services import load_sale

        sale = load_sale(sessions, SKU)
        writes = [(*orders.new_order(sale, user, 1, None, None), None)
                  for user in ("ok-1", "bad-1", "ok-2")]
        done = groupcommit.OrderWriter(sessions).write_now(writes)
        assert [type(p.result).__name__ if p.error is None else "error" for p in done] == \
            ["PlacedOrder", "error", "PlacedOrder"]
        assert all(isinstance(p.result, PlacedOrder) for p in (done[0], done[2]))
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_read_only_database_is_503_and_healthz_says_so(refusing_postgres, redis_url):
    from tests.webapp.conftest import make_app

    admin, name, url = refusing_postgres
    app = make_app(url, redis_url)
    b = app.extensions["seckill"]
    try:
        sales.create_product(b.sessions, SKU, "Lamp", 1_000, stock=5, strategy="atomic")
        sales.reset_sale(b.sessions, b.redis, SKU, stock=5, strategy="atomic")
        client = app.test_client()
        assert client.get("/healthz").status_code == 200
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        b.engine.dispose()  # new sessions take the setting
        health = client.get("/healthz")
        assert health.status_code == 503 and health.get_json()["database"] == "down: read-only"
        bought = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"})
        assert bought.status_code == 503, bought.get_json()  # it was 500 internal_error
        assert bought.get_json()["error"] == "busy" and bought.headers["Retry-After"]
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
        # no dispose: the pooled connections kept the setting they opened with, and the
        # shop stayed read-only until they went (a PostgreSQL audit: 80 s and more);
        # now the pool is renewed, at most once a second
        deadline = time.monotonic() + 3 * READ_ONLY_RENEW_S
        while client.get("/healthz").status_code != 200:
            assert time.monotonic() < deadline, "still read-only"
            time.sleep(0.1)
        assert client.post(f"/api/products/{SKU}/purchase",
                           json={"user_id": "ann"}).status_code == 201
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
        assert audit["consistent"] and audit["orders"] == 1
    finally:
        b.close()


def test_an_sql_order_whose_reply_was_lost_is_the_buyers_order(deps, monkeypatch):
    # the sql path answered 503 "nothing was bought" for an order it had written
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=50, strategy="sql")
    real = groupcommit.ConditionalOrderWriter._transaction

    def lossy(self: Any, batch: Any) -> Any:
        real(self, batch)
        raise lost_reply()

    monkeypatch.setattr(groupcommit.ConditionalOrderWriter, "_transaction", lossy)
    result = checkout(deps, PurchaseRequest(SKU, "ann"))
    assert result.created and result.order.user_id == "ann"
    assert books(deps) == (1, 49, 49, True)


@pytest.mark.parametrize("written", [True, False], ids=["written", "not-written"])
def test_an_sql_order_the_database_cannot_explain_is_in_doubt_and_settled(deps, monkeypatch,
                                                                          written):
    """Its reply lost and the database unable to say whether the row is there: the sql
    path answered a plain 503 "the database is unavailable, try again", while the row
    was there; the buyer, retrying, heard 409 sold_out and never learned of the order (a
    PostgreSQL audit: 4 of ~300 under a flapping link). Now it is in doubt: 503 saying
    so, the buyer kept reserved, and settled once the database can tell."""
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=50, strategy="sql")
    commit_then_lose_the_reply(monkeypatch, commits=written,
                               writer=groupcommit.ConditionalOrderWriter)
    database_cannot_tell(monkeypatch)
    with pytest.raises(OrderInDoubt):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert orders.IN_DOUBT
    buyers = SaleKeys(SKU).buyers
    assert deps.redis.sismember(buyers, "ann")  # kept reserved while in doubt
    monkeypatch.undo()
    settle_now()
    assert not orders.IN_DOUBT
    assert bool(deps.redis.sismember(buyers, "ann")) is written  # a review
    if written:
        assert books(deps) == (1, 49, 49, True)
        with pytest.raises(AlreadyPurchased):  # it is her order, and she hears so
            checkout(deps, PurchaseRequest(SKU, "ann"))
    else:  # nothing taken, nothing given back; her reservation went: she buys
        assert books(deps) == (0, 50, 50, True)
        assert checkout(deps, PurchaseRequest(SKU, "ann")).created
        assert books(deps) == (1, 49, 49, True)


def test_a_row_a_lost_batch_refused_is_told_nothing_was_written(deps, monkeypatch):
    """Two ``sql`` orders in one batch for the last unit, the COMMIT's reply lost: the
    second was refused inside the batch (no stock, never inserted), and was told the
    batch's error, "may or may not have been written" when the database could not tell,
    its buyer kept reserved until the settle (a review). Not its "sold out" either: the
    unit the first took may be back, if that COMMIT did not go through."""
    from webapp.orders import maybe_written
    from webapp.services import load_sale

    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=1, strategy="sql")
    commit_then_lose_the_reply(monkeypatch, commits=True,
                               writer=groupcommit.ConditionalOrderWriter)
    sale = load_sale(deps.sessions, SKU)
    writes = [(*orders.new_order(sale, user, 1, None, None), sale.generation)
              for user in ("ann", "bob")]
    done = groupcommit.ConditionalOrderWriter(deps.sessions).write_now(writes)
    assert isinstance(done[0].error, CommitLost), done[0].error  # ann's: may be written
    assert isinstance(done[1].error, OperationalError) and not maybe_written(done[1].error)


@pytest.mark.parametrize("database_answers", [True, False], ids=["found", "in-doubt"])
def test_a_combined_sections_lost_reply_keeps_its_written_orders(
        deps, monkeypatch, database_answers):
    # a lock holder writing its combined batch: every order failed and every unit went back
    from webapp import sectionorders
    from webapp.services import load_sale

    sale = load_sale(deps.sessions, SKU)
    deps.redis.decrby(sale.keys.stock, 2)  # the section took their units
    commit_then_lose_the_reply(monkeypatch, commits=True)
    if not database_answers:
        database_cannot_tell(monkeypatch)
    wanted = [("ann", 1, None, None), ("bo", 1, None, None)]
    outcomes = sectionorders.write_batch(deps.sessions, sale, wanted, deps.redis)
    sectionorders.give_back_failed(deps.redis, sale, wanted, outcomes)
    if database_answers:
        assert [o.user_id for o in outcomes] == ["ann", "bo"]
    else:
        assert all(isinstance(o, OrderInDoubt) for o in outcomes)
    assert books(deps) == (2, 48, 48, True)  # before: Redis 50 beside 2 orders


class _Begin:
    """A ``begin()`` context whose COMMIT fails as ``failure`` says."""

    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure
        self.exited_with: object = "not yet"

    def __enter__(self) -> str:
        return "connection"

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        self.exited_with = kind
        if kind is None and self.failure is not None:
            raise self.failure


def test_only_a_lost_commit_to_a_remote_database_is_in_doubt():
    dropped = OperationalError("COMMIT", {}, Exception("server closed the connection"))
    with pytest.raises(CommitLost):
        with committing(_Begin(dropped), remote=True):
            pass
    with pytest.raises(OperationalError) as raised:  # SQLite: its COMMIT did not happen
        with committing(_Begin(dropped), remote=False):
            pass
    assert not isinstance(raised.value, CommitLost)
    begin = _Begin(None)
    with pytest.raises(OperationalError) as raised:  # a statement's: rolled back
        with committing(begin, remote=True):
            raise dropped
    assert not isinstance(raised.value, CommitLost) and begin.exited_with is OperationalError
    with committing(_Begin(None), remote=True) as connection:
        assert connection == "connection"


class CommitDroppingProxy:
    """A TCP proxy to PostgreSQL that, once armed, forwards the next COMMIT and drops
    that connection instead of passing the server's reply back."""

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self.sockets: list[Any] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            cut = threading.Event()  # this connection's replies are no longer passed on
            for source, sink, from_client in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(source, sink, from_client, cut),
                                 daemon=True).start()

    def _pipe(self, source: Any, sink: Any, from_client: bool, cut: Any) -> None:
        import time

        try:
            while data := source.recv(65536):
                if from_client and b"COMMIT\x00" in data and self.armed.is_set():
                    self.armed.clear()
                    cut.set()  # before the COMMIT goes: its reply must not come back
                    self.dropped.set()
                    sink.sendall(data)
                    time.sleep(0.3)  # the server commits, answers; the answer goes nowhere
                    return
                if cut.is_set():
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


@pytest.mark.postgres
@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_a_commit_whose_reply_postgresql_never_sent_back_is_not_sold_twice(
        redis_url, strategy):
    # end to end on psycopg: the COMMIT lands, the connection drops before its reply
    from sqlalchemy.engine import make_url

    from tests.webapp.conftest import make_app

    with scratch_postgres("seckill_lost_commit") as (_, _, url):
        db.upgrade(url)
        parsed = make_url(url)
        proxy = CommitDroppingProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
        through = parsed.set(host="127.0.0.1", port=proxy.port).update_query_dict(
            {"sslmode": "disable"})  # the proxy reads the COMMIT on the wire
        app = make_app(through.render_as_string(hide_password=False), redis_url)
        b = app.extensions["seckill"]
        try:
            sales.create_product(b.sessions, SKU, "Lamp", 1_000, stock=3, strategy=strategy)
            sales.reset_sale(b.sessions, b.redis, SKU, stock=3, strategy=strategy)
            client = app.test_client()
            proxy.armed.set()
            first = client.post(f"/api/products/{SKU}/purchase", json={"user_id": "ann"})
            assert proxy.dropped.is_set()
            assert first.status_code == 201, first.get_json()  # it was 503: "not bought"
            for user in ("bo", "cy", "di"):
                client.post(f"/api/products/{SKU}/purchase", json={"user_id": user})
            audit = client.get(f"/api/sales/{SKU}/audit").get_json()
            assert (audit["orders"], audit["oversold"], audit["consistent"]) == (3, 0, True), \
                audit
        finally:
            b.close()
            proxy.close()


class SremFailsOnce:
    """The shop's client, whose first SREM loses its connection."""

    def __init__(self, real: Any) -> None:
        self.real, self.failed = real, False

    def srem(self, *args: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise redis.ConnectionError("Connection reset by peer")
        return self.real.srem(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_settle_tried_again_gives_the_units_back_once(deps, monkeypatch):
    # the review's finding: the units went back, the SREM after failed, the entry was
    # tried again, and the units went back again (Redis 51 beside 50)
    import dataclasses

    commit_then_lose_the_reply(monkeypatch, commits=False)
    database_cannot_tell(monkeypatch)
    with pytest.raises(OrderInDoubt):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    monkeypatch.undo()
    entry = orders.IN_DOUBT.waiting[0]
    orders.IN_DOUBT.waiting[0] = dataclasses.replace(entry, redis=SremFailsOnce(entry.redis))
    settle_now()  # units back; the SREM fails: tried again
    assert orders.IN_DOUBT and books(deps) == (0, 50, 50, True)
    settle_now()
    assert not orders.IN_DOUBT and books(deps) == (0, 50, 50, True)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created


def a_token_sale_order_in_doubt(sessions: Any, redis_client: Any, monkeypatch: Any
                                ) -> Checkout:
    """A ``token`` sale of 50 whose purchase by ann left its order in doubt: no COMMIT
    landed, its reply was lost, and the database could not tell."""
    import lockcore

    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=50, strategy="token")
    sales.reset_sale(sessions, redis_client, SKU, stock=50, strategy="token")

    def lock_for(sale: Any, user: str) -> Any:
        return lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=5_000)

    deps = Checkout(sessions=sessions, redis=redis_client, lock_for=lock_for,
                    sleep=lambda seconds: None)

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise lost_reply()

    monkeypatch.setattr(orders, "insert_order", lost)
    monkeypatch.setattr(orders, "_written_rows", lost)
    with pytest.raises(OrderInDoubt):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    monkeypatch.undo()
    return deps


def test_a_lock_sales_order_in_doubt_gives_its_units_back_under_the_sales_lock(
        sessions, redis_client, monkeypatch):
    # a holder's GET ... SET of the stock overwrote a give-back made outside the lock
    deps = a_token_sale_order_in_doubt(sessions, redis_client, monkeypatch)
    monkeypatch.setattr(orders, "SETTLE_LOCK_WAIT_S", 0.2)
    holder = deps.lock_for(None, "bob")
    assert holder.acquire(timeout=1)  # a section in progress
    settle_now()
    assert orders.IN_DOUBT and books(deps)[:3] == (0, 49, 50)  # waits for the lock
    holder.release()
    settle_now()
    assert not orders.IN_DOUBT and books(deps) == (0, 50, 50, True)


def test_a_worker_drains_its_undos_without_a_purchase_to_do_it():
    # the queues were drained only by the worker's next purchases: one no buyer reached
    # any more kept a unit taken and a buyer locked out
    import threading
    import time

    from webapp.retrylater import RetryLater, drain_every

    done: list[str] = []
    queue: RetryLater[str] = RetryLater(lambda entry: done.append(entry) is None,
                                        every_s=0.0)
    queue.add("undo")
    stop = threading.Event()
    thread = drain_every(0.05, stop)
    try:
        deadline = time.monotonic() + 5
        while not done and time.monotonic() < deadline:
            time.sleep(0.02)
        assert done == ["undo"] and not queue
    finally:
        stop.set()
        thread.join(5)


@pytest.mark.postgres
def test_the_shops_transactions_read_committed_whatever_the_databases_default():
    """Every order write of a sale updates its one ``sales`` row; under READ COMMITTED
    the second of two at once waits and updates the row the first committed. On a
    database whose DBA set ``default_transaction_isolation`` to ``repeatable read`` (or
    serializable) the second failed "could not serialize access": a 300-buyer ``sql``
    sale answered 115 of them 503 and left 15 units unsold, ``atomic`` 54 (a PostgreSQL
    audit). The shop's engine asks for READ COMMITTED itself."""
    import threading

    from webapp.extensions import make_engine

    with scratch_postgres("seckill_isolation") as (admin, name, url):
        db.upgrade(url)
        admin.execute(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = "
                      "'repeatable read'")
        engine = make_engine(url)
        try:
            with engine.begin() as setup:
                setup.execute(text("INSERT INTO products VALUES ('s', 'S', 1, '')"))
                setup.execute(text(
                    "INSERT INTO sales (sku, initial_stock, remaining, strategy, work_ms, "
                    "per_user_limit, started_at) VALUES ('s', 2, 2, 'sql', 0, 1, now())"))
            take = text("UPDATE sales SET remaining = remaining - 1 WHERE sku = 's'")
            outcome: list[object] = []
            with engine.connect() as first, engine.connect() as second:
                first.execute(take)  # holds the row
                second.execute(text("SELECT 1"))  # its snapshot, before the first commits

                def then_take() -> None:
                    try:
                        second.execute(take)
                        second.commit()
                        outcome.append("took")
                    except Exception as exc:  # noqa: BLE001 - the failure asserted on
                        outcome.append(exc)

                waiter = threading.Thread(target=then_take)
                waiter.start()
                deadline = time.monotonic() + 10
                while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname "
                                    "= %s AND wait_event_type = 'Lock'",
                                    (name,)).fetchone()[0] == 0:
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
                first.commit()
                waiter.join(10)
            assert outcome == ["took"], outcome
            with engine.connect() as check:
                assert check.execute(text("SELECT remaining FROM sales")).scalar() == 0
        finally:
            engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize(("default", "kept"), [
    ("off", "on"),  # a 201 before the row is on disk: the shop's own turn it on
    ("remote_apply", "remote_apply"),  # stronger than the default: left alone
])
def test_the_shops_commits_are_durable_whatever_the_databases_default(default, kept):
    """With ``synchronous_commit = off`` set on the database (a common tuning), a
    PostgreSQL crash in the middle of a sale lost orders whose buyers had heard 201:
    19, 17 and 6 of them for ``atomic``, ``token`` and ``sql`` (a PostgreSQL audit), and
    the units they took stayed sold in Redis. The shop's connections commit durably;
    a setting stronger than the default is the database's to keep."""
    from webapp.extensions import make_engine

    with scratch_postgres("seckill_durable") as (admin, name, url):
        admin.execute(f"ALTER DATABASE \"{name}\" SET synchronous_commit = '{default}'")
        for given in (url, url + "?options=-csearch_path%3Dpublic"):
            engine = make_engine(given)
            try:
                with engine.begin() as connection:
                    shown = connection.execute(text("SHOW synchronous_commit")).scalar()
                assert shown == kept, (given, shown)
            finally:
                engine.dispose()
        engine = make_engine(url + "?options=-csynchronous_commit%3Doff")
        try:  # a URL that asks for it itself is taken at its word
            with engine.begin() as connection:
                assert connection.execute(text("SHOW synchronous_commit")).scalar() == "off"
        finally:
            engine.dispose()


@pytest.mark.postgres
def test_a_database_with_another_datestyle_is_served():
    """psycopg reads a ``timestamptz`` in the ISO style only: on a database whose
    ``DateStyle`` is ``SQL, DMY`` (or German, or Postgres) ``seckill serve`` could not
    start ("NotImplementedError: can't parse timestamptz with DateStyle 'SQL, DMY'"), and
    one changed under a running shop failed every read of a sale. The shop's connections
    ask for ISO output; the order dates are read in keeps the database's."""
    from webapp.extensions import make_engine

    with scratch_postgres("seckill_datestyle") as (admin, name, url):
        db.upgrade(url)
        admin.execute(f"ALTER DATABASE \"{name}\" SET DateStyle = 'SQL, DMY'")
        engine = make_engine(url)
        try:
            with engine.begin() as connection:
                assert connection.execute(text("SELECT now()")).scalar().tzinfo is not None
                assert connection.execute(text("SHOW DateStyle")).scalar() == "ISO, DMY"
        finally:
            engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_database_not_in_utf8_answers_every_buyer_and_keeps_the_books(
        encoding, redis_url):
    """The shop's connections spoke the database's own encoding. On SQL_ASCII psycopg
    handed text back as bytes and ``seckill serve`` could not start ("TypeError: cannot
    use a string pattern on a bytes-like object"); on LATIN1 a buyer named 小明 was a 500,
    psycopg failing to encode the name before sending it. They speak UTF-8 now: SQL_ASCII
    keeps the bytes as sent, LATIN1 refuses what it cannot hold (503, the unit back)."""
    from tests.webapp.conftest import make_app

    with scratch_postgres("seckill_encoding") as (admin, name, url):
        own = f"{name}_{encoding.lower()}"
        admin.execute(f"CREATE DATABASE \"{own}\" ENCODING '{encoding}' LC_COLLATE 'C' "
                      "LC_CTYPE 'C' TEMPLATE template0")
        try:
            url = url.rsplit("/", 1)[0] + f"/{own}"
            db.upgrade(url)
            app = make_app(url, redis_url)
            b = app.extensions["seckill"]
            try:
                sales.create_product(b.sessions, SKU, "Lamp", 1_000, stock=3,
                                     strategy="atomic")
                sales.reset_sale(b.sessions, b.redis, SKU, stock=3, strategy="atomic")
                client = app.test_client()
                answers = {user: client.post(f"/api/products/{SKU}/purchase",
                                             json={"user_id": user})
                           for user in ("josé", "小明")}
                assert answers["josé"].status_code == 201
                assert answers["josé"].get_json()["user_id"] == "josé"
                expected = 201 if encoding == "SQL_ASCII" else 503
                assert answers["小明"].status_code == expected, answers["小明"].get_json()
                audit = client.get(f"/api/sales/{SKU}/audit").get_json()
                assert audit["consistent"] and audit["orders"] == (
                    2 if encoding == "SQL_ASCII" else 1), audit
            finally:
                b.close()
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{own}" WITH (FORCE)')


def test_healthz_takes_an_error_raised_over_its_own_time_limit_for_no_answer():
    """SQLAlchemy, cleaning up the connection ``/healthz``'s time limit interrupted (its
    pre-ping, mid-query), raised ``ProgrammingError`` over it: the probe said "down:
    ProgrammingError" of a database that had said nothing (a PostgreSQL audit, and a
    fresh-clone run's ``test_healthz_names_a_database_that_stopped_answering``)."""
    from sqlalchemy.exc import ProgrammingError

    from webapp import api

    try:
        try:
            raise api._Silent()
        except api._Silent:
            raise ProgrammingError("ROLLBACK", {}, Exception("another command")) from None
    except ProgrammingError as raised:
        over_the_limit = raised
    assert api._silenced(over_the_limit)  # its context is the limit's, `from None` or not
    assert not api._silenced(ProgrammingError("SELECT 1", {}, Exception("refused")))
