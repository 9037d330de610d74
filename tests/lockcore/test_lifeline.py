"""A redis-server started from the main thread dies with its parent, even a parent
killed by SIGKILL (which runs no cleanup); one started from another thread is not tied
to that thread's end; a process tied with KILL dies with its parent even while frozen
by SIGSTOP, where one tied with TERM stays frozen (``lockcore/lifeline.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from lockcore.lifeline import tied_to_parent
from tests.support import gone_within, need_setpriv, running, state

pytestmark = pytest.mark.timeout(60)

PARENT = r'''
import threading, time
from lockcore.embedded import RedisServer
main = RedisServer().start()
box = []
worker = threading.Thread(target=lambda: box.append(RedisServer().start()))
worker.start()
worker.join()  # the thread that started it has ended
time.sleep(0.5)
print(main.proc.pid, box[0].proc.pid, flush=True)
time.sleep(120)
'''


@contextlib.contextmanager
def parent_of_two(script: str, env: dict[str, str] | None = None
                  ) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """A Python parent running ``script``, which prints the pids of the two processes it
    started; on leaving, the parent and both are killed by pid, whatever the test did."""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL, env=env)
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.communicate(timeout=5)
        yield parent, pids
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_server_from_the_main_thread_dies_with_a_parent_killed_by_sigkill(tmp_path):
    need_setpriv("a server tied to its parent")
    # TMPDIR: the servers' dirs, left by the SIGKILL
    with parent_of_two(PARENT, {**os.environ, "TMPDIR": str(tmp_path)}) as (parent, pids):
        from_main, from_thread = pids
        # the worker thread's end did not take its server with it
        assert running(from_thread), "a server died with the thread that started it"
        parent.kill()
        parent.wait(timeout=10)
        assert gone_within(from_main, 10), "SIGKILL left the parent's redis-server running"
        assert running(from_thread)  # not tied: stopped by pid (on leaving), as before


FREEZER = r'''
import subprocess, time
from lockcore.lifeline import tied_to_parent
kill = subprocess.Popen(tied_to_parent(["sleep", "120"], "KILL"), start_new_session=True)
term = subprocess.Popen(tied_to_parent(["sleep", "120"], "TERM"), start_new_session=True)
print(kill.pid, term.pid, flush=True)
time.sleep(120)
'''


def _execd_sleep(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().split(b"\0")[0] == b"sleep"
    except OSError:
        return False


def _pending(pid: int) -> int:
    """The signals pending for the whole process (a bit per signal, SIGTERM is bit 14)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("ShdPnd:"):
                return int(line.split()[1], 16)
    return 0


def test_a_frozen_child_tied_with_kill_dies_with_its_parent_one_tied_with_term_stays_frozen():
    need_setpriv("children tied with KILL and TERM")
    with parent_of_two(FREEZER) as (parent, pids):
        with_kill, with_term = pids
        deadline = time.monotonic() + 10
        while not all(_execd_sleep(pid) for pid in pids):  # setpriv has set PDEATHSIG
            assert time.monotonic() < deadline, "setpriv never exec'd sleep"
            time.sleep(0.01)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # frozen, as the labs freeze a server or a holder
        deadline = time.monotonic() + 10
        while {state(pid) for pid in pids} != {"T"} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [state(pid) for pid in pids] == ["T", "T"]
        parent.kill()
        parent.wait(timeout=10)
        assert gone_within(with_kill, 10), "a frozen child tied with KILL outlived its parent"
        # TERM was sent (it is pending) but a stopped process acts on SIGKILL only: it
        # would stay frozen, holding whatever it holds, until someone sent SIGCONT
        deadline = time.monotonic() + 10
        while not _pending(with_term) & (1 << (signal.SIGTERM - 1)):
            assert time.monotonic() < deadline, "the parent's death sent no SIGTERM"
            time.sleep(0.01)
        time.sleep(0.5)
        assert state(with_term) == "T"


def test_an_unknown_signal_name_is_refused():
    with pytest.raises(ValueError, match="not a signal name"):
        tied_to_parent(["true"], "TREM")


def test_a_command_from_another_thread_is_left_as_it_is():
    import threading

    seen: list[list[str]] = []
    worker = threading.Thread(target=lambda: seen.append(tied_to_parent(["redis-server"])))
    worker.start()
    worker.join()
    assert seen == [["redis-server"]]
