"""What can go wrong with a purchase, as exceptions that know their HTTP answer.

The service layer raises these without knowing about Flask; ``errors.py`` turns each
into ``{"error": code, "detail": ...}`` with ``status``. Contention is not a bug: a
lock not acquired in time is ``Busy`` (503 with ``Retry-After``), never a 500.
"""

from __future__ import annotations

from typing import Any, ClassVar


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


class SoldOut(ShopError):
    code, status = "sold_out", 409


class AlreadyPurchased(ShopError):
    code, status = "already_purchased", 409


class Busy(ShopError):
    """Try again shortly: the lock was not acquired in time, or a backend is down."""

    code, status = "busy", 503

    def __init__(self, detail: str, retry_after_s: int = 1) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


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


class Replay(Exception):
    """Internal: this Idempotency-Key already produced ``order``; answer it again (200)."""

    def __init__(self, order: Any) -> None:
        super().__init__("idempotent replay")
        self.order = order
