"""The schema comes from Alembic, and the models agree with it."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from webapp import db
from webapp.models import Base


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
