"""A lock section whose lock reports itself lost while it works sells nothing
(``section.still_held``).

A ZooKeeper audit sold the last unit twice with ``zookeeper``, a strategy marked safe:
a holder's connection was suspended during its 10 s of work (its lock said ``lost`` at
once), its session expired, the next holder read stock 1, and both wrote stock 0 and an
order. Here the lock says ``lost`` when the section's work begins; the purchase runs
through the whole checkout, on a real redis-server and database."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.webapp.conftest import SKU, backends, reset
from webapp import locks
from webapp.problems import Busy
from webapp.saleinfo import load_sale
from webapp.services import Checkout, PurchaseRequest, checkout, new_nonce


class LostWhileWorking:
    """The shop's own lock for the sale, which says ``lost`` once told to."""

    def __init__(self, real: Any) -> None:
        self.real, self.lost = real, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self.real.acquire(*args, **kwargs))

    def release(self) -> None:
        self.real.release()


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_section_told_its_lock_was_lost_sells_nothing(app, client, strategy):
    reset(client, stock=1, strategy=strategy, work_ms=5)
    shop = backends(app)
    made: list[LostWhileWorking] = []

    def lock_for(sale: Any, user: str) -> LostWhileWorking:
        made.append(LostWhileWorking(locks.lock_for(shop, sale, user)))
        return made[-1]

    def work(seconds: float) -> None:  # the section's work: the session goes meanwhile
        made[-1].lost = True

    deps = Checkout(sessions=shop.sessions, redis=shop.redis, lock_for=lock_for,
                    lock_timeout_s=2.0, sleep=work,
                    fence=functools.partial(locks.raise_fence, shop))
    load_sale(shop.sessions, SKU)
    with pytest.raises(Busy, match="lost while this purchase worked"):
        checkout(deps, PurchaseRequest(sku=SKU, user_id="ann", nonce=new_nonce()))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (1, 0, True), audit
    assert client.post(f"/api/products/{SKU}/purchase",
                       json={"user_id": "ann"}).status_code == 201  # and ann may buy
