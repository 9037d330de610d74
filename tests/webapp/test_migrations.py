"""The schema comes from Alembic, and the models agree with it."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import PendingRollbackError

from tests.support import scratch_postgres
from webapp import db
from webapp.models import Base
from webapp.served import ServedApp


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database with nothing in it: a new SQLite file, or a PostgreSQL one of our own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'new.sqlite'}"
        return
    with scratch_postgres("seckill_migrations") as (_, _, url):
        yield url


def test_the_migrations_build_exactly_the_models_schema(database_url):
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_migrations_go_down_to_nothing_and_back_up(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh' / 'shop.sqlite'}"
    db.upgrade(url)  # also creates the missing folder
    engine = create_engine(url)
    try:
        assert {"products", "sales", "orders"} <= set(inspect(engine).get_table_names())
        db.downgrade(url)
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        db.upgrade(url)
        assert "orders" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_alembic_finds_its_scripts_without_an_ini_file():
    location = db.alembic_config("sqlite://").get_main_option("script_location")
    assert location is not None and location.endswith("migrations")


def _pragma(engine, name):
    from sqlalchemy import text

    with engine.connect() as connection:
        return connection.execute(text(f"PRAGMA {name}")).scalar()


def test_a_new_sqlite_file_gets_small_pages_whoever_touches_it_first(tmp_path):
    """Orders land on random index pages: 2 KB pages halve what each one writes to the
    WAL (``db.SQLITE_PAGE_SIZE``). The migrations or the app may create the file."""
    from webapp.extensions import SQLITE_CHECKPOINT_PAGES, make_engine

    for first in ("migrations", "app"):
        url = f"sqlite:///{tmp_path / first}.sqlite"
        engine = make_engine(url)
        try:
            if first == "app":
                _pragma(engine, "page_size")
            db.upgrade(url)
            assert _pragma(engine, "page_size") == db.SQLITE_PAGE_SIZE == 2048
            assert _pragma(engine, "journal_mode") == "wal"
            assert _pragma(engine, "wal_autocheckpoint") == SQLITE_CHECKPOINT_PAGES
        finally:
            engine.dispose()


def test_an_existing_sqlite_file_keeps_its_page_size(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE kept (x)")  # written with SQLite's default 4 KB pages
    old.close()
    db.upgrade(f"sqlite:///{path}")
    engine = create_engine(f"sqlite:///{path}")
    try:
        assert _pragma(engine, "page_size") == 4096
        assert {"kept", "orders"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_two_servers_started_at_once_on_a_new_database_both_serve(new_database_url, redis_url):
    # both ran `alembic upgrade head` and the demo seeding at once: the second died on
    # "table alembic_version already exists" or a duplicate product
    url = new_database_url
    with contextlib.ExitStack() as stack:
        apps = [ServedApp(workers=1, redis_url=redis_url, database_url=url, redlock_urls=[])
                for _ in range(2)]
        for app in apps:
            stack.callback(app.stop)
        together = threading.Barrier(len(apps))
        failed: list[BaseException] = []

        def start(app: ServedApp) -> None:
            together.wait()
            try:
                app.start()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failed.append(exc)

        threads = [threading.Thread(target=start, args=(app,)) for app in apps]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failed == []
        for app in apps:
            with urllib.request.urlopen(f"{app.url}/api/products", timeout=10) as answer:
                skus = [p["sku"] for p in json.load(answer)]
            assert skus == ["sku-1", "sku-2", "sku-3"], skus


@pytest.mark.parametrize(("change", "refused", "said"), [
    # alembic tried to create them again: "relation products already exists"
    ("DROP TABLE alembic_version", db.UnversionedSchema, "no alembic_version.*stamp head"),
    # "Can't locate revision identified by '0005'" was all it said (a migrations audit)
    ("UPDATE alembic_version SET version_num = '0005'", db.UnknownRevision,
     "'0005'.*a newer seckill.*another app"),
], ids=["no-alembic-version", "unknown-revision"])
def test_a_schema_of_unknown_revision_is_refused_with_what_to_do(new_database_url, change,
                                                                 refused, said):
    db.upgrade(new_database_url)
    engine = create_engine(new_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(change))
    finally:
        engine.dispose()
    with pytest.raises(refused, match=said):
        db.upgrade(new_database_url)


def test_a_start_waits_for_a_migration_in_progress_and_not_for_ever(new_database_url):
    url = new_database_url
    with db.migration_lock(url):  # another process, migrating
        with pytest.raises(db.MigrationBusy, match="migrating this database"):
            with db.migration_lock(url, wait_s=0.3):
                pass
    with db.migration_lock(url, wait_s=0.3):  # freed: the next one gets it
        pass


def test_an_order_id_is_never_handed_out_twice_across_a_reset(tmp_path, redis_client):
    # SQLite gave the new sale's first order the id of the order the reset had deleted
    from sqlalchemy.orm import sessionmaker

    from webapp import sales
    from webapp.extensions import make_engine
    from webapp.services import Checkout, PurchaseRequest, checkout

    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    db.upgrade(url)
    engine = make_engine(url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        sales.create_product(sessions, "sku-1", "Lamp", 1_000, stock=5, strategy="atomic")
        deps = Checkout(sessions=sessions, redis=redis_client, lock_for=lambda sale, user: None)
        ids = []
        for user in ("ann", "bo"):
            sales.reset_sale(sessions, redis_client, "sku-1", stock=5, strategy="atomic")
            ids.append(checkout(deps, PurchaseRequest("sku-1", user)).order.id)
        assert ids[1] > ids[0]
    finally:
        engine.dispose()


def test_upgrading_an_sqlite_file_with_orders_keeps_them_and_their_ids(tmp_path):
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    db.upgrade(url, "0002")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO products (sku, name, price_cents, description) "
                "VALUES ('sku-1', 'Lamp', 100, '')"))
            connection.execute(text(
                "INSERT INTO sales (sku, strategy, initial_stock, remaining, work_ms, "
                "per_user_limit, started_at) VALUES ('sku-1', 'atomic', 5, 3, 0, 1, "
                "'2026-11-26 00:00:00')"))
            for order_id, user in ((4, "ann"), (9, "bo")):
                connection.execute(text(
                    "INSERT INTO orders (id, sale_id, sku, user_id, quantity, strategy, "
                    "created_at) VALUES (:id, 1, 'sku-1', :user, 1, 'atomic', "
                    "'2026-11-26 00:00:00')"), {"id": order_id, "user": user})
        db.upgrade(url)
        with engine.begin() as connection:
            rows = connection.execute(text("SELECT id, user_id FROM orders ORDER BY id")).all()
            assert [tuple(row) for row in rows] == [(4, "ann"), (9, "bo")]
            connection.execute(text("DELETE FROM orders WHERE id = 9"))
            connection.execute(text(
                "INSERT INTO orders (sale_id, sku, user_id, quantity, strategy, created_at) "
                "VALUES (1, 'sku-1', 'cy', 1, 'atomic', '2026-11-26 00:00:00')"))
            assert connection.execute(text(
                "SELECT id FROM orders WHERE user_id = 'cy'")).scalar() == 10
    finally:
        engine.dispose()


@contextlib.contextmanager
def _interrupted_before(statement: str) -> Iterator[None]:
    """A Ctrl-C (``KeyboardInterrupt``) raised just before the first SQL statement that
    starts with ``statement``, on any engine (the migrations make their own)."""
    from sqlalchemy import Engine, event

    def interrupt(conn, cursor, sql, parameters, context, executemany) -> None:
        if sql.lstrip().upper().startswith(statement.upper()):
            raise KeyboardInterrupt

    event.listen(Engine, "before_cursor_execute", interrupt)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", interrupt)


def _tables_and_revision(url: str) -> tuple[set[str], list[str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            heads = list(MigrationContext.configure(connection).get_current_heads())
    finally:
        engine.dispose()
    return tables, heads


def test_an_interrupted_sqlite_upgrade_leaves_the_previous_revision_and_upgrades_later(
        tmp_path):
    # pysqlite sent no BEGIN before DDL: 0003's CREATE TABLE _alembic_tmp_orders
    # committed alone, and every later serve failed "table _alembic_tmp_orders already
    # exists"
    url = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    db.upgrade(url, "0002")
    # (alembic's batch mode then drops its temp table on the connection the interrupt
    # invalidated: PendingRollbackError, from the KeyboardInterrupt)
    with _interrupted_before("INSERT INTO _alembic_tmp_orders"), \
            pytest.raises((KeyboardInterrupt, PendingRollbackError)):
        db.upgrade(url)
    assert _tables_and_revision(url) == ({"alembic_version", "products", "sales", "orders"},
                                         ["0002"])
    db.upgrade(url)
    tables, heads = _tables_and_revision(url)
    assert "_alembic_tmp_orders" not in tables and heads == ["0004"]


def test_a_new_sqlite_file_interrupted_while_migrating_is_migrated_by_the_next_start(
        tmp_path):
    # 0001's products and sales stayed, with an empty alembic_version: every later
    # serve failed "table products already exists"
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    with _interrupted_before("CREATE TABLE orders"), \
            pytest.raises((KeyboardInterrupt, PendingRollbackError)):
        db.upgrade(url)
    tables, heads = _tables_and_revision(url)
    assert tables <= {"alembic_version"} and heads == [], tables
    db.upgrade(url)
    tables, heads = _tables_and_revision(url)
    assert {"products", "sales", "orders"} <= tables and heads == ["0004"]


@pytest.mark.postgres
def test_two_alembic_commands_at_once_on_one_postgres_database_both_succeed():
    """``alembic upgrade head`` (the command line ``migrations/alembic.ini`` documents)
    from two deploy hosts at once: both read revision 0001 and both ran 0002; the second
    failed ``index "ix_orders_sale_id" does not exist``. The same befell a command run
    while a shop was starting, which holds only its own lock (``db.migration_lock``).
    Now the second waits for the first's migration transaction, then finds head."""
    import os
    import subprocess
    import sys
    import time

    import psycopg

    from tests.support import ROOT

    with scratch_postgres("seckill_alembic_race") as (admin, name, url):
        db.upgrade(url, "0001")
        command = [sys.executable, "-m", "alembic", "-c", str(ROOT / "migrations" / "alembic.ini"),
                   "upgrade", "head"]
        env = {**os.environ, "DATABASE_URL": url}

        def blocked() -> int:  # backends of this database waiting for a lock
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                 "AND wait_event_type = 'Lock'", (name,)).fetchone()[0]

        runs = []
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as holder:
            holder.execute("LOCK TABLE orders IN ACCESS SHARE MODE")  # 0002 waits on it
            try:
                for _ in range(2):  # the second starts once the first is inside 0002
                    runs.append(subprocess.Popen(command, env=env, cwd=ROOT, text=True,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT))
                    deadline = time.monotonic() + 30
                    while blocked() < len(runs) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    assert blocked() >= len(runs), runs[-1].poll()
            finally:
                holder.rollback()
                outputs = [run.communicate(timeout=60)[0] for run in runs]
        assert [run.returncode for run in runs] == [0, 0], outputs[-1][-2000:]
        assert _tables_and_revision(url)[1] == ["0004"]


