"""Judge one purchase response: an honest refusal, an order, or a wrong answer.

A flash sale *should* turn most buyers away, so Locust must not count ``409 sold_out``,
``409 already_purchased`` or ``503 busy`` as failures: they are the shop working. What
Locust must flag is a shop lying or breaking: a 500, a body that is not the documented
JSON, an order for somebody else, or more orders than there were units. This module has
no Locust import, so it can be unit-tested and reused by the showdown.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

ORDER = "order"
SOLD_OUT = "sold_out"
ALREADY_PURCHASED = "already_purchased"
BUSY = "busy"
ERROR = "error"
#: an attempt sent and still unanswered when Locust stopped the run (a flash sale's cap,
#: a sustained run's --run-time): the buyer was killed mid-request and heard nothing.
#: Not logged, a showdown audit's 4 buyers still waiting for the lock at the 35 s cap
#: were missing from the log: "0 purchase attempts had no answer", fairness 0.60
CUT_OFF = "cut_off"
#: the no-op baseline's good answer (``POST /api/noop``)
NOOP = "noop"

#: the Locust stats name of every purchase, whatever the sku (one row in the CSVs)
PURCHASE_NAME = "/api/products/[sku]/purchase"
#: how long a buyer waits for an answer before it counts as none (``locustfile.Buyer``)
ANSWER_TIMEOUT_S = 30.0
BROWSE_NAME = "/api/products/[sku]"
NOOP_NAME = "/api/noop"

#: (status, error code) pairs the contract documents as a correct refusal
_REFUSALS = {(409, SOLD_OUT): SOLD_OUT, (409, ALREADY_PURCHASED): ALREADY_PURCHASED,
             (503, BUSY): BUSY}


class Verdict(NamedTuple):
    outcome: str
    #: why this answer is wrong; None when the shop answered correctly
    failure: str | None = None


def judge_purchase(status: int, body: Any, user_id: str) -> Verdict:
    """Classify a ``POST /api/products/<sku>/purchase`` answer for buyer ``user_id``."""
    if status in (200, 201):
        return _judge_order(body, user_id)
    if status == 0:
        return Verdict(ERROR, "no HTTP response (connection error or timeout)")
    code = body.get("error") if isinstance(body, dict) else None
    refusal = _REFUSALS.get((status, code)) if isinstance(code, str) else None
    if refusal is not None:
        return Verdict(refusal)
    if isinstance(code, str):
        return Verdict(ERROR, f"unexpected HTTP {status} {code}")
    return Verdict(ERROR, f"unexpected HTTP {status} without a JSON error body")


def _judge_order(body: Any, user_id: str) -> Verdict:
    if not isinstance(body, dict):
        return Verdict(ERROR, "order response is not a JSON object")
    missing = [key for key in ("order_id", "sku", "user_id", "quantity") if key not in body]
    if missing:
        return Verdict(ERROR, f"order response lacks {', '.join(missing)}")
    if body["user_id"] != user_id:
        return Verdict(ERROR, f"order for {body['user_id']!r}, not for buyer {user_id!r}")
    if not isinstance(body["quantity"], int) or body["quantity"] < 1:
        return Verdict(ERROR, f"order quantity {body['quantity']!r} is not a positive integer")
    return Verdict(ORDER)


def judge_noop(status: int, body: Any, user_id: str) -> Verdict:
    """Classify a ``POST /api/noop`` answer: the baseline is judged like a purchase (same
    parse, a check of the body) so the load generator spends the same on both sides."""
    if status != 200:
        return Verdict(ERROR, f"unexpected HTTP {status} from the no-op endpoint")
    if not isinstance(body, dict) or body.get("ok") is not True:
        return Verdict(ERROR, f"no-op answer for {user_id!r} is not {{\"ok\": true}}")
    return Verdict(NOOP)


class OrderTally:
    """Units this process saw sold; an order past ``stock`` is an oversell caught live.

    Each Locust process only sees its own buyers, so in distributed mode this is a lower
    bound: the audit endpoint remains the authority on oversold units.
    """

    def __init__(self, stock: int | None) -> None:
        self.stock = stock
        self.units = 0

    def record(self, quantity: int) -> Verdict:
        self.units += quantity
        if self.stock is not None and self.units > self.stock:
            # one message for every such order: Locust groups failures by it (one row
            # per unit filled its error table, 250 of them; a Locust audit)
            return Verdict(ORDER, f"order beyond the stock of {self.stock}")
        return Verdict(ORDER)


def retry_delay(retry_after: str | None, cap_s: float = 1.0) -> float:
    """Seconds to wait after ``503 busy``: the shop's Retry-After, capped, with jitter so
    the retries do not arrive as a second synchronized spike."""
    try:
        asked = max(float(retry_after or 0.2), 0.05)
    except ValueError:
        asked = 0.2
    return random.uniform(0.05, max(min(asked, cap_s), 0.05))
