"""The script batch that takes ``atomic`` purchases' units also writes their order rows
(``takenorders.py``): one wait per purchase, and every answer still its own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select, update

from tests.webapp.heldbatch import run_behind_a_held_batch
from webapp import groupcommit, sales, scripts
from webapp.keys import SaleKeys
from webapp.models import Order, PlacedOrder, Sale
from webapp.pipelining import ScriptPipeline
from webapp.problems import AlreadyPurchased, SaleReset
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


def test_a_failing_after_leaves_every_buyer_to_write_its_own_row(piped, monkeypatch):
    def broken(follow):
        raise RuntimeError("a bug in the leader's work after the round trip")

    piped.script_pipeline = ScriptPipeline(piped.redis, after=broken)
    answers = buy_concurrently(piped, ["ann", "bob", "cy"], monkeypatch)
    assert all(isinstance(answer, PlacedOrder) for answer in answers.values()), answers
    assert sorted(orders_by_user(piped)) == ["ann", "bob", "cy"]
    assert groupcommit.writer_for(piped.sessions).items == 3  # each through the writer
