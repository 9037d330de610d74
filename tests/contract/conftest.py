"""One served shop for the whole contract package (gunicorn start-up is the slow part).

Each module works on skus of its own (``sku_for``), so the modules can share the
server without selling each other's stock. Modules that break the shop on purpose
(Redis outages, PostgreSQL) start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract.shop import Shop, served_shop

#: skus added to the shared shop, one family per test module
SKUS = [f"qa-{family}-{n}" for family in ("input", "idem", "auth", "api", "race", "spec", "strat",
                                                 "sweep")
        for n in range(1, 5)]


@pytest.fixture(scope="package")
def shop() -> Iterator[Shop]:
    with served_shop(SKUS) as served:
        yield served
