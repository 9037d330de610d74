"""Lock holders that run in their own process, so tests can kill, pause and count them.

Run as ``python -m tests.lockcore.holders '<json spec>'``. The spec names a ``mode``, a
``strategy``, a ``backend`` (``{"redis": url}``, ``{"redlock": [urls]}``,
``{"zookeeper": hosts}`` or null for ``local``), a ``resource`` and lock ``options``.
Each process reports on stdout, one JSON object a line, and takes orders on stdin.

* ``hold``       acquire, report ``{"held": true, "t": monotonic, "fence": n}``, then
                 obey stdin lines: ``check`` reports ``held()`` and what ``release()``
                 raised; ``release`` releases; EOF exits (without releasing).
* ``window``     setnx-expire only: report ``{"window": true}`` between SETNX and EXPIRE,
                 then sleep in that gap until killed.
* ``contests``   a reusable worker (process start-up costs more than a contest): for
                 each JSON spec line on stdin, build that lock, report ``{"ready": true}``,
                 wait for a ``go`` line, make ``rounds`` acquisitions and report
                 ``{"sections": [[start_ns, end_ns, fencing_token], ...]}`` (or
                 ``{"error": ...}``). Times are the system-wide CLOCK_MONOTONIC.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import lockcore


def build_backend(spec: Any) -> Any:
    if spec is None:
        return None
    import redis

    if "redis" in spec:
        return redis.Redis.from_url(spec["redis"])
    if "redlock" in spec:
        return [redis.Redis.from_url(url, socket_timeout=0.5) for url in spec["redlock"]]
    return spec["zookeeper"]


def report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def hold(lock: lockcore.DistributedLock) -> None:
    assert lock.acquire(timeout=10)
    report(held=True, t=time.monotonic(), fence=lock.fencing_token)
    for line in sys.stdin:
        order = line.strip()
        if order == "check":
            held = lock.held()
            try:
                lock.release()
                outcome = "released"
            except lockcore.LockNotOwned as exc:
                outcome = type(exc).__name__
            report(held=held, release=outcome, lost=lock.lost)
        elif order == "release":
            lock.release()
            report(released=True)


def compete(lock: lockcore.DistributedLock, rounds: int) -> list[tuple[int, int, Any]]:
    sections = []
    for _ in range(rounds):
        if not lock.acquire(timeout=60):
            raise RuntimeError("no turn within 60 s")
        start = time.monotonic_ns()
        time.sleep(0.0002)  # a section long enough for an intruder to land inside it
        end = time.monotonic_ns()
        sections.append((start, end, lock.fencing_token))
        lock.release()
    return sections


def contests() -> None:
    for line in sys.stdin:
        try:
            spec = json.loads(line)
            lock = lockcore.create(spec["strategy"], build_backend(spec["backend"]),
                                   spec["resource"], **spec["options"])
            report(ready=True)
            sys.stdin.readline()  # the start barrier: everyone is ready before anyone competes
            report(sections=compete(lock, spec["rounds"]))
        except Exception as exc:  # report it; the parent fails the test with it
            report(error=repr(exc))


def main(raw: str) -> None:
    spec = json.loads(raw)
    options = spec.get("options", {})
    mode = spec["mode"]
    if mode == "contests":
        contests()
        return
    if mode == "window":
        options["crash_between"] = lambda: report(window=True)
        options["gap_s"] = 60.0
    lock = lockcore.create(spec["strategy"], build_backend(spec.get("backend")),
                           spec.get("resource", "res"), **options)
    if mode == "hold":
        hold(lock)
    elif mode == "window":
        lock.acquire(blocking=False)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])
