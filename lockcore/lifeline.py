"""Servers we start die with the process that started them, even one killed by SIGKILL.

``seckill serve``, the showdown, the labs and the tests stop what they started by pid
on Ctrl-C, SIGTERM, SIGHUP and at exit. A SIGKILL (the OOM killer, ``kill -9``, a CI
runner's hard stop) runs none of that: gunicorn, redis-server and ZooKeeper ran on with
no parent, holding their ports, until someone found them.

Linux's ``PR_SET_PDEATHSIG`` has the kernel send a signal to a process when its parent
dies. We set it with ``setpriv --pdeathsig SIG -- <command>`` (util-linux): setpriv
sets it and execs the command, which keeps it (same pid, so stopping by pid is
unchanged). That is an exec'd program, not Python run between fork and exec
(``preexec_fn``), which can deadlock a process with threads.

Which signal: TERM lets a server stop its own way (gunicorn and Locust stop their
workers). But the labs freeze processes with SIGSTOP, and a stopped process acts on
no signal but SIGKILL: a SIGTERM sent to it stays pending until someone sends SIGCONT,
and after its parent's death nobody will, so it stays frozen, holding its port, for
ever (``alarm()`` in a frozen child never fires either). A process a lab may freeze
(the scratch redis-servers and ZooKeepers, the labs' holder children) is tied with
KILL, which the kernel carries out on a stopped process too. KILL is only for what
has nothing to save: they run without persistence, in temp dirs nobody reads once
their parent is gone.

The "parent" is the *thread* that forked the child: a server started from a worker
thread would get its signal when that thread ends. So only servers started from the
main thread are tied; others (and machines without setpriv or without Linux) start
as before, stopped by pid as before.
"""

from __future__ import annotations

import functools
import shutil
import signal as signals
import subprocess
import sys
import threading
from collections.abc import Sequence


@functools.cache
def _setpriv() -> str | None:
    """setpriv's path if it has ``--pdeathsig`` (util-linux 2.33 and later)."""
    if not sys.platform.startswith("linux"):
        return None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    try:
        done = subprocess.run([setpriv, "--pdeathsig", "TERM", "--", "true"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return setpriv if done.returncode == 0 else None


def tied_to_parent(command: Sequence[str], signal: str = "TERM") -> list[str]:
    """``command`` so that it gets ``signal`` (a name: "TERM", "KILL") when this process
    dies, however it dies (when called from the main thread on Linux with setpriv;
    ``command`` unchanged otherwise).

    TERM for a process that shuts down its own way (gunicorn, Locust); "KILL" for one
    that may be frozen by SIGSTOP when its parent dies: a stopped process acts on
    SIGKILL only, a SIGTERM would wait for a SIGCONT that never comes."""
    if f"SIG{signal}" not in signals.Signals.__members__:
        raise ValueError(f"not a signal name: {signal!r} (TERM, KILL, ...)")
    if threading.current_thread() is not threading.main_thread():
        return list(command)
    setpriv = _setpriv()
    if setpriv is None:
        return list(command)
    return [setpriv, "--pdeathsig", signal, "--", *command]


def die_with_parent(parent_pid: int | None, signal: int = signals.SIGKILL) -> None:
    """Called first thing in a Python child (a ``multiprocessing`` worker, which no
    command line wraps): the kernel sends it ``signal`` when its parent thread dies.
    ``parent_pid``: the pid that started it, or None if another process forked it (a
    fork server); a parent already gone by the time this ran ends the child at once.

    Without it a SIGKILLed ``seckill bench`` left its workers blocked on their command
    pipes for ever (a bench audit). Linux only; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import os

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, int(signal), 0, 0, 0) != 0:
        return  # refused: stopped by pid as before
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # died before the tie was made
