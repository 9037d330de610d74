"""Two real worker processes selling one sale: exclusion across processes, not threads.

A lock that only works inside one process (a ``threading.Lock``, a cohort that never
releases) passes every threaded test. ``sell_in_two_processes`` starts two fresh
interpreters, ``w1`` and ``w2``, each with its own app, connection pools and cohort or
combiner, against the caller's redis-server and SQLite file, like two gunicorn
workers. The processes are spawned, not forked: a fork would copy this test process's
open Redis and SQLite connections and its threads into the child.

A spawned process imports the app before it can buy, so one process may sell a good
part of the stock before the other is ready. With ``together=True`` both build their
app, then wait for each other before buying.

Selling one after the other proves nothing about exclusion: a lock that let both in at
once would oversell only if their sections overlapped. ``assert_holds_interleaved``
checks the orders' fencing tokens (one per acquisition of the lock, shared by the
sections a cohort or a combiner ran on it): each process held the lock both before and
after the other did, so they contended for it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from webapp.models import Order

NAMES = ("w1", "w2")


def sell_in_two_processes(sell: Callable[..., Any], *args: Any,
                          together: bool = False) -> list[Any]:
    """Call ``sell(*args, name, ready)`` in two spawned processes; return what each returned.

    ``sell`` must be a module-level function (the child imports it by name). It calls
    ``ready()`` once its app is built and it is about to buy.
    """
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    barrier = spawn.Barrier(len(NAMES)) if together else None
    workers = [spawn.Process(target=_run, args=(sell, args, name, barrier, results))
               for name in NAMES]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    return got


def _run(sell: Callable[..., Any], args: tuple[Any, ...], name: str, barrier: Any,
         results: Any) -> None:
    def ready() -> None:
        if barrier is not None:
            barrier.wait(60)  # both processes start buying together

    results.put(sell(*args, name, ready))


def tokens_by_process(sessions: sessionmaker[Session], sku: str) -> dict[str, set[int]]:
    """The fencing tokens of ``sku``'s orders, by the process (the ``w1-`` or ``w2-``
    prefix of the buyer) that placed them."""
    with sessions() as session:
        rows = session.execute(select(Order.user_id, Order.fencing_token)
                               .where(Order.sku == sku)).all()
    tokens: dict[str, set[int]] = {name: set() for name in NAMES}
    for user_id, token in rows:
        assert token is not None, f"{user_id}'s order has no fencing token"
        tokens[user_id.partition("-")[0]].add(token)
    return tokens


def assert_holds_interleaved(tokens: dict[str, set[int]]) -> None:
    """Each process held the lock both before and after the other: their token ranges
    overlap (two processes selling one after the other never contended)."""
    one, two = (tokens[name] for name in NAMES)
    assert one and two, f"a process sold nothing: {tokens}"
    assert min(one) < max(two) and min(two) < max(one), \
        f"the processes held the lock one after the other, never in turn: {tokens}"
