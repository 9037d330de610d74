"""kazoo's ``Lock.acquire`` on a thread of its own, so that its caller can leave it.

kazoo queues every call made while the connection is down and waits for its reply
with no limit. A waiter already inside ``Lock.acquire`` when ZooKeeper goes away
therefore blocks until ZooKeeper comes back, whatever ``timeout`` it was given: its
wake-up re-reads the children, and that read waits out the outage. (kazoo also arms
each watch wait with the whole timeout again.) A flash-sale purchase must answer
"busy" within its lock timeout instead.

So the recipe runs on a thread (a greenlet under gevent) and the caller waits for it
at most its timeout plus ``LEAVE_GRACE_S``. A caller that leaves *abandons* the
attempt: it cancels the recipe, which deletes its own znode once it can reach the
server again, and an attempt that wins the lock after all hands it straight on. A
lost session deletes the ephemeral znode anyway. Either way no abandoned node stays
in the queue to block the waiters behind it (seed 001's ghost).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .zookeeper_release import delete_later

logger = logging.getLogger(__name__)

#: how long past its timeout a caller waits for kazoo's reply before it leaves
#: (a release or a cleanup in flight takes a round trip, not this long)
LEAVE_GRACE_S = 0.5


class Attempt:
    """One ``recipe.acquire(blocking, timeout)``, started at once on its own thread."""

    def __init__(self, recipe: Any, blocking: bool, timeout: float | None) -> None:
        self.recipe = recipe
        self.gotten = False
        self.error: BaseException | None = None  # what acquire raised (its timeout too)
        self._done = threading.Event()
        self._guard = threading.Lock()
        self._abandoned = False
        threading.Thread(target=self._run, args=(blocking, timeout), daemon=True,
                         name=f"zookeeper-acquire {recipe.path}").start()

    def _run(self, blocking: bool, timeout: float | None) -> None:
        gotten, error = False, None
        try:
            gotten = bool(self.recipe.acquire(blocking=blocking, timeout=timeout))
        except BaseException as exc:  # handed to the caller, if it is still there
            error = exc
        with self._guard:
            self.gotten, self.error = gotten, error
            self._done.set()
            abandoned = self._abandoned
        if abandoned and gotten:  # nobody is waiting for it any more: pass it on
            self._pass_on()

    def _pass_on(self) -> None:
        try:
            self.recipe.release()
        except Exception as exc:
            # a session that survives the connection's loss keeps the node, and the lock,
            # for good: sent again once it is back (``zookeeper_release.py``; a review)
            node = getattr(self.recipe, "node", None)
            if node:
                delete_later(self.recipe.client, self.recipe.path, node)
            logger.warning("zookeeper lock %s: could not release an abandoned "
                           "acquisition (sent again once the session is back): %r",
                           self.recipe.path, exc)

    def finished_within(self, seconds: float | None) -> bool:
        """Wait up to ``seconds``; False means the caller leaves and the attempt is abandoned."""
        try:
            if self._done.wait(seconds):
                return True
        except BaseException:  # interrupted: nobody would release what it wins
            if not self._abandon() and self.gotten:
                self._pass_on()
            raise
        return not self._abandon()

    def _abandon(self) -> bool:
        """Leave the attempt to clean up after itself; False if it finished meanwhile."""
        with self._guard:
            if self._done.is_set():  # it finished as we gave up: take its result
                return False
            self._abandoned = True
        self.recipe.cancel()  # a waiting recipe wakes, deletes its node, and ends
        return True