@pytest.mark.postgres
def test_a_migration_waits_for_another_and_not_for_ever():
    with scratch_postgres("seckill_alembic_wait") as (_, _, url):
        engine = create_engine(url)
        try:
            with engine.begin() as other:  # another migration's transaction
                db.one_migration_at_a_time(other)
                with engine.begin() as mine, pytest.raises(db.MigrationBusy):
                    db.one_migration_at_a_time(mine, wait_s=0.3)
            with engine.begin() as mine:  # ended: the next one goes on at once
                db.one_migration_at_a_time(mine, wait_s=0.3)
                # and its statements wait for a table as long, not for ever
                assert mine.execute(text("SHOW lock_timeout")).scalar() == "300ms"
            with engine.begin() as mine:  # a bound of the session's own stands
                mine.execute(text("SET LOCAL lock_timeout = '7s'"))
                db.one_migration_at_a_time(mine, wait_s=0.3)
                assert mine.execute(text("SHOW lock_timeout")).scalar() == "7s"
        finally:
            engine.dispose()


@pytest.mark.postgres
def test_a_migration_behind_a_table_another_session_holds_gives_up_and_says_why(
        monkeypatch):
    """An ``ALTER TABLE`` behind another session's open transaction (an operator's
    psql) held a starting shop, silent, until that transaction ended (a migrations
    audit: 45 s, and for ever had it never ended). Now it waits ``MIGRATION_WAIT_S`` at
    most, and says why; the revision stays where it was. The holder lets go after 20 s
    so that the old behaviour fails the test rather than hanging it."""
    import psycopg

    with scratch_postgres("seckill_alembic_table") as (_, _, url):
        db.upgrade(url, "0003")
        monkeypatch.setattr(db, "MIGRATION_WAIT_S", 1.0)
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as holder:
            holder.execute("SELECT count(*) FROM sales")  # its transaction stays open
            letting_go = threading.Timer(20, holder.rollback)
            letting_go.start()
            try:
                with pytest.raises(db.MigrationBusy, match="another session holds locked"):
                    db.upgrade(url)
            finally:
                letting_go.cancel()
                holder.rollback()
        assert _tables_and_revision(url)[1] == ["0003"]


