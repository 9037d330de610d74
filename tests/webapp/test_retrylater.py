"""The undo queues (``webapp/retrylater.py``) live in one worker's memory: an exiting
worker tries them once more, and names each one left in its log."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from webapp import gunicorn_conf
from webapp.retrylater import QUEUES, RetryLater, last_chance


@dataclass
class _Undo:
    sku: str
    user_id: str
    quantity: int
    backend_up: bool

    def attempt(self) -> bool:
        return self.backend_up


@pytest.fixture
def queue():
    made = RetryLater(_Undo.attempt, every_s=3600)
    yield made
    QUEUES.remove(made)


def test_an_exiting_worker_tries_every_undo_again_though_a_drain_just_ran(queue):
    queue.add(_Undo("sku-1", "ann", 1, backend_up=False))
    queue.drain()  # Redis still down: the next drain would be an hour away
    assert queue.waiting and queue.next_drain > 0
    queue.waiting[0].backend_up = True  # back before the worker exits
    assert last_chance(1.0) == 0
    assert not queue


def test_an_undo_left_at_exit_is_named_in_the_log(queue, caplog):
    queue.add(_Undo("sku-1", "ann", 1, backend_up=True))
    queue.add(_Undo("sku-2", "bob", 2, backend_up=False))
    with caplog.at_level(logging.ERROR, logger="webapp.retrylater"):
        assert last_chance(1.0) == 1
    assert not queue
    [line] = [r.getMessage() for r in caplog.records]
    assert "Undo(sku='sku-2', user_id='bob', quantity=2)" in line, line


def test_no_undo_is_tried_past_the_budget_but_each_is_logged(queue, caplog):
    tried: list[str] = []

    def slow_and_down(undo: _Undo) -> bool:
        tried.append(undo.user_id)
        return False

    queue.attempt = slow_and_down
    for user in ("ann", "bob", "cy"):
        queue.add(_Undo("sku-1", user, 1, backend_up=False))
    with caplog.at_level(logging.ERROR, logger="webapp.retrylater"):
        assert last_chance(0.0) == 3
    assert tried == []
    assert len(caplog.records) == 3


def test_the_served_worker_gives_its_undos_a_last_chance_as_it_exits(queue, caplog):
    queue.add(_Undo("sku-3", "dee", 1, backend_up=False))
    with caplog.at_level(logging.ERROR, logger="webapp.retrylater"):
        gunicorn_conf.worker_exit(server=None, worker=None)
    assert "user_id='dee'" in caplog.text


def test_a_drain_with_nothing_waiting_does_not_put_off_the_next(queue):
    # every purchase (and every reset) calls drain(): one with nothing to undo must not
    # hold off, for every_s, the drain of an undo queued just after it
    queue.drain()
    assert queue.next_drain == 0.0
    queue.add(_Undo("sku-1", "ann", 1, backend_up=True))
    queue.drain()
    assert not queue
