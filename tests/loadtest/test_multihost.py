"""The multi-host topology, proven on one machine: two web hosts sharing one Redis and
one PostgreSQL, Locust master plus two workers, each worker on its own host.

A safe strategy must keep the books exact across hosts (the lock and the stock live in
the shared Redis, not in a web process), and both hosts must answer the same audit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.multihost import run_strategy, two_hosts
from loadtest.multihost_db import DatabaseUnavailable
from tests.support import missing_system_part

pytestmark = pytest.mark.postgres


def safe_strategies() -> list[str]:
    from webapp.paths import names

    sharded = "atomic-sharded" if "atomic-sharded" in names() else "atomic"
    return ["token", sharded]


@pytest.fixture(scope="module")
def hosts() -> Iterator[list]:
    try:
        with two_hosts() as served:
            yield served
    except DatabaseUnavailable as exc:
        missing_system_part(f"PostgreSQL for the multi-host run: {exc}")


def run_load(hosts, strategy: str, users: int, stock: int):
    with tempfile.TemporaryDirectory(prefix="seckill-multihost-") as workdir:
        return run_strategy(hosts, strategy, users=users, stock=stock, run_time_s=40,
                            workdir=Path(workdir))


@pytest.mark.parametrize("strategy", safe_strategies())
def test_two_hosts_sharing_redis_and_postgres_sell_exactly_the_stock(hosts, strategy):
    # each host gets 100 one-unit buyers: with 150 units neither can sell out alone, so
    # both must sell (with 50, one host's buyers sometimes reached the spike first and
    # bought it all)
    run = run_load(hosts, strategy, users=200, stock=150)
    audit = run.audits[0]
    assert run.locust_exit == 0, f"Locust flagged wrong answers: {run.outcomes}"
    assert audit["units_sold"] == 150 and audit["remaining"] == 0 and audit["oversold"] == 0, \
        (audit, run.outcomes)
    assert run.exact, f"hosts disagree or the books do not balance: {run.audits}"
    assert sorted(run.orders_by_host) == sorted(h.url for h in hosts), \
        f"both hosts must have sold units: {run.orders_by_host}"
    assert sum(run.orders_by_host.values()) == 150


@pytest.mark.slow
def test_a_thousand_buyers_over_two_hosts_still_balance_the_books(hosts):
    run = run_load(hosts, "token", users=1000, stock=100)
    assert run.exact, run.audits
    assert run.audits[0]["units_sold"] == 100


def test_the_admin_url_takes_the_sqlalchemy_form_database_url_takes(monkeypatch):
    # deployment.md's own example, postgresql+psycopg://..., was a psycopg traceback
    from loadtest.multihost_db import temporary_database

    monkeypatch.setenv("SECKILL_PG_ADMIN_URL", "postgresql+psycopg://127.0.0.1:5432/test")
    try:
        with temporary_database() as url:
            assert url.startswith("postgresql+psycopg:///?")
    except DatabaseUnavailable as exc:  # no PostgreSQL here: the right error, named
        assert "+psycopg" not in str(exc), exc
    monkeypatch.setenv("SECKILL_PG_ADMIN_URL", "not a url at all =")
    with pytest.raises(DatabaseUnavailable, match="SECKILL_PG_ADMIN_URL|cannot connect"):
        with temporary_database():
            pass