def test_alembic_commands_at_once_on_one_sqlite_file_wait_for_each_other(tmp_path):
    """Two ``alembic upgrade head`` (or migrate-and-seed lines) at once on one SQLite
    file: both read the revision, both went to write, and SQLite told one "database is
    locked" at once (a migrations audit: 4 of 15 failed). Here a writer holds the file
    while the command reads its revision, then commits: the command must wait for it
    (``BEGIN IMMEDIATE``) and upgrade, not fail on what it read before."""
    import os
    import sqlite3
    import subprocess
    import sys
    import time

    from tests.support import ROOT

    path = tmp_path / "race.sqlite"
    db.upgrade(f"sqlite:///{path}", "0001")
    writer = sqlite3.connect(path, isolation_level=None, timeout=30)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE another_migrations_table (x INTEGER)")
    command = subprocess.Popen(
        [sys.executable, "-m", "alembic", "-c", str(ROOT / "migrations" / "alembic.ini"),
         "upgrade", "head"], env={**os.environ, "DATABASE_URL": f"sqlite:///{path}"},
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert command.stdout is not None
        said = []
        for line in command.stdout:  # Alembic logs its context before the transaction
            said.append(line)
            if "Will assume" in line:
                break
        time.sleep(1.0)  # it reads the revision (or, fixed, waits for the write lock)
        writer.execute("COMMIT")
        rest = command.communicate(timeout=60)[0]
    finally:
        writer.close()
        if command.poll() is None:
            command.kill()
    assert command.returncode == 0, "".join(said) + rest[-2000:]
    assert _tables_and_revision(f"sqlite:///{path}")[1] == ["0004"]


def test_a_sqlite_migration_behind_a_writer_gives_up_and_says_why(tmp_path, monkeypatch):
    """``BEGIN IMMEDIATE`` waits ``MIGRATION_WAIT_S`` for another writer, then it was the
    driver's "database is locked" and a traceback (a review); now ``MigrationBusy``."""
    import sqlite3

    path = tmp_path / "busy.sqlite"
    db.upgrade(f"sqlite:///{path}", "0003")
    monkeypatch.setattr(db, "MIGRATION_WAIT_S", 0.5)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(db.MigrationBusy, match="writing this SQLite file"):
            db.upgrade(f"sqlite:///{path}")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _tables_and_revision(f"sqlite:///{path}")[1] == ["0003"]


def test_the_alembic_command_line_makes_a_sqlite_files_folder(tmp_path):
    """The command ``migrations/alembic.ini`` shows, on a fresh clone (no ``instance/``):
    "unable to open database file", where ``seckill serve`` makes the folder."""
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    url = f"sqlite:///{tmp_path / 'instance' / 'seckill.sqlite'}"
    ran = subprocess.run([sys.executable, "-m", "alembic", "-c",
                          str(ROOT / "migrations" / "alembic.ini"), "upgrade", "head"],
                         env={**os.environ, "DATABASE_URL": url}, cwd=ROOT, text=True,
                         capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _tables_and_revision(url)[1] == ["0004"]


def test_the_alembic_command_line_says_what_it_ran(tmp_path):
    """``alembic -c migrations/alembic.ini upgrade head`` printed nothing at all, the
    file's logging sections never applied: an operator could not tell which revisions
    ran, or whether any did."""
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    command = [sys.executable, "-m", "alembic", "-c", str(ROOT / "migrations" / "alembic.ini")]
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite'}"}
    ran = subprocess.run([*command, "upgrade", "head"], env=env, cwd=ROOT, text=True,
                         capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "Running upgrade  -> 0001" in ran.stderr and "0003 -> 0004" in ran.stderr, ran.stderr
    again = subprocess.run([*command, "upgrade", "head"], env=env, cwd=ROOT, text=True,
                           capture_output=True, timeout=60)
    assert again.returncode == 0 and "Running upgrade" not in again.stderr, again.stderr
