"""What can go wrong with a purchase, as exceptions that know their HTTP answer.

The service layer raises these without knowing about Flask; ``errors.py`` turns each
into ``{"error": code, "detail": ...}`` with ``status``. Contention is not a bug: a
lock not acquired in time is ``Busy`` (503 with ``Retry-After``), never a 500.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s text ("" for none): what a one-line message quotes
    of a server's answer."""
    return (str(error).strip().splitlines() or [""])[0]


#: how many characters of a client's own text an error detail quotes
QUOTED_MOST = 64


def quoted(text: str, most: int = QUOTED_MOST) -> str:
    """``text`` quoted (``repr``) for an error detail, cut to ``most`` characters with
    "…": a 32,000-character duplicate JSON key came back whole in a 32 KB 400, and an
    8,000-character Content-Encoding too (a text audit)."""
    return repr(text if len(text) <= most else text[:most] + "…")


class ShopError(Exception):
    code: ClassVar[str] = "error"
    status: ClassVar[int] = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(ShopError):
    code, status = "invalid_request", 400


class Unauthorized(ShopError):
    code, status = "unauthorized", 401


class UnknownSku(ShopError):
    code, status = "unknown_sku", 404


class SlowBody(ShopError):
    """The request's body did not arrive in time (``validation.BODY_S``)."""

    code, status = "request_timeout", 408


class SoldOut(ShopError):
    code, status = "sold_out", 409


class AlreadyPurchased(ShopError):
    code, status = "already_purchased", 409


def not_enough(sku: str, left: int) -> SoldOut:
    """The 409 for a purchase of more units than are left: how many are, if any."""
    return SoldOut(f"only {left} left of {sku}" if left > 0 else f"{sku} is sold out")


def already_bought(user_id: str, sku: str) -> AlreadyPurchased:
    """The 409 for a user who has an order in this sale."""
    return AlreadyPurchased(f"{quoted(user_id)} already bought {sku}")


class Busy(ShopError):
    """Try again shortly: the lock was not acquired in time, or a backend is down."""

    code, status = "busy", 503

    def __init__(self, detail: str, retry_after_s: int = 1) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


def silent_servers(lock: Any) -> str | None:
    """"3 of 5 lock servers did not answer" when too many of ``lock``'s servers were
    silent at its last try for a majority to be possible (RedLock's ``unanswered``);
    None when a holder, not the servers, kept it."""
    unanswered = getattr(lock, "unanswered", 0)
    if not unanswered:
        return None
    nodes = len(getattr(lock, "clients", None) or ())
    if unanswered > nodes - getattr(lock, "quorum", nodes):
        return f"{unanswered} of {nodes} lock servers did not answer"
    return None


#: how long a cohort's "the servers did not answer" stands for its queued buyers, unless
#: a try of the lock is granted or answered by a majority meanwhile (``lockpassing.py``)
REASON_KEPT_S = 30.0


def lock_not_taken(sku: str, lock: Any, timeout_s: float,
                   budget_s: float | None = None) -> Busy:
    """The 503 of a stock lock not acquired within ``timeout_s``. It says so when the
    lock's servers kept it, not other buyers: it said "not free" with every RedLock node
    down (a README audit). ``lock`` is the purchase's handle: a cohort's asks why its
    cohort's tries failed lately (``CohortLock.silent_servers_since``): a buyer queued
    behind the worker's leader made no try of its own."""
    asked = getattr(lock, "silent_servers_since", None)
    if callable(asked):
        why = asked(time.monotonic() - max(timeout_s, REASON_KEPT_S))
    else:
        why = silent_servers(lock)
    # the buyer's whole lock timeout (``budget_s``; else what was left of it), rounded
    # ("within 0.0599835s" read oddly, and a whole 10 s less a slot's milliseconds
    # "within 9.99s"); none: the buyer's wait for its own earlier purchase took it
    told = timeout_s if budget_s is None else budget_s
    digits = 1 if told >= 1 else 2
    within = f"within {round(told, digits):g}s" if told >= 0.01 else "in time"
    if why:
        return Busy(f"the stock lock for {sku} could not be taken {within}: {why}",
                    retry_after_s=1)
    return Busy(f"the stock lock for {sku} was not free {within}", retry_after_s=1)


class OrderInDoubt(Busy):
    """The order's write failed in a way that may have committed it (the database's
    reply to the COMMIT was lost), and the database could not be asked whether it did.
    Its units stay taken and the buyer reserved until a later check finds the row (it
    is the buyer's order) or its absence (the units go back): ``orders.IN_DOUBT``."""

    def __init__(self, sku: str) -> None:
        super().__init__(f"the order for {sku} may or may not have been written; it will "
                         "be checked shortly: try again in a few seconds", retry_after_s=2)


class SaleReset(Busy):
    """The sale was reset while this purchase was in flight: the units it took belong
    to the sale that was reset (its orders deleted, its stock replaced), so they are
    not given back to the new one, and the purchase is not recorded. Try again."""

    def __init__(self, sku: str) -> None:
        super().__init__(f"the sale of {sku} was reset while this purchase was in flight; "
                         "try again", retry_after_s=1)


class SaleMovedOn(SaleReset):
    """``SaleReset`` told by the database: it refused the order row, being in a newer
    sale generation than the Redis copy the purchase read. (Redis saying so, a script's
    stock or a shard of another generation, may be a reset still writing its new sale
    there: no sign that the copy is stale.)"""


class Replay(Exception):
    """Internal: this Idempotency-Key already produced ``order``; answer it again (200)."""

    def __init__(self, order: Any) -> None:
        super().__init__("idempotent replay")
        self.order = order
