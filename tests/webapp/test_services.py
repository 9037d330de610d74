"""``checkout`` with a FakeLock: the service layer's rules without a real lock."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy.exc import OperationalError

from webapp import orders, sales
from webapp.keys import SaleKeys
from webapp.problems import AlreadyPurchased, Busy, SoldOut
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


class FakeLock:
    """Grants (or refuses) the lock and records what the service did with it."""

    def __init__(self, grant: bool = True, fencing_token: int = 7) -> None:
        self.grant = grant
        self.fencing_token = fencing_token
        self.calls: list[str] = []
        self.timeouts: list[float | None] = []

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.calls.append("acquire")
        self.timeouts.append(timeout)
        return self.grant

    def release(self) -> None:
        self.calls.append("release")


@pytest.fixture
def lock() -> FakeLock:
    return FakeLock()


@pytest.fixture
def deps(sessions, redis_client, lock) -> Checkout:
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=3, strategy="token")
    sales.reset_sale(sessions, redis_client, SKU, stock=3, strategy="token", work_ms=1)
    return Checkout(sessions=sessions, redis=redis_client, lock_for=lambda sale, user: lock,
                    sleep=lambda seconds: None)


def audit(deps: Checkout) -> dict:
    return sales.audit(deps.sessions, deps.redis, SKU)


def test_a_purchase_takes_the_lock_releases_it_and_keeps_its_fencing_token(deps, lock):
    result = checkout(deps, PurchaseRequest(SKU, "ann"))
    assert result.created and result.order.fencing_token == 7
    assert lock.calls == ["acquire", "release"]
    assert audit(deps)["consistent"]


def test_a_keyed_purchase_that_waited_for_its_users_other_one_has_only_the_rest_of_the_time(
        deps, lock, redis_client):
    """It waited for the user's purchase in flight (up to 10 s), then for the lock its
    whole timeout again: a 503 after twice LOCK_TIMEOUT_S (a contract audit, 19.8 s)."""
    now, freed_at = [100.0], []

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 103.0 and not freed_at:  # the other purchase gave up after 3 s
            redis_client.srem(SaleKeys(SKU).buyers, "ann")  # ann is free again
            freed_at.append(now[0])  # seen at the end of this pause

    deps.sleep, deps.monotonic = sleep, lambda: now[0]
    deps.lock_timeout_s = 5.0
    redis_client.sadd(SaleKeys(SKU).buyers, "ann")  # her purchase with no key, in flight
    lock.grant = False
    with pytest.raises(Busy):
        checkout(deps, PurchaseRequest(SKU, "ann", idempotency_key="ann-1"))
    waited = freed_at[0] - 100.0  # 3 s, and the rest of the pause it fell in
    assert 3.0 <= waited < 3.6
    assert lock.timeouts == [pytest.approx(5.0 - waited, abs=0.01)], lock.timeouts


def test_a_lock_not_granted_is_busy_and_frees_the_buyer_reservation(deps, lock):
    lock.grant = False
    with pytest.raises(Busy):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert lock.calls == ["acquire"]
    lock.grant = True
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created


def test_a_sale_whose_strategy_this_worker_lacks_drops_the_reservation(deps, lock):
    """The first script reserves the buyer before Python looks at the sale's strategy."""
    from webapp.paths import UnknownStrategy

    deps.redis.hset(SaleKeys(SKU).info, "strategy", "registered-elsewhere")
    with pytest.raises(UnknownStrategy):  # the server's data, not the buyer's request
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert not deps.redis.sismember(SaleKeys(SKU).buyers, "ann") and lock.calls == []


def test_an_atomic_sale_row_that_cannot_be_read_gives_the_taken_unit_back(deps, lock):
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=3, strategy="atomic")
    deps.redis.hset(SaleKeys(SKU).info, "work_ms", "not-a-number")  # a damaged copy
    with pytest.raises(ValueError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert deps.redis.get(SaleKeys(SKU).stock) == b"3"
    assert not deps.redis.sismember(SaleKeys(SKU).buyers, "ann")


def test_selling_out_sets_the_flag_so_later_buyers_never_touch_the_lock(deps, lock):
    for user in ("a", "b", "c"):
        checkout(deps, PurchaseRequest(SKU, user))
    with pytest.raises(SoldOut):
        checkout(deps, PurchaseRequest(SKU, "d"))  # finds stock 0 under the lock
    lock.calls.clear()
    with pytest.raises(SoldOut):
        checkout(deps, PurchaseRequest(SKU, "e"))
    assert lock.calls == []


def test_a_failed_order_write_returns_the_unit_to_stock(deps, lock, monkeypatch):
    def broken_insert(*args, **kwargs):
        raise OperationalError("INSERT", {}, Exception("disk full"))

    monkeypatch.setattr(orders, "insert_order", broken_insert)
    with pytest.raises(OperationalError):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    assert lock.calls == ["acquire", "release"]
    result = audit(deps)
    assert (result["remaining"], result["orders"], result["consistent"]) == (3, 0, True)
    monkeypatch.undo()
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created  # and the buyer may retry


class WorkerStopped(BaseException):
    """What gevent raises in a request stopped mid-work (GreenletExit is one)."""


def _stopped(seconds: float) -> None:
    raise WorkerStopped


@pytest.mark.parametrize("key", [None, "k-1"], ids=["script-path", "keyed-path"])
def test_an_atomic_purchase_stopped_in_its_work_gives_its_units_back(sessions, redis_client, key):
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=5, strategy="atomic")
    sales.reset_sale(sessions, redis_client, SKU, stock=5, strategy="atomic", work_ms=5)
    stopped = Checkout(sessions=sessions, redis=redis_client, lock_for=lambda sale, user: None,
                       sleep=_stopped)
    with pytest.raises(WorkerStopped):
        checkout(stopped, PurchaseRequest(SKU, "ann", idempotency_key=key))
    result = sales.audit(sessions, redis_client, SKU)
    assert (result["remaining"], result["orders"], result["consistent"]) == (5, 0, True), result


