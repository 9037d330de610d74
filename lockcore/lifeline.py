"""Servers we start die with the process that started them, even one killed by SIGKILL.

``seckill serve``, the showdown, the labs and the tests stop what they started by pid
on Ctrl-C, SIGTERM, SIGHUP and at exit. A SIGKILL (the OOM killer, ``kill -9``, a CI
runner's hard stop) runs none of that: gunicorn, redis-server and ZooKeeper ran on with
no parent, holding their ports, until someone found them.

Linux's ``PR_SET_PDEATHSIG`` has the kernel send a signal to a process when its parent
dies. We set it with ``setpriv --pdeathsig TERM -- <command>`` (util-linux): setpriv
sets it and execs the command, which keeps it (same pid, so stopping by pid is
unchanged). That is an exec'd program, not Python run between fork and exec
(``preexec_fn``), which can deadlock a process with threads.

The "parent" is the *thread* that forked the child: a server started from a worker
thread would get its SIGTERM when that thread ends. So only servers started from the
main thread are tied; others (and machines without setpriv or without Linux) start
as before, stopped by pid as before.
"""

from __future__ import annotations

import functools
import shutil
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


def tied_to_parent(command: Sequence[str]) -> list[str]:
    """``command`` so that it gets SIGTERM when this process dies, however it dies
    (when called from the main thread on Linux with setpriv; ``command`` unchanged
    otherwise)."""
    if threading.current_thread() is not threading.main_thread():
        return list(command)
    setpriv = _setpriv()
    if setpriv is None:
        return list(command)
    return [setpriv, "--pdeathsig", "TERM", "--", *command]
