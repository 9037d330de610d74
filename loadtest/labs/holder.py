"""A lock holder in another process, so a lab can really crash it (SIGKILL) or freeze
it (SIGSTOP), and a parent that drives it line by line.

A thread cannot be SIGKILLed or SIGSTOPped on its own, and a "crash" simulated by an
exception still runs ``finally: release()``. The crash and pause labs therefore put the
holder in a child process and talk to it over pipes: the child prints one line per
event (``ACQUIRED 7``, ``IN_GAP``, ``RELEASED``); the parent waits for those lines
(bounded), then signals the child by pid.

An orphan cannot outlive a lab whose parent died: every child is started tied to its
parent with ``PR_SET_PDEATHSIG`` = SIGKILL (``lockcore.lifeline``), so the kernel kills
it when the lab dies, even a lab killed by SIGKILL, even while the child is frozen by
SIGSTOP (a stopped process acts on nothing else: a SIGTERM, or the ``alarm()`` below,
would wait for a SIGCONT that nobody sends). Every child also arms ``alarm(MAX_LIFE_S)``,
a safety net for where setpriv is missing, which works only while it runs.

Child protocol (``python -m loadtest.labs.holder STRATEGY URL RESOURCE [--ttl-ms N]``)::

    -> ACQUIRED <fencing token or ->      after acquire()
    <- release                            -> RELEASED | NOT_OWNED <reason>
    with --stop-in-gap (setnx-expire):    -> IN_GAP, then waits on stdin before EXPIRE
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType

from lockcore.lifeline import tied_to_parent

MAX_LIFE_S = 60


class Child:
    """A ``python -m <module> <args>`` child; line-oriented stdin/stdout; stopped by pid."""

    def __init__(self, module: str, args: Sequence[str]) -> None:
        # KILL: the labs freeze this child (SIGSTOP), and a stopped process acts on nothing else
        self.proc = subprocess.Popen(
            tied_to_parent([sys.executable, "-m", module, *args], "KILL"), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, prefix: str, timeout: float = 10.0) -> str:
        """The child's next line, which must start with ``prefix``; waits at most ``timeout``."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError(f"child {self.pid} said nothing for {timeout}s "
                                   f"(expected {prefix!r})")
        line = self.proc.stdout.readline().strip()
        if not line.startswith(prefix):
            raise RuntimeError(f"child {self.pid} said {line!r}, expected {prefix!r}")
        return line[len(prefix):].strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> int:
        """SIGKILL (a crash: no finally, no release) and reap; returns the exit status."""
        self.signal(signal.SIGCONT)  # a stopped child must die too
        self.signal(signal.SIGKILL)
        return self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def hold(strategy: str, url: str, resource: str, *, ttl_ms: int | None = None,
         stop_in_gap: bool = False) -> Child:
    """Start a child that acquires ``strategy`` on ``resource`` and waits for orders."""
    args = [strategy, url, resource]
    if ttl_ms is not None:
        args += ["--ttl-ms", str(ttl_ms)]
    if stop_in_gap:
        args.append("--stop-in-gap")
    return Child(__name__, args)


def _child_main(argv: Sequence[str]) -> int:
    import redis

    import lockcore

    parser = argparse.ArgumentParser()
    parser.add_argument("strategy")
    parser.add_argument("url")
    parser.add_argument("resource")
    parser.add_argument("--ttl-ms", type=int)
    parser.add_argument("--stop-in-gap", action="store_true")
    args = parser.parse_args(argv)
    signal.alarm(MAX_LIFE_S)
    options: dict[str, object] = {}
    if args.ttl_ms is not None:
        options["ttl_ms"] = args.ttl_ms
    if args.stop_in_gap:
        def in_gap() -> None:
            print("IN_GAP", flush=True)
            sys.stdin.readline()  # the parent SIGKILLs us here

        options["crash_between"] = in_gap
    client = redis.Redis.from_url(args.url)
    lock = lockcore.create(args.strategy, client, args.resource, **options)
    lock.acquire(timeout=10)
    token = lock.fencing_token
    print(f"ACQUIRED {'-' if token is None else token}", flush=True)
    for line in sys.stdin:
        if line.strip() == "release":
            try:
                lock.release()
                print("RELEASED", flush=True)
            except lockcore.LockNotOwned as exc:
                print(f"NOT_OWNED {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
