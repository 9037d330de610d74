"""Concurrent calls into a ``batching.Batcher`` whose first batch is held until every
other call has queued behind it: the deterministic way to get one batch of many.

Threads, not greenlets: ``Batcher`` uses ``threading`` primitives, which gevent patches
in a worker and which are real here, so the same leader/follower code runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any


def run_behind_a_held_batch(monkeypatch: Any, batcher: Any, served_by: str,
                            call: Callable[[Any], Any],
                            keys: list[Hashable]) -> dict[Hashable, Any]:
    """``call(key)`` in a thread per key; the first batch waits (in ``batcher.<served_by>``)
    until the other calls are queued. Returns each key's answer: a result or an exception."""
    entered, release = threading.Event(), threading.Event()
    real = getattr(batcher, served_by)

    def held(batch: Any) -> Any:
        if not entered.is_set():
            entered.set()
            assert release.wait(10)
        return real(batch)

    monkeypatch.setattr(batcher, served_by, held)
    answers: dict[Hashable, Any] = {}

    def one(key: Hashable) -> None:
        try:
            answers[key] = call(key)
        except Exception as exc:  # noqa: BLE001 - the answer under test
            answers[key] = exc

    first = threading.Thread(target=one, args=(keys[0],))
    first.start()
    assert entered.wait(10)
    rest = [threading.Thread(target=one, args=(key,)) for key in keys[1:]]
    for queued, thread in enumerate(rest, start=1):
        thread.start()  # queued in the order given: started together, a loaded machine
        # queued them in another (a fresh-clone run: "ann" behind "cy", sold out)
        while len(batcher._queue) < queued:
            threading.Event().wait(0.005)
    release.set()
    for thread in [first, *rest]:
        thread.join(10)
    return answers
