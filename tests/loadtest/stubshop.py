"""A tiny shop speaking the HTTP contract, to test the load-test tools without the web app.

It sells ``stock`` units under a real lock, or, with ``oversell=N``, hands out ``N``
extra orders the way a broken lock would; the tests assert the tools notice.
Served by werkzeug on a free loopback port in a thread of the test process.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response


class StubShop:
    def __init__(self, stock: int = 10, oversell: int = 0, failing_resets: int = 0,
                 token: str = "t", busy_after: int | None = None,
                 section_s: float = 0.0, answers_lost_after: int | None = None,
                 strategies: tuple[str, ...] = ("naive", "token", "stub"),
                 unusable: dict[str, str] | None = None,
                 duplicate_buyers: int = 0, unwritten_at: int | None = None,
                 buyers_page: int = 10_000) -> None:
        self.lock = threading.Lock()
        #: the purchase made when this many orders exist is answered 201 and never
        #: written (once per sale): a lost order
        self.unwritten_at = unwritten_at
        #: the buyers ``GET /api/admin/sales/<sku>/buyers`` lists per page
        self.buyers_page = buyers_page
        #: what the audit reports as buyers with two orders (a broken one-per-buyer rule)
        self.duplicate_buyers = duplicate_buyers
        #: what ``GET /api/strategies`` names; ``unusable``: {name: what it lacks}
        self.strategies, self.unusable = strategies, dict(unusable or {})
        self.token = token
        #: how long a purchase that takes a unit holds the lock (simulated work)
        self.section_s = section_s
        #: after this many orders, an order is made but its answer is a 500 (lost)
        self.answers_lost_after = answers_lost_after
        #: after this many orders every purchase is 503 busy (a backend down mid-sale)
        self.busy_after = busy_after
        self.oversell = oversell
        self.failing_resets = failing_resets
        #: how many requests asked each path (counted under a lock of their own: under
        #: the sale's, held through a purchase's section, a page read waited for the
        #: sections, saw "sold out" and did not buy; a loaded suite's flash-sale run
        #: ended with 3 purchases of 4)
        self.paths: collections.Counter[str] = collections.Counter()
        self._counting = threading.Lock()
        self.reset(stock)

    def reset(self, stock: int, strategy: str = "stub") -> None:
        with self.lock:
            self.initial, self.remaining, self.strategy = stock, stock, strategy
            self.orders: list[str] = []
            #: buyers told 201 whose order was never written (``unwritten_at``)
            self.unwritten: list[str] = []

    def purchase(self, user_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.busy_after is not None and len(self.orders) >= self.busy_after:
                return 503, {"error": "busy", "detail": "redis is unavailable"}
            if user_id in self.orders:
                return 409, {"error": "already_purchased", "detail": "one per buyer"}
            if self.remaining <= -self.oversell:
                return 409, {"error": "sold_out", "detail": "no units left"}
            time.sleep(self.section_s)
            if len(self.orders) == self.unwritten_at and not self.unwritten:
                self.unwritten.append(user_id)  # told 201; no row, no unit taken
                return 201, {"order_id": 0, "sku": "sku-1", "user_id": user_id,
                             "quantity": 1}
            self.remaining -= 1
            self.orders.append(user_id)
            if self.answers_lost_after is not None and \
                    len(self.orders) > self.answers_lost_after:
                return 500, {"error": "internal_error", "detail": "the answer was lost"}
            return 201, {"order_id": len(self.orders), "sku": "sku-1",
                         "user_id": user_id, "quantity": 1}

    def audit(self) -> dict[str, Any]:
        sold = len(self.orders)
        oversold = max(sold - self.initial, 0)
        return {"initial_stock": self.initial, "remaining": max(self.remaining, 0),
                "orders": sold, "units_sold": sold, "oversold": oversold,
                "duplicate_buyers": self.duplicate_buyers, "consistent": oversold == 0}

    def buyers(self, after: str) -> dict[str, Any]:
        """A page of the buyers with an order, in order, after ``after``."""
        with self.lock:
            page = sorted(u for u in set(self.orders) if u > after)[:self.buyers_page]
        return {"buyers": page,
                "next": page[-1] if len(page) == self.buyers_page else None}

    def __call__(self, environ: Any, start_response: Any) -> Any:
        request = Request(environ)
        path, method = request.path, request.method
        with self._counting:
            self.paths[path] += 1
        if path == "/healthz":
            status, body = 200, {"redis": "ok", "database": "ok"}
        elif path == "/api/noop":
            status, body = 200, ({"ok": True} if method == "POST" else {})
        elif path == "/api/strategies" and request.args.get("unusable") == "true":
            status, body = 200, self.unusable
        elif path == "/api/strategies":
            usable = request.args.get("usable") == "true"
            status, body = 200, [name for name in self.strategies
                                 if not (usable and name in self.unusable)]
        elif (method == "PUT" or path.startswith("/api/admin/")) and \
                request.headers.get("Authorization") != f"Bearer {self.token}":
            status, body = 401, {"error": "unauthorized", "detail": "the admin token"}
        elif method == "PUT" and int((request.get_json() or {}).get("stock", 0)) < 0:
            status, body = 400, {"error": "invalid_request", "detail": "stock must be >= 0"}
        elif method == "GET" and path == "/api/products/sku-1":
            status, body = 200, {"sku": "sku-1", "name": "Stub", "price": 1,
                                 # a broken shop's page also believes its units exist
                                 "stock": max(self.remaining + self.oversell, 0),
                                 "sold": len(self.orders), "strategy": self.strategy}
        elif method == "POST" and path == "/api/products/sku-1/purchase":
            status, body = self.purchase(str(request.get_json()["user_id"]))
        elif method == "PUT" and path == "/api/admin/sales/sku-1" and self.failing_resets:
            self.failing_resets -= 1
            status, body = 500, {"error": "internal_error", "detail": "stub says no"}
        elif method == "PUT" and path == "/api/admin/sales/sku-1":
            payload = request.get_json()
            self.reset(int(payload["stock"]), str(payload["strategy"]))
            status, body = 200, {"sku": "sku-1", **payload}
        elif method == "GET" and path == "/api/admin/sales/sku-1/buyers":
            status, body = 200, self.buyers(request.args.get("after", ""))
        elif method == "GET" and path == "/api/sales/sku-1/audit":
            status, body = 200, self.audit()
        else:
            status, body = 404, {"error": "not_found", "detail": path}
        return Response(json.dumps(body), status, mimetype="application/json")(
            environ, start_response)


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def serve(shop: Any) -> Iterator[str]:
    """Serve ``shop`` on a free loopback port; yields its base URL."""
    server = make_server("127.0.0.1", 0, shop, threaded=True,
                         request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
