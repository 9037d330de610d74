"""The script batch that takes ``atomic`` purchases' units also writes their order rows
(``takenorders.py``): one wait per purchase, and every answer still its own."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import func, select, update

from tests.webapp.heldbatch import run_behind_a_held_batch
from webapp import groupcommit, sales, scripts
from webapp.keys import SaleKeys
from webapp.models import Order, PlacedOrder, Sale
from webapp.pipelining import ScriptPipeline
from webapp.problems import AlreadyPurchased, SaleReset
from webapp.saleinfo import latest_sale
from webapp.services import Checkout, PurchaseRequest, checkout
from webapp.takenorders import TakenOrder, write_taken

SKU = "sku-1"
KEYS = SaleKeys(SKU)


@pytest.fixture
def piped(deps: Checkout) -> Checkout:
    """``deps`` (an ``atomic`` sale of 50) with the served shop's script pipeline, its
    script loaded (a NOSCRIPT caller runs its script alone and writes its own row)."""
    deps.redis.script_load(scripts.source("atomic_checkout"))
    deps.script_pipeline = ScriptPipeline(deps.redis, after=write_taken)
    return deps


def buy_concurrently(deps: Checkout, users: list[str], monkeypatch) -> dict[str, object]:
    """Each user buys in a thread; the first script batch waits until all have queued."""
    assert deps.script_pipeline is not None
    return run_behind_a_held_batch(
        monkeypatch, deps.script_pipeline, "_round_trip",
        lambda user: checkout(deps, PurchaseRequest(SKU, user)).order, users)


def orders_by_user(deps: Checkout) -> dict[str, int]:
    with deps.sessions() as session:
        return dict(session.execute(select(Order.user_id, Order.id)).all())  # type: ignore[arg-type]


def test_the_batch_that_took_the_units_writes_the_rows_and_each_buyer_gets_its_own(
        piped, monkeypatch):
    users = [f"user-{n}" for n in range(12)]
    answers = buy_concurrently(piped, users, monkeypatch)
    assert all(isinstance(answer, PlacedOrder) for answer in answers.values()), answers
    # every row came with its script's batch: the order writer's own queue never ran
    assert groupcommit.writer_for(piped.sessions).batches == 0
    assert {user: answer.id for user, answer in answers.items()} == orders_by_user(piped)  # type: ignore[union-attr]
    audit = sales.audit(piped.sessions, piped.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["database_remaining"]) == (12, 38, 38)
    assert audit["consistent"]


def test_a_duplicate_in_the_batch_gets_its_409_its_unit_back_and_the_rest_their_rows(
        piped, monkeypatch):
    assert checkout(piped, PurchaseRequest(SKU, "ann")).created
    piped.redis.srem(KEYS.buyers, "ann")  # her reservation forgotten, her row is not
    answers = buy_concurrently(piped, ["bob", "ann", "cy", "dee"], monkeypatch)
    assert isinstance(answers["ann"], AlreadyPurchased)
    assert all(isinstance(answers[user], PlacedOrder) for user in ("bob", "cy", "dee"))
    audit = sales.audit(piped.sessions, piped.redis, SKU)
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (4, 46, True)
    assert piped.redis.sismember(KEYS.buyers, "ann")  # she did buy


def test_a_row_of_a_sale_reset_since_the_script_is_refused_and_its_unit_stays(piped):
    # the database moved to a new generation; Redis still hands out the old one's units
    with piped.sessions.begin() as session:
        session.execute(update(Sale).values(started_at=datetime(2030, 1, 1, tzinfo=UTC)))
    with pytest.raises(SaleReset):
        checkout(piped, PurchaseRequest(SKU, "ann"))
    assert orders_by_user(piped) == {}  # nothing written into the new generation
    assert int(piped.redis.get(KEYS.stock)) == 49  # the old generation's: not given back


def test_a_sale_with_simulated_work_writes_its_rows_after_the_work(piped):
    sales.reset_sale(piped.sessions, piped.redis, SKU, stock=50, strategy="atomic", work_ms=1)
    slept: list[float] = []
    piped.sleep = slept.append
    assert checkout(piped, PurchaseRequest(SKU, "ann")).created
    assert slept == [0.001]  # the work ran, between the units taken and the row
    assert groupcommit.writer_for(piped.sessions).batches == 1  # written by the caller
    assert list(orders_by_user(piped)) == ["ann"]


def test_a_row_that_cannot_be_built_is_left_to_its_caller(piped):
    broken = TakenOrder(piped.sessions, SKU, "ann", 1)
    reply = [1, 49, [b"id", b"1", b"strategy", b"atomic"]]  # a hash copy missing fields
    fine = TakenOrder(piped.sessions, SKU, "bob", 1)
    good_reply = [1, 48, [b"id", b"1", b"strategy", b"atomic", b"work_ms", b"0",
                          b"per_user_limit", b"1", b"initial_stock", b"50"]]
    write_taken([(broken, reply), (fine, good_reply)])
    assert broken.written is None and broken.sale is None
    assert fine.written is not None and fine.written.outcome().user_id == "bob"
    with piped.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 1


def test_the_rows_of_one_batch_share_the_moment_their_units_were_taken(piped):
    owners = [TakenOrder(piped.sessions, SKU, user, 1) for user in ("ann", "bob", "cat")]
    reply = [1, 49, [b"id", b"1", b"strategy", b"atomic", b"work_ms", b"0",
                     b"per_user_limit", b"1", b"initial_stock", b"50"]]
    before = datetime.now(UTC)
    write_taken([(owner, reply) for owner in owners])
    after = datetime.now(UTC)
    times = {owner.written.outcome().created_at for owner in owners}  # type: ignore[union-attr]
    assert len(times) == 1 and before <= times.pop() <= after


def test_a_failing_after_leaves_every_buyer_to_write_its_own_row(piped, monkeypatch):
    def broken(follow):
        raise RuntimeError("a bug in the leader's work after the round trip")

    piped.script_pipeline = ScriptPipeline(piped.redis, after=broken)
    answers = buy_concurrently(piped, ["ann", "bob", "cy"], monkeypatch)
    assert all(isinstance(answer, PlacedOrder) for answer in answers.values()), answers
    assert sorted(orders_by_user(piped)) == ["ann", "bob", "cy"]
    assert groupcommit.writer_for(piped.sessions).items == 3  # each through the writer


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_reset_since_the_last_purchase_is_followed_though_the_process_knew_the_old_sale(
        deps, pipelined):
    """The second purchase sends the generation of the sale this process read first;
    the reset made another, so the script brings the new row back and the purchase
    follows it: the ``sql`` path, not the ``atomic`` one (``saleinfo.latest_sale``)."""
    if pipelined:
        deps.redis.script_load(scripts.source("atomic_checkout"))
        deps.script_pipeline = ScriptPipeline(deps.redis, after=write_taken)
    first = checkout(deps, PurchaseRequest(SKU, "ann")).order
    known = latest_sale(SKU)
    assert known is not None and known.strategy == "atomic"
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=5, strategy="sql")
    second = checkout(deps, PurchaseRequest(SKU, "bob")).order
    with deps.sessions() as session:
        rows = {row.user_id: (row.sale_id, row.strategy) for row in session.scalars(
            select(Order).where(Order.id.in_([first.id, second.id])))}
        sale_id = session.scalar(select(Sale.id).where(Sale.sku == SKU))
    assert rows == {"bob": (sale_id, "sql")}  # the reset deleted ann's order
    assert latest_sale(SKU).strategy == "sql"  # type: ignore[union-attr]
    # and once known, the same sale's row no longer travels: the next reply is lean
    assert checkout(deps, PurchaseRequest(SKU, "cy")).created


def test_a_purchase_of_the_known_generation_uses_the_known_sale(piped, monkeypatch):
    """The reply without the row: the buyer's order is written from the sale this
    process parsed before, by the batch that took its units."""
    assert checkout(piped, PurchaseRequest(SKU, "ann")).created  # parsed and kept
    replies: list[object] = []
    real = piped.script_pipeline._round_trip  # type: ignore[union-attr]

    def spy(batch):  # type: ignore[no-untyped-def]
        real(batch)
        replies.extend(pending.result for pending in batch)

    monkeypatch.setattr(piped.script_pipeline, "_round_trip", spy)
    order = checkout(piped, PurchaseRequest(SKU, "bob")).order
    assert replies == [[1, 48]]  # taken, 48 left, no row
    assert orders_by_user(piped)["bob"] == order.id
    assert groupcommit.writer_for(piped.sessions).batches == 0  # written by the batch


def test_a_script_queued_behind_a_stalled_row_write_gets_its_deadline_when_sent(
        piped, redis_url):
    """A purchase's script waits in its queue while the batch ahead writes its rows; its
    deadline (``deadlines.py``) is the send's, not the queue's. Before, it was taken at
    the queue: behind a leader writing rows to a stalled database, it ran out before the
    script was sent, and its buyer heard "Redis answered too late" from a Redis that
    answered at once (a PostgreSQL audit: 503s after 9-15 s)."""
    quick = redis.Redis.from_url(redis_url, socket_timeout=1.0)  # deadline: 0.5 s ahead
    stalled, release = threading.Event(), threading.Event()

    def stalled_database(follow):  # type: ignore[no-untyped-def]
        if not stalled.is_set():  # the first batch's rows: the database stalls
            stalled.set()
            assert release.wait(10)
        write_taken(follow)

    piped.redis, piped.script_pipeline = quick, ScriptPipeline(quick, after=stalled_database)
    answers: dict[str, object] = {}

    def buy(user: str) -> None:
        try:
            answers[user] = checkout(piped, PurchaseRequest(SKU, user)).order
        except Exception as exc:  # noqa: BLE001 - the answer under test
            answers[user] = exc

    first = threading.Thread(target=buy, args=("ann",))
    first.start()
    assert stalled.wait(10)
    behind = [threading.Thread(target=buy, args=(user,)) for user in ("bob", "cy", "dee")]
    for thread in behind:
        thread.start()
    while len(piped.script_pipeline._queue) < len(behind):
        time.sleep(0.01)
    time.sleep(0.7)  # the stall outlasts a deadline taken at the queue
    release.set()
    for thread in [first, *behind]:
        thread.join(10)
    quick.close()
    assert all(isinstance(answer, PlacedOrder) for answer in answers.values()), answers
    assert sorted(orders_by_user(piped)) == ["ann", "bob", "cy", "dee"]