def test_the_simulated_work_happens_inside_the_lock(deps, lock):
    slept: list[float] = []
    deps.sleep = lambda seconds: slept.append(seconds) or lock.calls.append("work")
    checkout(deps, PurchaseRequest(SKU, "ann"))
    assert lock.calls == ["acquire", "work", "release"] and slept == [0.001]


@pytest.mark.parametrize("strategy", ["atomic", "sql"])
def test_the_lock_free_paths_never_ask_for_a_lock(deps, lock, strategy):
    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=1, strategy=strategy)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    with pytest.raises(SoldOut):
        checkout(deps, PurchaseRequest(SKU, "bob"))
    assert lock.calls == []
    assert audit(deps)["consistent"]


def test_a_buyer_redis_forgot_is_still_stopped_by_the_database_and_keeps_the_unit(deps):
    checkout(deps, PurchaseRequest(SKU, "ann"))
    deps.redis.delete("sale:{sku-1}:buyers")  # e.g. Redis restarted without persistence
    with pytest.raises(AlreadyPurchased):
        checkout(deps, PurchaseRequest(SKU, "ann"))
    result = audit(deps)
    assert (result["orders"], result["remaining"], result["consistent"]) == (1, 2, True)
    assert deps.redis.sismember("sale:{sku-1}:buyers", "ann")  # the fast path knows again


def test_a_purchase_reads_the_sale_from_redis_and_restores_a_lost_copy(deps):
    info_key = "sale:{sku-1}:info"
    assert deps.redis.hget(info_key, "strategy") == b"token"  # written by the reset
    deps.redis.delete(info_key)
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created  # from the database
    assert deps.redis.hget(info_key, "strategy") == b"token"


def test_an_sql_order_committed_before_redis_failed_is_still_the_buyers(deps, monkeypatch):
    # the stock copy is updated after the commit; Redis failing then turned the buyer's
    # answer into 503 busy ("nothing was bought") with the order row written
    from webapp import paths, scripts

    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=5, strategy="sql")
    real = scripts.script

    def failing_mirror(client, name):
        if name != "mirror_stock":
            return real(client, name)

        def down(**_):
            raise redis.ConnectionError("Redis went away after the commit")
        return down

    monkeypatch.setattr(paths.scripts, "script", failing_mirror)
    placed = checkout(deps, PurchaseRequest(SKU, "ann"))
    assert placed.created
    monkeypatch.undo()
    result = audit(deps)
    assert (result["orders"], result["database_remaining"]) == (1, 4)
    with pytest.raises(AlreadyPurchased):
        checkout(deps, PurchaseRequest(SKU, "ann"))


@pytest.fixture
def undropped(monkeypatch):
    """An empty queue of undropped reservations, drained at the next purchase."""
    from webapp import services
    from webapp.retrylater import RetryLater

    queue = RetryLater(services.UNDONE_LATER.attempt)
    monkeypatch.setattr(services, "UNDONE_LATER", queue)
    return queue


def _fail_with_srem_down(deps, lock, user):
    def down(*args):
        raise redis.ConnectionError("Redis is down")

    lock.grant = False
    real, deps.redis.srem = deps.redis.srem, down
    try:
        with pytest.raises(Busy):
            checkout(deps, PurchaseRequest(SKU, user))
    finally:
        deps.redis.srem = real
        lock.grant = True
    assert deps.redis.sismember(SaleKeys(SKU).buyers, user)  # left behind, for now


def test_a_reservation_redis_could_not_drop_is_dropped_once_it_answers(deps, lock, undropped):
    # a 503 says "nothing was bought, try again": the retry must not hear
    # already_purchased because Redis was down when the reservation should have gone
    _fail_with_srem_down(deps, lock, "ann")
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    assert audit(deps)["consistent"]


def test_a_late_drop_spares_the_reservation_of_an_order_made_meanwhile(deps, lock, undropped):
    _fail_with_srem_down(deps, lock, "ann")
    deps.redis.srem(SaleKeys(SKU).buyers, "ann")  # the SREM ran after all (a slow Redis)
    undropped.next_drain = float("inf")  # ann buys again before any drain
    assert checkout(deps, PurchaseRequest(SKU, "ann")).created
    undropped.next_drain = 0.0
    checkout(deps, PurchaseRequest(SKU, "bob"))  # drains: ann has an order, keeps hers
    assert deps.redis.sismember(SaleKeys(SKU).buyers, "ann")
    assert not undropped


def test_an_undo_redis_cannot_take_yet_is_one_line_in_the_log(caplog):
    """While Redis is down every failed purchase queues an undo, and each try logged a
    three-part traceback: 40 lines a buyer in the serve log (a contract audit)."""
    import logging

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from lockcore.embedded import free_port
    from webapp.services import _LostReply

    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5,
                         retry=Retry(NoBackoff(), 0))
    lost = _LostReply(client, "sku-1", "ann", 1, "nonce", fast_script=True)
    with caplog.at_level(logging.WARNING, logger="webapp.services"):
        assert lost.retry() is False
    [record] = [r for r in caplog.records if "could not undo" in r.getMessage()]
    assert record.exc_info is None
    assert "ConnectionError" in record.getMessage() and "\n" not in record.getMessage()
