"""An unsafe lock's section still running when a reset comes: its stock write must not
land in the new sale.

A reset waits for the sale's lock, and ``naive`` or ``local`` hold off nobody, so a
section of the old sale can read, work, reset... and write ``stock - 1`` after the reset
wrote the new stock. An admin-reset audit: a new ``token`` sale of 10 read 48 and sold
14 (``set_stock.lua`` wrote without looking at the generation). The unsafe locks are to
oversell their own sale, not the next one."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import lockcore
from tests.webapp.conftest import SKU, buy, reset
from webapp import allocation, lockedpath, locks


def _writes_after_a_reset(monkeypatch: pytest.MonkeyPatch, client: Any, redis_client: Any,
                          strategy: str) -> list[Any]:
    """The first stock write waits until the sale has been reset to ``token``, 10 units.
    Its lock is let go of first, as a rival buyer's release lets it go under ``naive``
    (a DEL of whoever's lock) or its expiry under ``setnx-expire``: the reset takes it."""
    reached, reset_done = threading.Event(), threading.Event()
    for module in (lockedpath, allocation):
        real = module.set_stock

        def paused(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if not reached.is_set():
                reached.set()
                assert reset_done.wait(10)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "set_stock", paused)
    answers: list[Any] = []
    buyer = threading.Thread(target=lambda: answers.append(buy(client, "ann")))
    buyer.start()
    assert reached.wait(10), answers and answers[0].get_json()
    lock = lockcore.create(strategy, redis_client, locks.stock_resource(SKU, strategy))
    redis_client.delete(lock.key)
    reset(client, stock=10, strategy="token")
    reset_done.set()
    buyer.join(10)
    assert not buyer.is_alive()
    return answers


@pytest.mark.parametrize("strategy", ["naive", "setnx-expire", "getset"])
def test_an_old_sections_stock_write_does_not_land_in_the_new_sale(
        client, monkeypatch, redis_client, strategy):
    reset(client, stock=50, strategy=strategy)
    answers = _writes_after_a_reset(monkeypatch, client, redis_client, strategy)
    assert answers[0].status_code == 503, answers[0].get_json()

    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["consistent"]) == (
        10, 10, True), audit
    sold = [buy(client, f"buyer-{n}").status_code for n in range(12)]
    assert sold == [201] * 10 + [409] * 2
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["oversold"], audit["consistent"]) == (0, True), audit
