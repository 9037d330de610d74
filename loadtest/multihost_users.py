"""Locust buyers for a multi-host run: each worker buys from its own web instance.

Locust sends the master's ``--host`` and options to every worker, so a per-worker
target cannot come from the command line. ``SECKILL_TARGETS`` (comma-separated base
URLs, read from each process's environment) can: worker ``i`` sends all its buyers to
``targets[i % n]``, the way two load generators on two machines would each hit their
nearest web host; a single non-distributed process round-robins its buyers instead::

    SECKILL_TARGETS=http://127.0.0.1:8001,http://127.0.0.1:8002 \\
        locust -f loadtest/multihost_users.py,loadtest/shapes.py --worker ...

Everything else (the spike barrier, the ``--seckill-*`` options, the arrival log,
the oversell check) is the flash-sale locustfile's, imported unchanged.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from locust import run_single_user

from loadtest import locustfile as flash  # registers the flash-sale options and events

TARGETS = [t.strip().rstrip("/") for t in os.environ.get("SECKILL_TARGETS", "").split(",")
           if t.strip()]
_turns = itertools.count()


def pick_target(worker_index: int | None) -> str | None:
    """The base URL for the next buyer: fixed per worker, round-robin otherwise."""
    if not TARGETS:
        return None
    turn = next(_turns) if worker_index is None else worker_index
    return TARGETS[turn % len(TARGETS)]


class MultiHostBuyer(flash.Buyer):
    def __init__(self, environment: Any) -> None:
        target = pick_target(getattr(environment.runner, "worker_index", None))
        if target is not None:
            self.host = target  # an instance attribute wins over the master's --host
        super().__init__(environment)


if __name__ == "__main__":
    run_single_user(MultiHostBuyer)
