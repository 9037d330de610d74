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


def test_the_slot_and_the_lock_share_one_lock_timeout(deps):
    # a buyer waited LOCK_TIMEOUT_S for a slot and then LOCK_TIMEOUT_S again for the
    # lock: 20 s by default, past what the page and nginx allow for a whole purchase
    import threading

    from webapp import sales
    from webapp.lockedpath import LockedPath
    from webapp.problems import Busy
    from webapp.saleinfo import load_sale
    from webapp.services import PurchaseRequest

    asked: list[float] = []

    class Held:  # a lock some other buyer holds for ever
        fencing_token = None

        def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
            asked.append(timeout if timeout is not None else -1.0)
            return False

        def release(self) -> None:
            pass

    sales.reset_sale(deps.sessions, deps.redis, SKU, stock=5, strategy="token")
    deps.lock_timeout_s, deps.lock_for = 1.0, lambda sale, user: Held()
    deps.lock_slots = threading.BoundedSemaphore(1)
    deps.lock_slots.acquire()  # every slot taken, for 0.6 s
    threading.Timer(0.6, deps.lock_slots.release).start()
    sale = load_sale(deps.sessions, SKU)
    try:
        LockedPath("token").purchase(deps, sale, PurchaseRequest(SKU, "ann"))
    except Busy:
        pass
    assert len(asked) == 1 and asked[0] <= 0.4 + 0.05, asked  # what was left of 1 s
