"""The audit's database figures come from one snapshot.

Every order transaction counts its units off ``sales.remaining`` and inserts its row
together, so within one snapshot ``database_remaining + units_sold == initial_stock``.
The audit read the sale row, then the orders' count and sum, then the duplicates, each
statement its own snapshot (PostgreSQL's READ COMMITTED, SQLite's autocommit reads): a
purchase committed between them showed ``remaining 99949, orders 52`` of 100000, and
about half the audits polled during a sale said ``consistent: false`` for a safe
strategy (a contract audit)."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event

from tests.webapp.conftest import SKU, backends, buy, reset


def test_a_purchase_committed_amid_the_audits_reads_is_counted_once_or_not_at_all(
        client, app):
    reset(client, stock=10, strategy="token")
    assert buy(client, "before").status_code == 201
    engine = backends(app).engine
    fired: list[Any] = []

    def a_purchase_commits_before_the_count(conn, cursor, statement, *args: Any) -> None:
        if fired or "count(" not in statement.lower():
            return
        fired.append(True)  # once: the purchase itself must not trigger another
        buyer = threading.Thread(target=lambda: fired.append(buy(app.test_client(), "amid")))
        buyer.start()
        buyer.join(10)

    event.listen(engine, "before_cursor_execute", a_purchase_commits_before_the_count)
    try:
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    finally:
        event.remove(engine, "before_cursor_execute", a_purchase_commits_before_the_count)
    assert len(fired) == 2 and fired[1].status_code == 201, fired
    assert audit["database_remaining"] + audit["units_sold"] == audit["initial_stock"], audit
    assert audit["consistent"], audit
