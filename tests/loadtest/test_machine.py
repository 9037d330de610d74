"""``loadtest.machine``: what a report says it was measured on, and the command that ran."""

from __future__ import annotations

import pytest

from loadtest.machine import describe


@pytest.mark.parametrize("typed, shown", [
    (["--admin-token", "s3cret"], "--admin-token '***'"),
    (["--admin-token=s3cret"], "'--admin-token=***'"),
    (["--admin", "s3cret"], "--admin '***'"),  # argparse takes a unique prefix
    (["--url", "http://ops:s3cret@shop:8000"], "--url 'http://ops:***@shop:8000'"),
    (["--url=http://ops:s3cret@shop:8000"], "'--url=http://ops:***@shop:8000'"),
    (["REDIS_URL=redis://:s3cret@cache:6379/0"], "'REDIS_URL=redis://:***@cache:6379/0'"),
    (["DATABASE_URL=postgresql://shop:s3cret@db/shop"],
     "'DATABASE_URL=postgresql://shop:***@db/shop'"),
])
def test_the_recorded_command_hides_the_admin_token_and_url_passwords(monkeypatch, typed,
                                                                      shown):
    """The command went into index.html, summary.json and --json as typed, admin token
    and all, and reports are meant to be shared (a showdown audit)."""
    monkeypatch.setattr("sys.argv", ["/venv/bin/seckill", "showdown", *typed, "--users", "9"])
    command = describe()["command"]
    assert "s3cret" not in command
    assert command == f"seckill showdown {shown} --users 9"


def test_a_command_with_nothing_secret_is_recorded_as_typed(monkeypatch):
    monkeypatch.setattr("sys.argv", ["seckill", "showdown", "--url", "http://127.0.0.1:8000",
                                     "--strategies", "token,atomic"])
    assert describe()["command"] == ("seckill showdown --url http://127.0.0.1:8000 "
                                     "--strategies token,atomic")


def test_the_recorded_shop_url_hides_its_password():
    """The machine's ``url`` (and a skipped strategy's note) named ``--url`` as typed,
    password and all (a showdown audit)."""
    from loadtest.serving import Target
    from loadtest.shop import ShopClient

    target = Target(ShopClient("http://ops:s3cret@shop:8000", "t"), [], [], "/tmp")
    assert target.describe()["url"] == "http://ops:***@shop:8000"
