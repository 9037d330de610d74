"""One user, two purchases at once, no Idempotency-Key: the second finds the user
reserved by the first, still in flight. 409 ``already_purchased`` means the user has an
order (CONTRACT.md: one order per user per sale), so the second waits for the first:
an order, and it hears 409; a failure, and it buys (or hears ``sold_out``) itself.

Before, it heard ``already_purchased`` at once: a contract audit sent 50 purchases of
one user to a sale of 0 units and got 27-49 ``already_purchased`` with no order, and a
buyer whose 3-unit purchase failed ``sold_out`` ended with nothing while the 1-unit
purchase sent beside it had been refused and 2 units stayed unsold."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from tests.webapp.conftest import SKU, buy, reset
from webapp import paths, sales
from webapp.keys import SaleKeys
from webapp.problems import Busy
from webapp.services import PurchaseRequest, checkout

pytestmark = pytest.mark.timeout(60)


class HeldFirst:
    """The first purchase (thread "first") waits inside its path until released; the
    twin runs in a thread of its own and must still be waiting when it is."""

    def __init__(self, client: Any, monkeypatch: Any, strategy: str) -> None:
        self.client, self.entered, self.go_on = client, threading.Event(), threading.Event()
        cls = type(paths.path_for(strategy))
        real = cls.purchase

        def purchase(path: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "first":
                self.entered.set()
                assert self.go_on.wait(10)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(cls, "purchase", purchase)

    def race(self, user: str, first_quantity: int, twin_quantity: int = 1) -> tuple[Any, Any]:
        answers: dict[str, Any] = {}

        def run(name: str, quantity: int) -> threading.Thread:
            thread = threading.Thread(
                target=lambda: answers.__setitem__(name, buy(self.client, user,
                                                             quantity=quantity)), name=name)
            thread.start()
            return thread

        first = run("first", first_quantity)
        try:
            assert self.entered.wait(10)
            twin = run("twin", twin_quantity)
            time.sleep(0.3)
            assert "twin" not in answers, answers["twin"].get_json()  # it waits for first
        finally:
            self.go_on.set()
            first.join(10)
        twin.join(15)
        return answers["first"], answers["twin"]


@pytest.mark.parametrize("strategy", ["token", "fair", "atomic-sharded"])  # sql: 0 is 0
def test_a_twin_of_a_purchase_that_fails_hears_sold_out_not_already_purchased(
        client, monkeypatch, strategy):
    reset(client, stock=0, strategy=strategy)
    first, twin = HeldFirst(client, monkeypatch, strategy).race("alice", 1)
    assert first.get_json()["error"] == "sold_out"
    assert twin.status_code == 409 and twin.get_json()["error"] == "sold_out", twin.get_json()
    assert client.get(f"/api/sales/{SKU}/audit").get_json()["orders"] == 0


@pytest.mark.parametrize("strategy", ["token", "sql", "atomic-sharded"])
def test_a_buyer_whose_bigger_purchase_fails_gets_the_smaller_one(client, monkeypatch,
                                                                 strategy):
    reset(client, stock=2, strategy=strategy)
    first, twin = HeldFirst(client, monkeypatch, strategy).race("alice", 3)  # > what is left
    assert first.get_json()["error"] == "sold_out"
    assert twin.status_code == 201, twin.get_json()
    assert buy(client, "alice").get_json()["error"] == "already_purchased"


@pytest.mark.parametrize("strategy", ["token", "sql"])
def test_a_twin_of_a_purchase_that_succeeds_hears_already_purchased(client, monkeypatch,
                                                                    strategy):
    reset(client, stock=5, strategy=strategy)
    first, twin = HeldFirst(client, monkeypatch, strategy).race("alice", 1)
    assert first.status_code == 201, first.get_json()
    assert twin.status_code == 409 and twin.get_json()["error"] == "already_purchased"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["consistent"]) == (1, True), audit


# The wait's edges, at the service layer (the deps fixture: an atomic sale of 50).

WAIT_S = 0.2


def left_reservation(deps: Any, user: str, nonce: str | None) -> None:
    """A reservation whose purchase is gone (its worker killed mid-purchase): no order."""
    keys = SaleKeys(SKU)
    deps.redis.sadd(keys.buyers, user)
    if nonce is not None:
        deps.redis.hset(keys.reservations, user, nonce)


def waiting(deps: Any) -> Any:
    return dataclasses.replace(deps, replay_wait_s=WAIT_S, sleep=time.sleep)


@pytest.mark.parametrize("key", [None, "carol-key"])
def test_a_reservation_whose_purchase_is_gone_is_dropped_after_the_wait(deps, key):
    """Waited for and never dropped, it made every retry of carol's a 10 s wait and a
    503 "still running", until the sale's next reset (a review of the wait)."""
    left_reservation(deps, "carol", "the-dead-purchase")
    started = time.monotonic()
    bought = checkout(waiting(deps), PurchaseRequest(SKU, "carol", idempotency_key=key))
    assert bought.created and time.monotonic() - started >= WAIT_S
    assert sales.audit(deps.sessions, deps.redis, SKU)["orders"] == 1


def test_the_wait_is_bounded_when_the_reservation_is_not_ours_to_drop(deps):
    left_reservation(deps, "dan", nonce=None)
    with pytest.raises(Busy, match="still running; try again"):
        checkout(waiting(deps), PurchaseRequest(SKU, "dan"))


def test_a_purchase_that_waited_has_that_much_less_lock_timeout(deps, monkeypatch):
    """Else a buyer waited 10 s for her other purchase, then 10 s for the lock."""
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=5, strategy="sql")
    path = type(paths.path_for("sql"))
    real, timeouts = path.purchase, []

    def purchase(self: Any, got: Any, *args: Any, **kwargs: Any) -> Any:
        timeouts.append(got.lock_timeout_s)
        return real(self, got, *args, **kwargs)

    monkeypatch.setattr(path, "purchase", purchase)
    left_reservation(deps, "erin", "the-dead-purchase")
    assert checkout(waiting(deps), PurchaseRequest(SKU, "erin")).created
    assert timeouts and timeouts[0] <= deps.lock_timeout_s - WAIT_S, timeouts
