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
