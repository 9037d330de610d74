"""A sale whose lock backend this server no longer has (restarted without
``ZOOKEEPER_HOSTS`` or ``REDLOCK_URLS``) can still be moved to another strategy: no
buyer can hold a lock on a backend the server cannot reach, so the reset need not wait."""

from __future__ import annotations

import pytest

from webapp import sales

from .conftest import SKU, backends, reset


@pytest.mark.parametrize("strategy", ["zookeeper", "redlock"])
def test_a_sale_on_an_unconfigured_backend_can_be_reset_to_another_strategy(
        app, client, strategy) -> None:
    b = backends(app)
    # as a server configured for it left it; this one has neither backend
    sales.reset_sale(b.sessions, b.redis, SKU, stock=10, strategy=strategy)
    assert reset(client, SKU, stock=5, strategy="token")["strategy"] == "token"
    assert client.get(f"/api/products/{SKU}").get_json()["stock"] == 5
