"""What ``seckill serve`` checks of a SQLite ``DATABASE_URL`` before it starts
(``served.usable_sqlite_file``), and a claim of the database that fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from webapp import served, servelock
from webapp.served import ServedApp, StartupError, usable_sqlite_file


def test_a_file_another_process_writes_is_usable(tmp_path: Path) -> None:
    """A serve migrating it holds its write lock: a database, which the migration lock
    waits for; "database is locked" was a fatal start (a review)."""
    path = tmp_path / "shop.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        usable_sqlite_file(f"sqlite:///{path}")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_file_uri_is_left_to_the_driver(tmp_path: Path, monkeypatch) -> None:
    """Opened as a plain path, ``file:shop.sqlite?...`` made a stray ``./file:...``."""
    monkeypatch.chdir(tmp_path)
    usable_sqlite_file("sqlite:///file:shop.sqlite?mode=rwc&uri=true")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_made_empty_for_the_migrations(tmp_path: Path) -> None:
    path = tmp_path / "new" / "shop.sqlite"
    usable_sqlite_file(f"sqlite:///{path}")
    assert path.exists() and path.stat().st_size == 0  # the page size is still theirs
    with pytest.raises(StartupError, match="DATABASE_URL"):
        usable_sqlite_file(f"sqlite:///{tmp_path}")


def test_a_claim_that_fails_on_a_reachable_database_stops_the_start(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """Anything but "in use" from the claim was checked for an unreachable database and
    then dropped: the shop served unclaimed, and a second serve on the same database
    and other lock servers would sell its stock twice (a review)."""
    def claimed(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the claim's own failure")

    monkeypatch.setattr(servelock, "claimed", claimed)
    monkeypatch.setattr(served, "EmbeddedRedis", None)  # nothing may start after it
    app = ServedApp(database_url=f"sqlite:///{tmp_path / 'shop.sqlite'}",
                    redis_url="redis://127.0.0.1:1/0", redlock_urls=[])
    with pytest.raises(RuntimeError, match="the claim's own failure"):
        app.start()
