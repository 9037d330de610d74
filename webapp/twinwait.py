"""A purchase whose buyer is reserved already, with no order behind the reservation.

One order per user per sale starts with a reservation (``SADD sale:{sku}:buyers``). A
second purchase of the same user that finds it may not answer 409 ``already_purchased``
yet: the first may still fail (sold out, busy) and leave the unit to this one. So it
waits for the first, looking again with a pause that doubles from 20 ms to 0.5 s (each
look is a Redis script and a database read: a double click should not cost fifty).

**Failure timeline** of waiting for good (a review of the wait)::

    carol:   buys; reserved; her worker is killed mid-purchase: no order, and the
             reservation stays, with nobody left to drop it
    carol:   buys again: waits 10 s for a purchase that no longer runs: 503 "still
             running", and so on every retry until the sale's next reset

So past ``replay_wait_s`` (10 s) the wait drops the reservation if it is still the one it
found at the start (``undo_lost.lua``, by that purchase's nonce), once, and looks again.
If that purchase was only slow, not gone, both now run; the database's
``UNIQUE(sale_id, user_id)`` stops the second order, and its units go back.
"""

from __future__ import annotations

import logging
from typing import Any

from . import scripts
from .keys import SaleKeys
from .problems import Busy, quoted

logger = logging.getLogger(__name__)

#: the first pause before looking again, and the longest (it doubles in between)
FIRST_PAUSE_S, MAX_PAUSE_S = 0.02, 0.5


class TwinWait:
    """One purchase's wait for its buyer's other purchase in flight."""

    def __init__(self, deps: Any, sku: str, user_id: str, keyed: bool) -> None:
        self._deps, self._sku, self._user_id, self._keyed = deps, sku, user_id, keyed
        self._started = deps.monotonic()
        self._pause = FIRST_PAUSE_S
        self._keys = SaleKeys(sku)
        #: the nonce of the purchase holding the reservation when the wait began
        self._found: bytes | None = deps.redis.hget(self._keys.reservations, user_id)
        self._dropped = False

    @property
    def waited_s(self) -> float:
        return self._deps.monotonic() - self._started

    def look_again(self) -> None:
        """Pause before the next look; past ``replay_wait_s``, drop a reservation its
        purchase left (once) and look again at once, else 503 ``busy``."""
        if self.waited_s <= self._deps.replay_wait_s:
            self._deps.sleep(self._pause)
            self._pause = min(self._pause * 2, MAX_PAUSE_S)
            return
        if not self._dropped:
            self._dropped = True
            if self._drop_left_reservation():
                return
        again = " with the same Idempotency-Key" if self._keyed else ""
        raise Busy(f"an earlier purchase of {self._sku} by {quoted(self._user_id)} is still "
                   f"running; try again{again}")

    def _drop_left_reservation(self) -> bool:
        if self._found is None:  # a reservation with no nonce: not ours to judge
            return False
        keys = self._keys
        dropped = scripts.script(self._deps.redis, "undo_lost")(
            keys=[keys.buyers, keys.reservations, keys.info, keys.stock, keys.soldout],
            args=[self._user_id, self._found, 0, "0"])
        if dropped:
            logger.warning("dropped the reservation of %r (%s): no order, and the purchase "
                           "that made it still not done after %.0f s (its worker gone?)",
                           self._user_id, self._sku, self.waited_s)
        return bool(dropped)
