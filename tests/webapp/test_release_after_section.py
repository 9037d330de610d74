"""A lock whose release fails after the section wrote the order: the buyer still hears
the order (``release_after_section`` logs the failure). Raised, it was an error for an
order that was made (a mutation survivor)."""

from __future__ import annotations

import redis

from webapp import sales
from webapp.services import Checkout, PurchaseRequest, checkout

SKU = "sku-1"


class ReleaseFails:
    fencing_token = 7

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return True

    def release(self) -> None:
        raise redis.ConnectionError("Connection reset by peer")


def test_a_release_that_fails_after_the_order_is_written_still_answers_the_order(
        sessions, redis_client):
    # SE6: release_after_section logs any release failure; raised, the buyer hears an
    # error for an order that was made (a 500, and an order nobody was told about)
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=3, strategy="token")
    sales.reset_sale(sessions, redis_client, SKU, stock=3, strategy="token")
    deps = Checkout(sessions=sessions, redis=redis_client,
                    lock_for=lambda sale, user: ReleaseFails(), sleep=lambda seconds: None)
    result = checkout(deps, PurchaseRequest(SKU, "ann"))
    assert result.created and result.order.user_id == "ann"
