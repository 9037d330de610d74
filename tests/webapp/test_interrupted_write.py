"""A purchase interrupted while its order is being written (gevent kills a stopping
worker's greenlets at gunicorn's graceful timeout) keeps its units taken: they went
back, and a row that landed all the same left Redis a unit ahead of the database, which
the next buyers oversold (an operator audit: a HUP mid-sale, 8 oversold of 40)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.webapp.conftest import SKU, buy, reset
from webapp import orders


class Interrupted(BaseException):
    """As gevent's ``GreenletExit``: not an ``Exception``."""


@pytest.mark.parametrize("strategy", ["atomic", "atomic-sharded"])
def test_an_order_written_as_its_purchase_was_interrupted_keeps_its_units(
        client, monkeypatch, strategy):
    reset(client, stock=5, strategy=strategy)
    for name in ("insert_grouped", "insert_order"):
        real = getattr(orders, name)

        def written_then_interrupted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            _real(*args, **kwargs)  # the row lands (another greenlet's COMMIT, say)
            raise Interrupted

        monkeypatch.setattr(orders, name, written_then_interrupted)
    with pytest.raises(Interrupted):
        buy(client, "ann")
    monkeypatch.undo()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (1, 4, True), audit
    sold = [buy(client, f"buyer-{n}").status_code for n in range(6)]
    assert sold == [201] * 4 + [409] * 2, sold  # no fifth unit to oversell
