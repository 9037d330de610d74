"""The purchase slots (``PURCHASE_CONCURRENCY``) bound lock-path buyers only.

A slot is held for a whole purchase; bounding the lock-free paths too capped ``atomic``
at slots / latency (Little's law): half its purchases/s in the sustained showdown.
"""

from __future__ import annotations

from contextlib import contextmanager

from tests.webapp.conftest import SKU, buy


@contextmanager
def every_slot_taken(app):
    slots = app.extensions["seckill"].purchase_slots
    taken = 0
    while slots.acquire(blocking=False):
        taken += 1
    try:
        yield
    finally:
        for _ in range(taken):
            slots.release()


def test_a_lock_free_purchase_needs_no_slot(client, app):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    with every_slot_taken(app):
        assert buy(client, "ann", sku="sku-2").status_code == 201  # sku-2 sells atomic


def test_a_lock_path_purchase_still_waits_for_a_slot_then_503(client, app):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    with every_slot_taken(app):
        response = buy(client, "ann", sku=SKU)  # sku-1 sells with the token lock
    assert response.status_code == 503 and response.get_json()["error"] == "busy"
