"""The few HTTP calls the showdown makes itself: reset a sale and read its audit.

Standard library only (``urllib``), so the showdown process never imports Locust's
gevent-patched HTTP stack; Locust itself runs in a subprocess.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from webapp.config import has_control_character, not_utf8  # the shop's own rules

logger = logging.getLogger(__name__)


class ShopError(RuntimeError):
    """The shop answered an admin or audit call with something other than 200."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ShopUnreachable(RuntimeError):
    """Nothing answered at the shop's URL, or what answered cannot run a showdown (not
    a seckill shop, or it refuses the admin token): ``seckill showdown --url``."""


class ShopClient:
    def __init__(self, url: str, admin_token: str | None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.admin_token = admin_token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              admin: bool = False) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if admin and self.admin_token:
            request.add_header("Authorization", _as_header(f"Bearer {self.admin_token}"))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ShopError(f"{method} {path} -> HTTP {exc.code}: {detail}", exc.code) from None

    def reset_sale(self, sku: str, stock: int, strategy: str, work_ms: int,
                   attempts: int = 3) -> Any:
        """Delete the sku's orders, set its stock and select ``strategy`` (admin call).

        The shop takes the sale's current lock to reset it, so right after a spike it
        may answer 503 (or fail); a short pause and another try is what an operator
        would do. A 4xx (bad token, unknown strategy) is final.
        """
        body = {"stock": stock, "strategy": strategy, "work_ms": work_ms}
        for attempt in range(1, attempts + 1):
            try:
                return self._call("PUT", f"/api/admin/sales/{sku}", body, admin=True)
            except ShopError as exc:
                if exc.status < 500 or attempt == attempts:
                    raise
                logger.warning("reset of %s failed (%s); retrying", sku, exc)
                time.sleep(2.0)
        raise AssertionError("unreachable")

    def audit(self, sku: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/sales/{sku}/audit")
        return result

    def buyers(self, sku: str) -> set[str]:
        """Every buyer with an order in the sale (admin call, ``GET
        /api/admin/sales/<sku>/buyers``, read a page at a time): what the showdown
        compares, buyer by buyer, with the buyers told they got one."""
        found: set[str] = set()
        after = ""
        while True:
            query = f"?{urllib.parse.urlencode({'after': after})}" if after else ""
            page = self._call("GET", f"/api/admin/sales/{sku}/buyers{query}", admin=True)
            found.update(str(user) for user in page["buyers"])
            if not page.get("next"):
                return found
            after = str(page["next"])

    def settled_audit(self, sku: str, quiet_s: float = 1.5, limit_s: float = 45.0,
                      poll_s: float = 0.5) -> dict[str, Any]:
        """The audit once it has not changed for ``quiet_s``: Locust has quit, but the
        shop may still be working through requests it had already accepted (and an
        unsafe lock may still write a stale stock). Auditing, or resetting for the next
        strategy, before they finish would blame their orders on the wrong run.
        """
        audit = self.audit(sku)
        still_since = time.monotonic()
        deadline = still_since + limit_s
        while time.monotonic() < deadline:
            time.sleep(poll_s)
            latest = self.audit(sku)
            if latest != audit:
                audit, still_since = latest, time.monotonic()
            elif time.monotonic() - still_since >= quiet_s:
                break
        return audit

    def unreachable(self) -> str | None:
        """Why the shop cannot be reached at all (None: it answered, maybe with an error)."""
        try:
            self._call("GET", "/healthz")
        except (ShopError, json.JSONDecodeError):
            return None  # it answered: 503 names a part that is down, the phase says more
        except (OSError, ValueError) as exc:  # refused, no such host, timeout, bad URL
            return str(getattr(exc, "reason", None) or exc)
        return None

    def unusable_strategies(self) -> dict[str, str]:
        """The strategies this shop cannot run, each with what it lacks (``GET
        /api/strategies?unusable=true``; a shop that ignores the parameter answers with
        its list, and is taken to run them all)."""
        found = self._call("GET", "/api/strategies?unusable=true")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def unusable(self, sku: str) -> str | None:
        """Why a showdown could not run against this shop, found before the first phase
        rather than as every phase's error: nothing answers, what answers is not a
        seckill shop, or it refuses the admin token. The token is tried with a reset the
        shop must refuse (``stock`` -1), so a right token changes nothing either."""
        reason = self.unreachable()
        if reason is not None:
            return f"cannot reach the shop at {self.url}: {reason}"
        try:
            names = self._call("GET", "/api/strategies")
        except (ShopError, OSError, ValueError) as exc:  # 404, an HTML page, a reset
            return (f"{self.url} does not look like a seckill shop (GET "
                    f"{self.url}/api/strategies: {_first_line(exc)}); give the shop's "
                    "root URL, as seckill serve prints it")
        if not isinstance(names, list):
            return f"{self.url} does not look like a seckill shop (GET /api/strategies)"
        if not self.admin_token:
            return ("no admin token for the shop: give --admin-token or set "
                    "SECKILL_ADMIN_TOKEN (seckill serve prints it when it starts)")
        try:
            self._call("PUT", f"/api/admin/sales/{sku}", {"stock": -1}, admin=True)
        except ShopError as exc:
            if exc.status == 401:
                return ("the shop refused the admin token (--admin-token or "
                        "SECKILL_ADMIN_TOKEN; seckill serve prints it when it starts)")
        except (OSError, ValueError) as exc:
            return f"cannot reach the shop at {self.url}: {exc}"
        return None

    def healthy(self) -> bool:
        try:
            self._call("GET", "/healthz")
        except (ShopError, OSError):
            return False
        return True


def unsendable_token(token: str, name: str) -> str | None:
    """Why ``token`` cannot go in an Authorization header, naming where it came from
    (``name``); None when it can. Bytes that are not UTF-8 (Latin-1 ``t\xf6k`` in a
    shell) and control characters (a pasted newline) were reported as 'cannot reach the
    shop', after a call that never left (a CLI audit)."""
    if not_utf8(token):
        return f"{name} is not UTF-8 text (its bytes are in another encoding)"
    if has_control_character(token):
        return (f"{name} has a control character (a newline?) that no HTTP header "
                "can carry")
    return None


def _as_header(text: str) -> str:
    """``text`` as its UTF-8 bytes, one character per byte: http.client encodes a header
    as latin-1, so a token like ``tökén`` went as latin-1 (refused: the shop compares
    UTF-8 bytes, as curl and the admin page send them) and ``ключ`` raised
    UnicodeEncodeError (reported as 'cannot reach the shop')."""
    return text.encode("utf-8").decode("latin-1")


def _first_line(exc: BaseException) -> str:
    """An error's first line, without the method and path it repeats."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.sub(r"^GET /api/strategies -> ", "", line)[:120]
