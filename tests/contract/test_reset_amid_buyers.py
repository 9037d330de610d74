"""An admin reset of a lock sale amid a crowd of buyers waits for the section in
progress, not for the crowd (README, the API table).

It used to compete with every waiting buyer for the sale's lock: with 60 buyers
buying without pause, sections of 100 ms, a reset of a ``redlock`` sale answered 503
after its whole lock timeout, again and again, and a ``token`` or ``fair`` one came in
only near the end of it (an HTTP audit: 503 after 10 s, 9.2 s, 9.3 s). Now a reset
first marks the sale (``sale:{sku}:resetting``): a section that takes the lock while
it is marked sells nothing and lets go at once (503, try again), so the reset waits
for the section in progress and for the quick refusals of those already queued."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

from tests.contract.shop import Shop, served_shop

SKU = "qa-reset-crowd"
#: the reset's whole wait for the lock, and the buyers'
LOCK_TIMEOUT_S = 3

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def crowded_shop() -> Iterator[Shop]:
    with served_shop([SKU], workers=2, LOCK_TIMEOUT_S=str(LOCK_TIMEOUT_S)) as shop:
        yield shop


@pytest.mark.parametrize("strategy", ["redlock", "token", "fair"])
def test_a_reset_amid_a_crowd_waits_for_the_section_not_the_crowd(crowded_shop, strategy):
    shop = crowded_shop
    shop.reset(SKU, 100_000, strategy, work_ms=100)
    stop, counter = threading.Event(), itertools.count()
    statuses: list[int] = []

    def buyer() -> None:
        while not stop.is_set():
            statuses.append(shop.buy(f"{strategy}-{next(counter)}", SKU).status)

    threads = [threading.Thread(target=buyer) for _ in range(60)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)  # every buyer queued on the lock
        resets = []
        for _ in range(2):
            started = time.monotonic()
            reset = shop.call("PUT", f"/api/admin/sales/{SKU}",
                              {"stock": 100_000, "strategy": strategy, "work_ms": 100},
                              headers={"Authorization": f"Bearer {shop.admin_token}"})
            resets.append((reset.status, round(time.monotonic() - started, 2)))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert [status for status, _ in resets] == [200, 200], resets
    assert set(statuses) <= {201, 503}, sorted(set(statuses))
    assert 201 in statuses  # the crowd did buy, between the resets too
    time.sleep(0.5)
    shop.assert_books_balance(SKU)
