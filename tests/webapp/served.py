"""Helpers for tests against a real gunicorn: a tiny HTTP client and a buyer stampede."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def call(url: str, method: str = "GET", body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def reset_sale(app: Any, sku: str, **body: Any) -> None:
    status, answer = call(f"{app.url}/api/admin/sales/{sku}", "PUT", body,
                          {"Authorization": f"Bearer {app.admin_token}"})
    assert status == 200, answer


def stampede(app: Any, sku: str, buyers: int, threads: int = 20) -> list[int]:
    """``buyers`` distinct users each try to buy one unit; the statuses, in order."""
    def one(n: int) -> int:
        status, _ = call(f"{app.url}/api/products/{sku}/purchase", "POST",
                         {"user_id": f"buyer-{n}"})
        return status

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(buyers)))


def audit(app: Any, sku: str) -> dict[str, Any]:
    status, body = call(f"{app.url}/api/sales/{sku}/audit")
    assert status == 200
    result: dict[str, Any] = body
    return result
