"""Claims of a database by a served shop (``servelock.py``), at their edges: two shops
that each start their own RedLock nodes never share it, the same nodes in another
order are the same servers, and a claim stuck mid-setup is given up after a while.
Each was a mutation survivor."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest

from webapp.servelock import DatabaseInUse, Servers, claimed

REDIS = "redis://127.0.0.1:1/0"
NODES = [f"redis://127.0.0.1:{port}/0" for port in range(2, 7)]


def test_two_shops_each_starting_their_own_redlock_nodes_do_not_share_the_database(tmp_path):
    # SL5: ``alone`` when either server is the shop's own; the docstring's case: two
    # serves given one REDIS_URL but each starting five RedLock nodes (20 sold of 10)
    own_nodes = Servers(REDIS, None)
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    with claimed(url, own_nodes):
        with pytest.raises(DatabaseInUse, match="sell the stock twice"):
            with claimed(url, own_nodes):
                pass


def test_the_same_redlock_nodes_listed_in_another_order_are_the_same_servers(tmp_path):
    # SL1: the fingerprint sorts REDLOCK_URLS
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    with claimed(url, Servers(REDIS, NODES)), claimed(url, Servers(REDIS, NODES[::-1])):
        pass


def test_a_claim_that_never_finishes_being_set_up_is_given_up(tmp_path):
    # SL7: SETTLE_S bounds the wait for a record being written; without it the serve hangs
    database = tmp_path / "shop.sqlite"
    fd = os.open(f"{database}.serving", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a claim mid-setup: locked, nothing written yet
    outcome: list[BaseException | None] = []

    def claim() -> None:
        try:
            with claimed(f"sqlite:///{database}", Servers(REDIS, NODES)):
                outcome.append(None)
        except DatabaseInUse as exc:
            outcome.append(exc)

    thread = threading.Thread(target=claim, daemon=True)
    thread.start()
    thread.join(10)
    os.close(fd)
    assert outcome and isinstance(outcome[0], DatabaseInUse), "still waiting after 10 s"


@pytest.mark.parametrize("spelling", [
    "redis://localhost:1/0", "redis://127.0.0.1:1", "redis://:secret@LOCALHOST:1/0",
    "redis://127.0.0.1:1/?db=0"])
def test_the_same_redis_spelled_another_way_is_the_same_server(tmp_path, spelling):
    # a multi-host audit: a second host given ``localhost``, or no ``/0``, was refused,
    # "other lock servers": the fingerprint hashed the URLs' text
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    with claimed(url, Servers(REDIS, NODES, "127.0.0.1:2181,localhost:2182")), \
            claimed(url, Servers(spelling, [n.replace("127.0.0.1", "localhost") for n in NODES],
                                 "localhost:2182,127.0.0.1:2181")):
        pass
    with claimed(url, Servers(REDIS, NODES)):
        with pytest.raises(DatabaseInUse, match="other lock servers"):
            with claimed(url, Servers("redis://127.0.0.1:1/1", NODES)):
                pass
