"""A purchase whose lock release lost its reply: Redis (paused past the client's
timeout) may never run the release, and the sale's lock is then held for nobody for its
TTL, every buyer 503 busy. The lock is let go as soon as Redis answers
(``section.release_after_section``, ``services.UNDONE_LATER``)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from lockcore.strategies.handoff import HandOffLock
from webapp import sales, services

from .conftest import SKU, backends, buy, make_app, one_sale

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("strategy", ["token", "fair"])
@pytest.mark.parametrize("cohort", [True, False])
def test_a_sale_lock_whose_release_lost_its_reply_is_let_go(sqlite_url, redis_url, redis_client,
                                                            monkeypatch, strategy, cohort):
    app = make_app(sqlite_url, redis_url, LOCK_TIMEOUT_S=0.5, LOCK_COHORT=cohort)
    lock_key = "lock:{stock:sku-1}" if strategy == "token" else "lock:{stock:sku-1:fair}"
    real = HandOffLock._queue_release
    lost: list[str] = []

    def reply_lost_once(self: Any, uuid: str) -> Any:
        if not lost:  # the release, as if sent and its reply lost: Redis never ran it
            lost.append(uuid)
            raise redis.TimeoutError("Timeout reading from socket")
        return real(self, uuid)

    try:
        shop = one_sale(app, strategy, 5)
        services.UNDONE_LATER.waiting.clear()
        monkeypatch.setattr(HandOffLock, "_queue_release", reply_lost_once)
        assert buy(app.test_client(), "ann").status_code == 201  # its answer stands
        assert lost and redis_client.get(lock_key) == lost[0].encode()  # for nobody
        assert len(services.UNDONE_LATER.waiting) == 1
        services.UNDONE_LATER.next_drain = 0.0  # the worker's timer, or the next buyer
        services.UNDONE_LATER.drain()
        assert not services.UNDONE_LATER.waiting
        assert not redis_client.exists(lock_key)
        answer = buy(app.test_client(), "bob")  # was 503 for the lock's 10 s TTL
        assert answer.status_code == 201, answer.get_json()
        audit = sales.audit(shop.sessions, shop.redis, SKU)
        assert (audit["orders"], audit["consistent"]) == (2, True)
    finally:
        services.UNDONE_LATER.waiting.clear()
        backends(app).close()
