"""A purchase's Redis write whose reply was lost with its connection (a helper's proxy
let a chosen script run, then dropped its reply; ``CLIENT KILL`` storms did the same).

* The locked section's ``SET stock``: the purchase answered 503 and wrote no order, and
  Redis kept the decrement: a unit gone for good (``token``, ``fair``, ``multi``,
  ``redlock``). The SET is sent again: it is idempotent under the lock.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.webapp.conftest import SKU, buy, reset
from webapp import scripts


def drop_the_first_reply_of(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Run script ``name`` as usual, but raise ConnectionError after its first run."""
    real = scripts.script
    dropped: list[str] = []

    def patched(client: Any, script_name: str) -> Any:
        found = real(client, script_name)
        if script_name != name:
            return found

        def lossy(*args: Any, **kwargs: Any) -> Any:
            answer = found(*args, **kwargs)
            if not dropped:
                dropped.append(script_name)
                raise redis.ConnectionError("Connection closed by server.")
            return answer

        return lossy

    monkeypatch.setattr(scripts, "script", patched)
    return dropped


@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_a_lost_reply_to_the_locked_stock_write_loses_no_unit(client, monkeypatch, strategy):
    reset(client, stock=7, strategy=strategy)
    dropped = drop_the_first_reply_of(monkeypatch, "set_stock")
    answer = buy(client, "alice")
    assert dropped == ["set_stock"]
    assert answer.status_code == 201, answer.get_json()  # it was 503, the unit gone
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit
