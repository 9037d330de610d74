"""Two shops with one Redis and two databases overwrote each other's sales: a serve on
PostgreSQL and a showdown (its scratch SQLite) given the same ``REDIS_URL`` left the
serve's sale answering 503 to every purchase, audit and reset until it was stopped (a
showdown audit). A served shop names itself in the Redis it was given, and another
database's shop there is refused (``webapp.redisclaim``)."""

from __future__ import annotations

import os

import pytest

from tests.support import PG_ADMIN_URL
from webapp import redisclaim
from webapp.served import ServedApp, StartupError
from webapp.servelock import DatabaseInUse

pytestmark = pytest.mark.timeout(90)


def test_a_second_database_on_the_same_redis_database_is_refused_naming_the_first(
        redis_url):
    with redisclaim.claimed(redis_url, "aaaaaaaaaaaaaaaa"):
        with pytest.raises(DatabaseInUse) as refused:
            with redisclaim.claimed(redis_url, "bbbbbbbbbbbbbbbb"):
                pass
        assert f"pid {os.getpid()}" in str(refused.value)
        assert "another database number (redis://host:port/1)" in str(refused.value)
        with redisclaim.claimed(redis_url, "aaaaaaaaaaaaaaaa"):  # one database: shared
            pass
        with redisclaim.claimed(redis_url.rsplit("/", 1)[0] + "/1", "bbbbbbbbbbbbbbbb"):
            pass  # another Redis database number: nothing in common
    with redisclaim.claimed(redis_url, "bbbbbbbbbbbbbbbb"):  # the first one gone
        pass


def test_a_database_is_the_same_whatever_its_url_says(tmp_path, postgres_url):
    shop = tmp_path / "shop.sqlite"
    shop.touch()
    (tmp_path / "link.sqlite").symlink_to(shop)
    assert redisclaim.database_identity(f"sqlite:///{shop}") \
        == redisclaim.database_identity(f"sqlite:///{tmp_path / 'link.sqlite'}") \
        != redisclaim.database_identity(f"sqlite:///{tmp_path / 'other.sqlite'}")
    respelled = postgres_url.replace("postgresql+psycopg://", "postgresql://") \
        .replace("127.0.0.1", "localhost")
    assert respelled != postgres_url
    assert redisclaim.database_identity(postgres_url) \
        == redisclaim.database_identity(respelled) \
        != redisclaim.database_identity(PG_ADMIN_URL)  # another database, one server


def test_a_shop_given_a_redis_another_databases_shop_uses_does_not_start(redis_url):
    with redisclaim.claimed(redis_url, "aaaaaaaaaaaaaaaa"):
        app = ServedApp(redis_url=redis_url, workers=1)  # its own scratch SQLite
        with pytest.raises(StartupError, match="another seckill shop"):
            app.start()
        assert app.proc is None  # refused before gunicorn, before its seed
