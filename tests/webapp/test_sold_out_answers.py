"""What a 409 ``sold_out`` says, and when the sold-out flag may be set."""

from __future__ import annotations

import pytest

from tests.webapp.conftest import SKU, buy, reset


@pytest.mark.parametrize("key", [None, "ann-try-1"], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("strategy", ["atomic", "token", "sql"])
def test_asking_for_more_than_is_left_says_how_many_are(client, strategy, key):
    """``atomic`` answered "sku-1 is sold out" with 2 left, where a lock path says "only 2
    left" (two audits), and so did ``sql`` (its conditional UPDATE matched no row; a
    contract audit): a client told "sold out" stops, one told "2 left" asks for 2. So
    did a keyed ``atomic`` purchase (``atomic_purchase.lua``: an HTTP audit)."""
    reset(client, stock=2, strategy=strategy)
    answer = buy(client, "ann", quantity=3, key=key)
    assert answer.status_code == 409, answer.get_json()
    assert answer.get_json() == {"error": "sold_out", "detail": f"only 2 left of {SKU}"}
    assert buy(client, "ann", quantity=2, key=key and key + "b").status_code == 201
    assert "is sold out" in buy(client, "bob", key=key and "bob-1").get_json()["detail"]
