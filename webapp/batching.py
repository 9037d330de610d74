"""Leader and followers: the concurrent calls of one worker served as one batch.

Group commit (``groupcommit.py``: many orders, one transaction) and auto-pipelining
(``pipelining.py``: many Redis scripts, one round trip) are the same idea: a request
that has to pay a fixed cost (a COMMIT, a round trip) shares it with every request that
arrived while the previous one was being paid. Both are built on ``Batcher``.

**How (no thread of its own).** A call queues its item. If nobody of its worker is
serving a batch, it leads: it yields once, takes every item queued (its own and all
that queued meanwhile, up to ``max_batch``), serves them in one go (``_serve``), and
hands the lead to the oldest item still queued. The others wait on an Event. So a
batch is what piled up since the last one: one item when the shop is quiet (no added
latency but one yield), dozens under load. **Each call returns only once its own item
is served**, with its own result or its own error.

**Why the leader yields first.** Under gevent a batch that never yields (a SQLite
transaction) lets nothing else run while it is served, so nobody could queue behind it.
One round of the ready greenlets lets them queue (measured on group commit: 1.00 orders
per commit without the yield, ~13 with it).

**Failures.** A follower killed while waiting leaves the queue (and passes the lead if
it had just been given it). A leader killed mid-batch gives that exception to every
item of its batch that has no answer yet, and still passes the lead.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from gevent.hub import Waiter  # imports gevent, patches nothing

Item = TypeVar("Item")

_UNSET: Any = object()


class Signal(Protocol):
    def wait(self) -> Any: ...
    def set(self) -> None: ...


class GreenletSignal:
    """``threading.Event``'s ``set`` and ``wait`` for one waiting greenlet, on gevent's
    ``Waiter`` (what its sockets park on). gevent's ``Event`` keeps a list of links
    and wakes them through a notifier of its own: 256 greenlets parked and woken at
    once cost ~6.5 us each on an ``Event``, ~3.7 on a ``Waiter``; through a whole
    batch, 1.5-2 us a call less (paired micro-benchmark, docs/performance.md,
    session 10). An ``atomic`` purchase waits once.

    ``set`` before ``wait``: the wait returns at once. ``set`` twice (the lead
    handed on, then the batch served): the second finds nobody waiting and is kept
    as the Waiter's value, harmlessly. A waiter killed while waiting gets the
    exception from ``wait``, as with ``Event``."""

    __slots__ = ("_is_set", "_waiter")

    def __init__(self) -> None:
        self._is_set = False
        self._waiter: Any = None

    def wait(self) -> None:
        if self._is_set:
            return
        self._waiter = Waiter()
        self._waiter.get()  # parks in the hub until ``set``'s callback switches back

    def set(self) -> None:
        self._is_set = True
        waiter = self._waiter
        if waiter is not None:  # a greenlet may only be switched to from the hub
            waiter.hub.loop.run_callback(waiter.switch, None)


class Served:
    """The ``done`` of a call its caller serves itself, at once (``OrderWriter.write_now``):
    nobody waits on it, so there is nothing to make. A ``threading.Event`` per call (a
    ``Condition`` and a lock inside) was 3.5 us of every ``atomic`` purchase's row
    (cProfile of ``takenorders.write_taken``, docs/performance.md, session 13)."""

    __slots__ = ()

    def wait(self) -> None:
        pass

    def set(self) -> None:
        pass


SERVED = Served()


def gevent_patched(module: str) -> bool:
    """gevent's monkey patching has replaced ``module`` (``"socket"``, ``"threading"``) in
    this process: a gevent worker's."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_module_patched(module))


def gevent_time_limit(seconds: float, error: BaseException | type[BaseException]) -> Any:
    """A gevent ``Timeout`` that raises ``error`` in the greenlet waiting in its ``with``
    block after ``seconds``, in a gevent worker; elsewhere a context that limits nothing
    (a sync worker's waits cannot be interrupted)."""
    if not gevent_patched("socket"):
        return contextlib.nullcontext()
    from gevent import Timeout

    return Timeout(seconds, error)


@dataclass(eq=False)
class Pending(Generic[Item]):
    """One call: its item, and once served its ``result`` or its ``error``."""

    item: Item
    result: Any = _UNSET
    error: BaseException | None = None
    done: Signal = field(default_factory=threading.Event)
    lead: bool = False
    #: when it was queued (``time.monotonic()``): an order write has a budget from then
    #: (``writedeadline.py``)
    since: float = 0.0

    @property
    def answered(self) -> bool:
        return self.result is not _UNSET or self.error is not None

    def outcome(self) -> Any:
        """Its result, or raise its error."""
        if self.error is not None:
            raise self.error
        return self.result


class Batcher(Generic[Item]):
    """Subclasses implement ``_serve``: give every ``Pending`` a result or an error."""

    def __init__(self, max_batch: int) -> None:
        self._max_batch = max_batch
        self._lock = threading.Lock()  # gevent-patched in a gevent worker
        self._queue: deque[Pending[Item]] = deque()
        self._serving = False
        #: what a follower waits on: a ``GreenletSignal`` in a gevent worker
        self._signal: type[Signal] = (GreenletSignal if gevent_patched("threading")
                                      else threading.Event)
        #: batches served and items in them, for tests and the curious
        self.batches = self.items = 0

    def submit(self, item: Item) -> Any:
        """Queue ``item``; return its result once its batch is served, or raise its error."""
        pending = Pending(item, done=self._signal(), since=time.monotonic())
        with self._lock:
            self._queue.append(pending)
            lead, self._serving = not self._serving, True
        if not lead:
            try:
                pending.done.wait()  # served, failed, or handed the lead
            except BaseException:  # killed while waiting: leave the queue, pass the lead
                self._withdraw(pending)
                raise
        if lead or pending.lead:
            self._lead()
        return pending.outcome()

    def _serve(self, batch: list[Pending[Item]]) -> None:
        raise NotImplementedError

    def _lead(self) -> None:
        time.sleep(0)  # let the ready greenlets queue behind us (module docstring)
        with self._lock:
            batch = [self._queue.popleft()
                     for _ in range(min(len(self._queue), self._max_batch))]
        try:
            self._serve(batch)
            self.batches, self.items = self.batches + 1, self.items + len(batch)
        except BaseException as exc:  # e.g. the leader's greenlet killed mid-batch
            for pending in batch:
                if not pending.answered:
                    pending.error = exc
            raise
        finally:
            with self._lock:
                self._pass_lead()
            for pending in batch:
                pending.done.set()

    def _pass_lead(self) -> None:
        """To the oldest item still queued (it serves its own batch), or to nobody."""
        if self._queue:
            self._queue[0].lead = True
            self._queue[0].done.set()
        else:
            self._serving = False

    def _withdraw(self, pending: Pending[Item]) -> None:
        with self._lock:
            if pending in self._queue:  # not in a batch yet: it will not be served
                self._queue.remove(pending)
            if pending.lead:
                self._pass_lead()


def own_copy(exc: BaseException) -> BaseException:
    """A copy per caller: one exception object raised in many greenlets at once would
    collect all their tracebacks."""
    try:
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied is shared
        return exc
