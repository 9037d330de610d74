"""``create_app`` makes its instance folder only for the default SQLite that lives there:
a shop given a ``DATABASE_URL`` leaves no empty ``instance/`` behind."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import webapp
import webapp.app
from webapp.routing import ShopFlask

NOTHING_CONNECTS = {"TESTING": True, "SECKILL_ADMIN_TOKEN": "t",
                    "REDIS_URL": "redis://127.0.0.1:1/0"}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "instance"
    monkeypatch.setattr(webapp.app, "ShopFlask",
                        functools.partial(ShopFlask, instance_path=str(where)))
    return where


def test_a_given_database_url_makes_no_instance_folder(folder: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    app = webapp.create_app(dict(NOTHING_CONNECTS))
    assert app.config["DATABASE_URL"].startswith("postgresql")
    assert not folder.exists()


def test_the_default_sqlite_gets_its_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    app = webapp.create_app(dict(NOTHING_CONNECTS))
    assert app.config["DATABASE_URL"] == f"sqlite:///{folder / 'seckill.sqlite'}"
    assert folder.is_dir()
