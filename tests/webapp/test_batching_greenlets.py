"""``batching.Batcher`` on greenlets, as in a gevent worker: its followers wait on a
``GreenletSignal`` there, not on ``threading.Event`` (the thread-based tests cover that).

No monkey patching: the Batcher's lock is a real one, never held across a yield, and
the greenlets run in this thread's hub, so the same leader/follower code runs.
"""

from __future__ import annotations

from typing import Any

import gevent
import pytest

from webapp.batching import Batcher, GreenletSignal, Pending


class Doubler(Batcher[int]):
    """Serves each item as twice itself; the first batch waits until ``release``."""

    def __init__(self) -> None:
        super().__init__(max_batch=100)
        self._signal = GreenletSignal
        self.served: list[list[int]] = []
        self.release = gevent.event.Event()

    def _serve(self, batch: list[Pending[int]]) -> None:
        if not self.served:
            self.served.append([])  # the first batch: hold it while the others queue
            self.release.wait()
        self.served.append([pending.item for pending in batch])
        for pending in batch:
            pending.result = 2 * pending.item


def submit_all(batcher: Doubler, items: list[int]) -> list[gevent.Greenlet]:
    callers = [gevent.spawn(batcher.submit, item) for item in items]
    gevent.sleep(0.01)  # the first leads and holds its batch; the rest queue
    return callers


def test_followers_on_greenlets_each_get_their_own_result_from_one_batch():
    batcher = Doubler()
    callers = submit_all(batcher, list(range(10)))
    batcher.release.set()
    assert gevent.joinall(callers, timeout=5) and all(caller.ready() for caller in callers)
    assert [caller.value for caller in callers] == [2 * item for item in range(10)]
    assert batcher.served[1:] == [[0], list(range(1, 10))]  # the held one, then the rest
    assert not batcher._serving


def test_a_follower_killed_while_waiting_leaves_the_queue_and_the_rest_are_served():
    batcher = Doubler()
    callers = submit_all(batcher, list(range(5)))
    callers[2].kill(block=True, timeout=5)  # waiting behind the held batch
    assert isinstance(callers[2].value, gevent.GreenletExit)
    batcher.release.set()
    assert gevent.joinall(callers, timeout=5) and all(caller.ready() for caller in callers)
    assert batcher.served[1:] == [[0], [1, 3, 4]]  # the killed one's item was never served
    assert [callers[i].value for i in (0, 1, 3, 4)] == [0, 2, 6, 8]


def test_the_lead_handed_to_a_waiting_greenlet_wakes_it_to_serve_its_batch():
    batcher = Doubler()
    batcher._max_batch = 2  # batches of two: the lead is handed on twice
    callers = submit_all(batcher, list(range(5)))
    batcher.release.set()
    assert gevent.joinall(callers, timeout=5) and all(caller.ready() for caller in callers)
    assert batcher.served[1:] == [[0], [1, 2], [3, 4]]
    assert [caller.value for caller in callers] == [0, 2, 4, 6, 8]


def test_a_signal_set_before_the_wait_does_not_park_and_a_second_set_is_harmless():
    signal = GreenletSignal()
    signal.set()
    early = gevent.spawn(signal.wait)
    early.join(timeout=1)
    assert early.successful()  # returned at once
    woken: list[Any] = []
    signal = GreenletSignal()
    waiter = gevent.spawn(lambda: woken.append(signal.wait()))
    gevent.sleep(0)
    assert woken == []  # parked
    signal.set()
    signal.set()
    waiter.join(timeout=5)
    assert waiter.successful() and woken == [None]


@pytest.mark.parametrize("waiting", [True, False])
def test_a_killed_waiter_gets_the_exception_and_a_later_set_is_harmless(waiting):
    signal = GreenletSignal()
    parked = gevent.spawn(signal.wait)
    if waiting:
        gevent.sleep(0)
    parked.kill(block=True, timeout=5)
    assert isinstance(parked.value, gevent.GreenletExit) or not waiting
    signal.set()
    gevent.sleep(0.01)  # the set's callback runs in the hub: nothing to switch to
    assert parked.dead


def test_a_batcher_waits_on_greenlet_signals_only_in_a_gevent_patched_process():
    import subprocess
    import sys
    import threading

    assert Batcher(max_batch=1)._signal is threading.Event  # real threads here
    patched = subprocess.run(
        [sys.executable, "-c", "from gevent import monkey; monkey.patch_all()\n"
         "from webapp.batching import Batcher, GreenletSignal\n"
         "print(Batcher(1)._signal is GreenletSignal)"],
        capture_output=True, text=True, timeout=60, check=True)
    assert patched.stdout.strip() == "True"


class _KilledOnFirstWake(GreenletSignal):
    """The first follower woken is killed right there (as a gevent worker's timeout or
    a client gone would kill it): deterministically just after the lead was handed to it."""

    killed: list[int] = []

    def wait(self) -> None:
        super().wait()
        if not _KilledOnFirstWake.killed:
            _KilledOnFirstWake.killed.append(1)
            raise gevent.GreenletExit()


def test_a_follower_killed_just_as_it_is_handed_the_lead_passes_it_on():
    _KilledOnFirstWake.killed = []
    batcher = Doubler()
    batcher._signal = _KilledOnFirstWake
    callers = submit_all(batcher, [0, 1, 2, 3])
    batcher.release.set()  # 0 serves [0] and hands the lead to 1, which is killed
    gevent.joinall(callers, timeout=5)
    assert _KilledOnFirstWake.killed == [1]
    assert [c.ready() for c in callers] == [True, True, True, True], batcher.served
    assert [callers[0].value, callers[2].value, callers[3].value] == [0, 4, 6]
    assert batcher.served[1:] == [[0], [2, 3]]  # 1 was never served: it left


class _KilledMidBatch(Batcher[int]):
    """Answers the first item of its batch, then its leader is killed (GreenletExit)."""

    def _serve(self, batch: list[Pending[int]]) -> None:
        batch[0].result = batch[0].item * 2
        raise gevent.GreenletExit


def test_a_leader_killed_mid_batch_keeps_the_answers_it_had_given():
    """An answer already given stands: its units were taken and its row may be
    committed. Overwritten with the exception, the buyer heard an error for a real
    order (a mutation audit: no test killed a leader mid-batch)."""
    batcher = _KilledMidBatch(max_batch=8)
    first, second = Pending(1), Pending(2)
    batcher._queue.extend([first, second])
    with pytest.raises(gevent.GreenletExit):
        batcher._lead()
    assert first.outcome() == 2
    assert isinstance(second.error, gevent.GreenletExit)
