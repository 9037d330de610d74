"""``DATABASE_URL`` spellings users bring, and URLs printed without their passwords."""

from __future__ import annotations

import pytest

from webapp import config, db
from webapp.extensions import make_engine


@pytest.mark.parametrize("given, meant", [
    ("postgres://u:p@h:5432/d", "postgresql+psycopg://u:p@h:5432/d"),  # Heroku's spelling
    ("postgresql://u@h/d", "postgresql+psycopg://u@h/d"),  # psycopg2 on SQLAlchemy 2.0
    ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
    ("sqlite:///x.sqlite", "sqlite:///x.sqlite"),
])
def test_postgres_spellings_mean_the_installed_driver(given, meant):
    assert config.database_url(given) == meant


def test_an_engine_for_postgres_scheme_uses_psycopg_3():
    engine = make_engine("postgres://root@127.0.0.1:1/none")  # made, never connected
    try:
        assert engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()


@pytest.mark.parametrize("url, shown", [
    ("redis://:S3cret@127.0.0.1:6380/0", "redis://:***@127.0.0.1:6380/0"),
    ("redis://user:S3cret@h:1/0", "redis://user:***@h:1/0"),
    ("rediss://h:1/0", "rediss://h:1/0"),
    ("postgresql+psycopg://root:p%40ss@h/db", "postgresql+psycopg://root:***@h/db"),
    ("garbage", "garbage"),
    # redis-py's documented form for a socket, and libpq's keyword: it was printed as it
    # was (seckill serve's banner: "Redis unix:///run/redis.sock?password=S3cret"; a
    # CLI audit)
    ("unix:///run/redis.sock?password=S3cret", "unix:///run/redis.sock?password=***"),
    ("unix:///run/redis.sock?db=2&password=S3cret&x=1",
     "unix:///run/redis.sock?db=2&password=***&x=1"),
    ("redis://u:S3cret@h:1/0?password=S3cret", "redis://u:***@h:1/0?password=***"),
    ("postgresql+psycopg://root@h/db?password=S3cret&sslmode=require",
     "postgresql+psycopg://root@h/db?password=***&sslmode=require"),
    ("unix:///run/redis.sock?db=2&not_password=1", "unix:///run/redis.sock?db=2&not_password=1"),
])
def test_urls_are_printed_without_passwords(url, shown):
    assert config.without_password(url) == shown


def test_a_sqlite_file_with_a_driver_name_gets_its_folder(tmp_path):
    # only the exact prefix sqlite:/// made the folder: "unable to open database file"
    target = tmp_path / "new" / "dir" / "shop.sqlite"
    db.upgrade(f"sqlite+pysqlite:///{target}")
    assert target.exists()
