"""A fixed set of worker processes, reused for every contender of a run.

Starting eight interpreters per contender would cost more than some runs last, and a
fresh process per run would also re-measure imports. The pool starts them once and
stops them by pid at the end, killing any that do not exit.

**How they start moves the result** (``START_METHODS``). ``spawn`` (the default) runs
a fresh interpreter per worker, as separate service instances would be. ``forkserver``
forks them from one small clean process, as gunicorn forks its workers from its master.
(Plain ``fork`` is not offered: a fork of a parent holding kazoo or pool threads can
deadlock.)

What matters is not the start but the **address layout** (``worker_layout``). Forked
workers have their code at the same addresses; spawned ones each get their own, as
Linux randomises every new program's layout (ASLR). Spawned under ``setarch -R``
(randomisation off, inherited by the workers), they behave as forked ones do, though
they share no heap. On the 2-core VM of docs/performance.md ("Session 24"), with one
layout every hand-off got cheaper: python-redis-lock went from ~2,600 to ~3,150
acquisitions/s and turned fair (0.56-0.61 to 0.95-0.97, p99 wait ~16 ms to 5-8 ms),
``fair`` gained 10-23%, the barging ``token``-poll 3-6%. The likely cause (not measured:
this VM exposes no CPU counters) is the CPU's branch predictors, which are keyed by
address: a process switched in after one with the same layout finds them trained.
Compare locks within one layout only; the bench prints which one it ran.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from webapp.cli import STOP_SIGNALS

from . import worker

logger = logging.getLogger(__name__)

#: how long a worker may take to build its lock and warm up before we give up on it
READY_TIMEOUT_S = 90.0
#: beyond the run's duration, how long a worker may take to report
REPORT_GRACE_S = 30.0


class WorkersStuck(RuntimeError):
    """Some worker neither reported nor failed in time (a lock that never returns)."""


#: how the workers may be started; the first is the default
START_METHODS = ("spawn", "forkserver")


#: personality(2)'s flag for "no address-space randomisation" (setarch -R); exec keeps it
ADDR_NO_RANDOMIZE = 0x0040000


def worker_layout(start_method: str) -> str:
    """``"shared"`` if every worker has its code at the same addresses, else ``"own"``.

    Forked workers share their parent's layout. Spawned ones get their own unless
    randomisation is off, system-wide or for us (inherited by what we spawn)."""
    if start_method == "forkserver":
        return "shared"
    try:
        if Path("/proc/sys/kernel/randomize_va_space").read_text().strip() == "0":
            return "shared"
        personality = int(Path("/proc/self/personality").read_text(), 16)
    except (OSError, ValueError):  # not Linux: assume the usual randomisation
        return "own"
    return "shared" if personality & ADDR_NO_RANDOMIZE else "own"


@contextlib.contextmanager
def _stops_held_back() -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM, SIGHUP) that comes meanwhile is handled on the way out,
    as it would have been: its handler raises there (``webapp.cli.stop_on_term``).

    Starting a spawned worker is two steps: the process, then its parent writing it
    what to run. A stop between them left the worker reading a closed pipe, and an
    EOFError traceback under "bench interrupted" (the contract suite's SIGTERM test,
    once, on a loaded machine). The handlers are swapped, not the signals blocked:
    blocked in this thread, a signal reaches another one, and Python runs the handler
    in this one all the same. Only the main thread may swap them: elsewhere, as before.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {stop: signal.signal(stop, lambda signum, frame: came.append(signum))
                for stop in STOP_SIGNALS}
    try:
        yield
    finally:
        for stop, handler in previous.items():
            if handler is not None:  # None: set outside Python, not ours to restore
                signal.signal(stop, handler)
        if came:
            signal.raise_signal(came[0])  # its own handler, now: raises here, or ends us


def _tracker_deaf_to_hangups() -> None:
    """Start ``multiprocessing``'s resource tracker (the queues' semaphores register
    with it) with SIGHUP blocked, which it keeps: it ignores SIGINT and SIGTERM already,
    but a hangup (a closed terminal: SIGHUP to the whole process group) killed it, and
    the bench, stopping, printed its "died unexpectedly, relaunching" warning and a
    ``KeyError`` traceback per semaphore, 15 of them (a bench audit). Blocked in this
    thread only, for the spawn: a hangup meanwhile still reaches us."""
    from multiprocessing import resource_tracker

    if not hasattr(signal, "pthread_sigmask"):
        resource_tracker.ensure_running()
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:  # as it was (blocked already: it stays so)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class WorkerPool:
    def __init__(self, processes: int, start_method: str = START_METHODS[0]) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}")
        self.start_method = start_method
        _tracker_deaf_to_hangups()
        ctx = multiprocessing.get_context(start_method)
        self.results: Any = ctx.Queue()
        self.commands: list[Any] = [ctx.Queue() for _ in range(processes)]
        # killed with us, however we die (a SIGKILLed bench left them running, blocked
        # on their pipes; a bench audit); a fork server's are its children, not ours.
        # Tied to the thread that starts them: only from the main thread, which outlives
        # them (a review)
        via_server = start_method == "forkserver"
        parent = (None if via_server
                  or threading.current_thread() is not threading.main_thread()
                  else os.getpid())
        self.processes = [ctx.Process(target=worker.serve,
                                      args=(i, q, self.results, parent, via_server),
                                      name=f"bench-worker-{i}", daemon=True)
                          for i, q in enumerate(self.commands)]
        try:
            with _stops_held_back():
                for proc in self.processes:
                    proc.start()
        except BaseException:  # interrupted while starting them: stop those started
            for proc in self.processes:
                if proc.pid is not None:
                    proc.kill()
                    proc.join(timeout=5)
            raise

    def run(self, spec: dict[str, Any], workers: int, duration: float,
            at_start: Callable[[], Any]) -> tuple[list[dict[str, Any]], list[str], Any]:
        """Run ``spec`` on the first ``workers`` workers for ``duration`` seconds.

        ``at_start`` runs once every worker is ready, just before the window opens.
        Returns the workers' reports, their errors and what ``at_start`` returned.
        """
        for q in self.commands[:workers]:
            q.put(spec)
        ready, errors = self._collect(workers, time.monotonic() + READY_TIMEOUT_S)
        started = at_start()
        start = time.time() + 0.05
        window = {"start": start, "end": start + (duration if not errors else 0.0)}
        for report in ready:
            self.commands[report["worker"]].put(window)
        reports, late = self._collect(len(ready), time.monotonic() + duration + REPORT_GRACE_S)
        return reports, errors + late, started

    def _collect(self, count: int, deadline: float) -> tuple[list[dict[str, Any]], list[str]]:
        good: list[dict[str, Any]] = []
        errors: list[str] = []
        while len(good) + len(errors) < count:
            try:
                report = self.results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkersStuck(f"{count - len(good) - len(errors)} worker(s) stopped "
                                   "answering") from None
            if "error" in report:
                errors.append(f"worker {report['worker']}: {report['error']}")
            else:
                good.append(report)
        return good, errors

    def close(self, *, at_once: bool = False) -> None:
        """Stop the workers: asked to, or (``at_once``: interrupted) by SIGKILL. They
        hold nothing but their connections, and a worker still starting up would print
        a traceback for a SIGTERM."""
        if at_once:
            # Killed workers read nothing more: a queue's feeder thread still flushing to
            # one would hold up this process's exit for ever in ``Queue._finalize_join``
            # (a contract audit caught `timeout 60 seckill bench` still running after
            # 11 minutes, once in seven SIGTERMs). What is unsent is dropped.
            for q in [*self.commands, self.results]:
                q.cancel_join_thread()
        for q in self.commands:
            q.put(None)
        for proc in self.processes:
            if at_once and proc.is_alive():
                proc.kill()
            proc.join(timeout=5 if at_once else 10)
            if proc.is_alive():
                logger.warning("killing bench worker pid %s", proc.pid)
                proc.kill()
                proc.join(timeout=5)
        if self.start_method == "forkserver":
            _stop_forkserver()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(at_once=exc_type is not None)


def _stop_forkserver() -> None:
    """Stop the fork server our workers came from (it would live as long as we do).

    ``multiprocessing`` has no public way to; ``_stop`` (Python 3.9+) closes its pipe
    and reaps it by pid, and the next pool starts a new one."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if callable(stop):
        stop()
