"""A purchase's Redis write whose reply was lost with its connection (a helper's proxy
let a chosen script run, then dropped its reply; ``CLIENT KILL`` storms did the same).

* The locked section's ``SET stock``: the purchase answered 503 and wrote no order, and
  Redis kept the decrement: a unit gone for good (``token``, ``fair``, ``multi``,
  ``redlock``). The SET is sent again: it is idempotent under the lock.
* A purchase's first script, and a take script: the buyer stayed reserved with no order
  (409 on every retry) and an ``atomic`` sale kept her unit. They are undone by the
  purchase's nonce, after a lost connection and after a timeout alike (a timeout's
  reply may be late, not lost: Redis ran the script in time).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from tests.webapp.conftest import SKU, backends, buy, reset
from webapp import scripts
from webapp.deadlines import MARGIN_S, deadline

#: how a reply is lost: with its connection, or to the client's socket timeout (Redis
#: ran the script in time; only the reply came late)
LOST_WITH = [pytest.param(redis.ConnectionError("Connection closed by server."), id="dropped"),
             pytest.param(redis.TimeoutError("Timeout reading from socket"), id="timed-out")]


def drop_the_first_reply_of(monkeypatch: pytest.MonkeyPatch, name: str,
                            error: Exception | None = None) -> list[str]:
    """Run script ``name`` as usual, but raise ``error`` (a ConnectionError unless
    given) after its first run."""
    real = scripts.script
    dropped: list[str] = []

    def patched(client: Any, script_name: str) -> Any:
        found = real(client, script_name)
        if script_name != name:
            return found

        def lossy(*args: Any, **kwargs: Any) -> Any:
            answer = found(*args, **kwargs)
            if not dropped:
                dropped.append(script_name)
                raise error or redis.ConnectionError("Connection closed by server.")
            return answer

        return lossy

    monkeypatch.setattr(scripts, "script", patched)
    return dropped


@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_a_lost_reply_to_the_locked_stock_write_loses_no_unit(client, monkeypatch, strategy):
    reset(client, stock=7, strategy=strategy)
    dropped = drop_the_first_reply_of(monkeypatch, "set_stock")
    answer = buy(client, "alice")
    assert dropped == ["set_stock"]
    assert answer.status_code == 201, answer.get_json()  # it was 503, the unit gone
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit


def lose_the_pipelined_reply(monkeypatch: pytest.MonkeyPatch, error: Exception,
                             shop_redis: Any) -> list[str]:
    """The first batch of pipelined purchase scripts runs in Redis, then its replies are
    lost with the connection (so the batch's leader writes no order rows either). The
    scripts are loaded first: in a fresh Redis (the first test of an xdist worker) the
    first batch met NOSCRIPT, ran nothing, and its caller loaded the script and sent it
    again outside the pipeline: the buyer heard 201."""
    from pathlib import Path

    from webapp import batching
    from webapp.pipelining import ScriptPipeline

    real = ScriptPipeline._round_trip
    lost: list[str] = []
    for lua in Path(scripts.__file__).parent.glob("*.lua"):
        shop_redis.script_load(scripts.source(lua.stem))

    def lossy(self: Any, batch: Any) -> None:
        real(self, batch)
        if not lost:
            lost.append(",".join(p.item[0] for p in batch))
            for pending in batch:  # Redis ran them; no reply was read
                pending.result = batching._UNSET
            raise error

    monkeypatch.setattr(ScriptPipeline, "_round_trip", lossy)
    return lost


@pytest.mark.parametrize("error", LOST_WITH)
@pytest.mark.parametrize(("strategy", "key"), [
    ("atomic", None), ("token", None), ("sql", None), ("atomic", "key-1"), ("token", "key-2")])
def test_a_purchase_whose_first_script_lost_its_reply_undoes_it(
        client, monkeypatch, strategy, key, error):
    # the buyer stayed reserved (409 already_purchased on every retry, with no order)
    # and an atomic sale kept her unit
    reset(client, stock=7, strategy=strategy)
    shop_redis = backends(client.application).redis
    lost = (lose_the_pipelined_reply(monkeypatch, error, shop_redis) if key is None
            else drop_the_first_reply_of(monkeypatch, "reserve", error))
    answer = buy(client, "alice", key=key)
    assert lost and answer.status_code == 503, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (7, 0, True), audit
    again = buy(client, "alice", key=key)
    assert again.status_code == 201, again.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit


def test_only_the_lost_purchases_own_reservation_is_undone(redis_client):
    from webapp.keys import SaleKeys

    keys = SaleKeys("sku-undo")
    redis_client.delete(*keys.all())
    redis_client.hset(keys.info, "strategy", "atomic")
    redis_client.set(keys.stock, 5)
    redis_client.sadd(keys.buyers, "alice")
    redis_client.hset(keys.reservations, "alice", "theirs")
    undo = scripts.script(redis_client, "undo_lost")
    args = [keys.buyers, keys.reservations, keys.info, keys.stock, keys.soldout]
    assert undo(keys=args, args=["alice", "mine", 1, "1"]) == 0  # another purchase's
    assert redis_client.sismember(keys.buyers, "alice") and redis_client.get(keys.stock) == b"5"
    assert undo(keys=args, args=["alice", "theirs", 1, "1"]) == 2
    assert not redis_client.sismember(keys.buyers, "alice")
    assert redis_client.get(keys.stock) == b"6"
    assert undo(keys=args, args=["alice", "theirs", 1, "1"]) == 0  # once only
    assert redis_client.get(keys.stock) == b"6"
    redis_client.delete(*keys.all())


@pytest.mark.parametrize("error", LOST_WITH)
@pytest.mark.parametrize(("strategy", "script"), [
    ("atomic", "atomic_purchase"), ("atomic-sharded", "sharded_take")])
def test_a_take_whose_reply_was_lost_gives_its_units_back(client, monkeypatch, strategy,
                                                          script, error):
    # the second script of a keyed atomic purchase (and every sharded one): the 503
    # dropped the reservation, and the unit stayed taken
    reset(client, stock=7, strategy=strategy)
    dropped = drop_the_first_reply_of(monkeypatch, script, error)
    answer = buy(client, "alice", key="key-9")
    assert dropped == [script] and answer.status_code == 503, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (7, 0, True), audit
    assert buy(client, "alice", key="key-9").status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit


@pytest.mark.parametrize("timeout", [0.5, 5.0])
def test_the_deadline_comes_a_margin_before_the_client_gives_up(timeout):
    client = redis.Redis(host="127.0.0.1", port=1, socket_timeout=timeout)  # never connects
    before = time.time()
    at = deadline(client)
    after = time.time()
    margin = min(MARGIN_S, timeout / 2)
    assert (before + timeout - margin) * 1000 - 1 <= at <= (after + timeout - margin) * 1000


def test_a_stock_write_redis_runs_too_late_buys_nothing(client, monkeypatch):
    """The section's ``SET stock`` carries a deadline: run after it (Redis stalled past
    the buyer's timeout), it changes nothing and answers LATE. Taken as written, the
    order went in and the buyer heard 201 with Redis's stock never lowered: an oversell
    (a mutation audit)."""
    from webapp import deadlines

    reset(client, stock=7, strategy="token")
    monkeypatch.setattr(deadlines, "deadline", lambda client: 1)  # long past: LATE
    answer = buy(client, "alice")
    monkeypatch.undo()
    assert answer.status_code == 503 and "too late" in answer.get_json()["detail"], \
        answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (0, 7, True), audit


def test_a_checkout_script_redis_runs_too_late_reserves_and_takes_nothing(client,
                                                                          monkeypatch):
    """``atomic_checkout.lua`` carries the deadline too: run after it, it changes nothing.
    Run all the same, it reserved the buyer and took an ``atomic`` sale's unit after the
    client had given up on it (a mutation audit took the check out; no test noticed)."""
    from webapp import pipelining, services

    def long_past(client: Any) -> int:
        return 1

    monkeypatch.setattr(services, "deadline", long_past)
    monkeypatch.setattr(pipelining, "deadline", long_past)
    answer = buy(client, "alice", sku="sku-2")
    monkeypatch.undo()
    assert answer.status_code == 503 and "too late" in answer.get_json()["detail"], \
        answer.get_json()
    audit = client.get("/api/sales/sku-2/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (0, 1, True), audit
    assert buy(client, "alice", sku="sku-2").status_code == 201  # not left reserved


def test_a_reservation_redis_runs_too_late_is_a_503_not_a_wait(client, monkeypatch):
    """A keyed purchase reserves its buyer with a deadline. LATE read as "reserved
    already" made it wait 10 s for a purchase in flight that did not exist."""
    from webapp import deadlines

    reset(client, stock=7, strategy="token")
    monkeypatch.setattr(deadlines, "deadline", lambda client: 1)
    started = time.monotonic()
    answer = buy(client, "alice", key="k-late")
    monkeypatch.undo()
    assert answer.status_code == 503 and "too late" in answer.get_json()["detail"], \
        answer.get_json()
    assert time.monotonic() - started < 5
    assert buy(client, "alice", key="k-late").status_code == 201
