"""A ``redlock`` sale whose nodes are down answers 503 saying so: it said "the stock lock
was not free within 10s", as if other buyers held it (a README audit, every node down)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from lockcore.embedded import free_ports
from webapp import sales

from .conftest import SKU, backends, buy, empty_shop, make_app

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def redlock_shop(sqlite_url: str, redis_url: str, nodes: list[str], stock: int,
                 **config: Any) -> Iterator[Flask]:
    """A shop whose ``sku-1`` sells ``stock`` units through ``redlock`` on ``nodes``."""
    app = make_app(sqlite_url, redis_url, REDLOCK_URLS=nodes, **config)
    try:
        empty_shop(app)
        shop = backends(app)
        sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=stock,
                             strategy="redlock")
        sales.reset_sale(shop.sessions, shop.redis, SKU, stock=stock, strategy="redlock")
        yield app
    finally:
        backends(app).close()


@pytest.mark.parametrize("combine", [False, True])  # one section a buyer; a batch's
def test_a_purchase_with_no_majority_of_nodes_answering_names_them(sqlite_url, redis_url,
                                                                   redis_client, combine):
    dead = [f"redis://127.0.0.1:{port}/0" for port in free_ports(5)]  # nothing listens
    with redlock_shop(sqlite_url, redis_url, dead, 3, LOCK_TIMEOUT_S=0.3,
                      LOCK_COMBINE=combine) as app:
        answer: Any = buy(app.test_client(), "ann")
    assert answer.status_code == 503, answer.get_json()
    detail = answer.get_json()["detail"]
    assert "5 of 5 lock servers did not answer" in detail, detail


def test_a_lock_held_by_another_buyer_is_still_not_free(sqlite_url, redis_url, redis_client,
                                                        redlock_cluster):
    from webapp import locks
    from webapp.saleinfo import load_sale

    with redlock_shop(sqlite_url, redis_url, redlock_cluster.urls, 3,
                      LOCK_TIMEOUT_S=0.3) as app:
        shop = backends(app)
        holder = locks._new_lock(shop, load_sale(shop.sessions, SKU), "holder")
        assert holder.acquire(blocking=False)
        try:
            answer: Any = buy(app.test_client(), "ann")
        finally:
            holder.release()
    assert answer.status_code == 503, answer.get_json()
    assert "was not free within 0.3s" in answer.get_json()["detail"]


@pytest.mark.parametrize("down", ["killed", "paused"])
def test_buyers_queued_in_one_worker_all_hear_that_the_servers_did_not_answer(
        sqlite_url, redis_url, redis_client, redlock_cluster, redlock_clients, down):
    """Buyers of one worker queue behind its leader (``lockpassing.py``, ``combining.py``)
    and time out with no try of their own; a buyer that leads with no time left asks no
    one. Both said "not free" (a contract audit: 5 of 100 buyers with nodes killed, 133
    of 143 with nodes hanging) as if a holder had the lock. (A buyer that times out
    before the worker's first try has any answer still says "not free": no one knows
    more yet.)"""
    import re
    import threading
    import time

    servers = redlock_cluster.servers[:3]  # no majority left
    with contextlib.ExitStack() as stack:
        app = stack.enter_context(redlock_shop(sqlite_url, redis_url, redlock_cluster.urls,
                                               50, LOCK_TIMEOUT_S=0.6))
        if down == "paused":
            stack.callback(lambda: [server.resume() for server in servers])
        for server in servers:
            server.kill() if down == "killed" else server.pause()
        first = buy(app.test_client(), "first")  # the worker's own try finds them silent
        # a fourth node, alive, may miss a try on a loaded machine (as below): "4 of 5"
        assert re.search(r"[345] of 5 lock servers did not answer",
                         first.get_json()["detail"]), first.get_json()
        answers: list[Any] = []

        def buyer(n: int) -> None:
            answers.append(buy(app.test_client(), f"buyer-{n}"))

        crowd = []
        for wave in range(4):  # waves 0.15 s apart: some lead late, most queue
            for n in range(5):
                crowd.append(threading.Thread(target=buyer, args=(wave * 5 + n,)))
                crowd[-1].start()
            time.sleep(0.15)
        for thread in crowd:
            thread.join(30)
    details = [a.get_json()["detail"] for a in answers]
    assert [a.status_code for a in answers] == [503] * 20, details
    # three are down; a fourth, alive, may answer one try too late on a loaded machine
    # (seen once under a full suite beside other load: "4 of 5")
    wrong = [d for d in details
             if not re.search(r"[345] of 5 lock servers did not answer", d)]
    assert not wrong, (len(wrong), len(details), sorted(set(details)))


@pytest.mark.parametrize(("left_s", "said"), [(0.0599835, "within 0.06s"), (10.0, "within 10s"),
                                             (0.0, "in time"), (120.0, "within 120s"),
                                             (9.9871, "within 10s"), (2.46, "within 2.5s")])
def test_the_lock_timeout_left_is_said_rounded(left_s, said):
    # a contract audit read "not free within 0.0599835s", and "within 0s" after a wait
    # for the buyer's own earlier purchase had taken the whole timeout
    from webapp.problems import lock_not_taken

    assert lock_not_taken("sku-1", object(), left_s).args[0] == \
        f"the stock lock for sku-1 was not free {said}"


def test_a_buyer_whose_slot_wait_took_most_of_the_timeout_hears_the_whole_of_it():
    # told "not free within 0.02s" after 10 s: the rest of the timeout, not the wait (a
    # PostgreSQL audit)
    from webapp.problems import lock_not_taken

    assert lock_not_taken("sku-1", object(), 0.02, 10.0).args[0] == \
        "the stock lock for sku-1 was not free within 10s"


def test_a_sale_whose_nodes_refuse_their_database_can_still_be_reset(
        sqlite_url, redis_url, redis_client, redlock_cluster):
    """Every node refuses the database index (``/99``): no buyer can hold the lock, and
    since redlock raises that refusal (not False), every reset of the sale was 503 (a
    review); it is read as the lock being down: held off, then reset."""
    from tests.webapp.conftest import auth

    nodes = [url.rsplit("/", 1)[0] + "/99" for url in redlock_cluster.urls]
    with redlock_shop(sqlite_url, redis_url, nodes, 3, LOCK_TIMEOUT_S=0.3,
                      LOCK_TTL_MS=300) as app:
        answer = app.test_client().put(f"/api/admin/sales/{SKU}", headers=auth(),
                                       json={"stock": 4, "strategy": "atomic"})
        assert answer.status_code == 200, answer.get_json()
        assert buy(app.test_client(), "ann").status_code == 201
