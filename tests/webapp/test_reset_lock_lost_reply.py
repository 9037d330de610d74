"""A reset whose lock was taken by a Redis that woke after the reset had given up.

An HTTP audit paused the shop's Redis during a reset: the reset answered 503 after the
client's timeout, and Redis, resumed, ran the lock's SET NX then, for nobody. Every
reset of that sale then waited its ``2 x LOCK_TIMEOUT_S`` and heard 503 "another reset
of sku-3 is still running", for the lock's whole 90 s TTL. The reset now leaves the
lock to be settled once Redis answers (``services.UNDONE_LATER``)."""

from __future__ import annotations

import time

import pytest
import redis

from tests.webapp.conftest import SKU, auth, backends, empty_shop, make_app
from webapp import sales, services


@pytest.mark.parametrize("settled_by", ["the worker's timer", "the next reset"])
def test_a_reset_lock_taken_after_the_reset_gave_up_is_let_go(sqlite_url, own_redis,
                                                              settled_by):
    app = make_app(sqlite_url, own_redis.url, REDIS_SOCKET_TIMEOUT_S=1.0, LOCK_TIMEOUT_S=0.5)
    empty_shop(app)
    b = backends(app)
    sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="atomic")
    client = app.test_client()
    reset = {"stock": 5, "strategy": "atomic"}
    watcher = redis.Redis.from_url(own_redis.url)
    try:
        assert client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset).status_code \
            == 200  # the lock's scripts are loaded: a late one runs
        own_redis.pause()
        try:
            answer = client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset)
        finally:
            own_redis.resume()
        assert answer.status_code == 503, answer.get_json()
        deadline = time.monotonic() + 5
        while not watcher.exists(f"lock:{{reset:{SKU}}}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.exists(f"lock:{{reset:{SKU}}}")  # Redis woke and took it, for nobody
        if settled_by == "the worker's timer":  # or the next purchase
            services.UNDONE_LATER.next_drain = 0.0
            services.UNDONE_LATER.drain()
            assert not watcher.exists(f"lock:{{reset:{SKU}}}")
        again = client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset)
        assert again.status_code == 200, again.get_json()  # was 503 for 90 s
    finally:
        watcher.close()
        b.close()


@pytest.mark.parametrize(("strategy", "lock_key"), [
    ("atomic", f"lock:{{reset:{SKU}}}"),  # the reset's own lock
    ("token", f"lock:{{stock:{SKU}}}"),  # the sale's lock, released first
])
def test_a_reset_whose_lock_release_lost_its_reply_answers_200_and_lets_it_go_later(
        sqlite_url, own_redis, monkeypatch, strategy, lock_key):
    """The reset was done, and the release's lost reply answered it 503; the lock stayed
    Redis's for nobody for its TTL (a review)."""
    from lockcore.strategies.handoff import HandOffLock

    app = make_app(sqlite_url, own_redis.url)
    empty_shop(app)
    b = backends(app)
    sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy=strategy)
    real = HandOffLock._queue_release
    lost: list[str] = []

    def reply_lost_once(self, uuid):  # type: ignore[no-untyped-def]
        if self.key == lock_key and not lost:
            lost.append(uuid)
            raise redis.TimeoutError("Timeout reading from socket")
        return real(self, uuid)

    watcher = redis.Redis.from_url(own_redis.url)
    try:
        client = app.test_client()
        reset = {"stock": 5, "strategy": strategy}
        assert client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset).status_code \
            == 200
        services.UNDONE_LATER.waiting.clear()
        monkeypatch.setattr(HandOffLock, "_queue_release", reply_lost_once)
        answer = client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset)
        assert answer.status_code == 200, answer.get_json()
        assert lost and watcher.get(lock_key) == lost[0].encode()  # held for nobody
        services.UNDONE_LATER.next_drain = 0.0
        services.UNDONE_LATER.drain()
        assert not watcher.exists(lock_key)
        again = client.put(f"/api/admin/sales/{SKU}", headers=auth(), json=reset)
        assert again.status_code == 200, again.get_json()
    finally:
        services.UNDONE_LATER.waiting.clear()
        watcher.close()
        b.close()
