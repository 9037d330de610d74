"""The purchase slots bound lock-path buyers only: ``PURCHASE_CONCURRENCY`` those of a
lock they wait on, ``LOCK_COMBINE_MAX_BATCH`` those of a combined lock (they wait in
their worker's queue, ``combining.py``).

A slot is held for a whole purchase; bounding the lock-free paths too capped ``atomic``
at slots / latency (Little's law): half its purchases/s in the sustained showdown.
"""

from __future__ import annotations

from contextlib import contextmanager

from tests.webapp.conftest import SKU, auth, buy


@contextmanager
def every_slot_taken(app, which: str = "combined_slots"):
    slots = getattr(app.extensions["seckill"], which)
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
    with every_slot_taken(app, "purchase_slots"), every_slot_taken(app, "combined_slots"):
        assert buy(client, "ann", sku="sku-2").status_code == 201  # sku-2 sells atomic


def test_a_combined_lock_purchase_waits_for_a_combined_slot_then_503(client, app):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    with every_slot_taken(app, "combined_slots"):
        response = buy(client, "ann", sku=SKU)  # sku-1 sells with the token lock, combined
    assert response.status_code == 503 and response.get_json()["error"] == "busy"
    with every_slot_taken(app, "purchase_slots"):  # not the plain lock paths' slots
        assert buy(client, "ann", sku=SKU).status_code == 201


def test_a_plain_lock_purchase_waits_for_a_purchase_slot_then_503(client, app):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    reset = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                       json={"stock": 10, "strategy": "multi"})  # never combined
    assert reset.status_code == 200, reset.get_json()
    with every_slot_taken(app, "purchase_slots"):
        response = buy(client, "ann", sku=SKU)
    assert response.status_code == 503 and response.get_json()["error"] == "busy"
    with every_slot_taken(app, "combined_slots"):
        assert buy(client, "ann", sku=SKU).status_code == 201


def test_the_combined_slots_are_as_many_as_one_section_serves(app):
    backends = app.extensions["seckill"]
    slots, taken = backends.combined_slots, 0
    while slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        slots.release()
    assert taken == app.config["LOCK_COMBINE_MAX_BATCH"] == 256
