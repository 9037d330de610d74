"""Settings from the environment: a value that cannot work is an error naming it."""

from __future__ import annotations

import pytest

from webapp import config


@pytest.mark.parametrize("name", ["SECKILL_LOCK_COHORT", "SECKILL_LOCK_COMBINE",
                                  "SECKILL_REDIS_AUTOPIPELINE"])
@pytest.mark.parametrize("value, on", [("1", True), ("on", True), (" Yes ", True),
                                       ("0", False), ("off", False), ("", False)])
def test_a_switch_reads_the_usual_words(monkeypatch, tmp_path, name, value, on):
    monkeypatch.setenv(name, value)
    key = name.removeprefix("SECKILL_")
    assert config.from_env(str(tmp_path))[key] is on


@pytest.mark.parametrize("name", ["SECKILL_LOCK_COHORT", "SECKILL_LOCK_COMBINE"])
def test_a_switch_set_to_another_word_is_refused_not_read_as_on(monkeypatch, tmp_path, name):
    # SECKILL_LOCK_COHORT=disabled turned cohorting on, silently (a CLI audit)
    monkeypatch.setenv(name, "disabled")
    with pytest.raises(config.ConfigError, match=name):
        config.from_env(str(tmp_path))


def test_a_whole_number_setting_given_a_fraction_says_whole(monkeypatch, tmp_path):
    # "must be a number, got '1.5'": 1.5 is a number
    monkeypatch.setenv("SECKILL_LOCK_COHORT_MAX_PASSES", "1.5")
    with pytest.raises(config.ConfigError, match="must be a whole number, got '1.5'"):
        config.from_env(str(tmp_path))


def test_a_lock_timeout_past_a_day_is_refused_at_start(monkeypatch, tmp_path):
    # lockcore refuses a wait over a year: LOCK_TIMEOUT_S=4e7 started the shop and made
    # every locked purchase a 500 (a review)
    monkeypatch.setenv("LOCK_TIMEOUT_S", "4e7")
    with pytest.raises(config.ConfigError, match="LOCK_TIMEOUT_S must be at most 86400"):
        config.from_env(str(tmp_path))
    monkeypatch.setenv("LOCK_TIMEOUT_S", "86400")
    assert config.from_env(str(tmp_path))["LOCK_TIMEOUT_S"] == 86_400


def test_the_showdown_reads_redlock_urls_as_the_shop_does(monkeypatch):
    # spaces after the commas: the shop took them, showdown --url refused ' redis://...'
    from loadtest.serving import redlock_urls

    monkeypatch.setenv("REDLOCK_URLS", "redis://127.0.0.1:1, redis://127.0.0.1:2 ,")
    assert redlock_urls() == ["redis://127.0.0.1:1", "redis://127.0.0.1:2"]


@pytest.mark.parametrize("hosts", ["127.0.0.1:2181,", "127.0.0.1:notaport", "  ",
                                   "zk://127.0.0.1:2181", "127.0.0.1:99999"])
def test_a_zookeeper_hosts_string_kazoo_cannot_read_is_refused_naming_it(
        monkeypatch, tmp_path, hosts):
    # it was served with a note that no server answers there, and every purchase of a
    # zookeeper sale was a 500 (kazoo's "bad hostname"; a CLI audit); a URL's scheme
    # was read as a host named "zk" with the chroot "//127.0.0.1:2181"
    pytest.importorskip("kazoo")
    monkeypatch.setenv("ZOOKEEPER_HOSTS", hosts)
    with pytest.raises(config.ConfigError, match="^ZOOKEEPER_HOSTS: "):
        config.check_urls(config.from_env(str(tmp_path)))


def test_a_zookeeper_hosts_string_with_spaces_and_a_chroot_is_taken(monkeypatch, tmp_path):
    pytest.importorskip("kazoo")
    monkeypatch.setenv("ZOOKEEPER_HOSTS", "127.0.0.1:2181, [::1]:2182/seckill")
    config.check_urls(config.from_env(str(tmp_path)))


def test_an_admin_token_that_is_not_utf8_is_refused_naming_it(monkeypatch, tmp_path):
    # b"t\xf6k" (Latin-1 in the environment): served, and every admin call was a 500,
    # a wrong token too (the shop compares UTF-8 bytes; a CLI audit)
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", b"t\xf6k".decode("utf-8", "surrogateescape"))
    with pytest.raises(config.ConfigError, match="SECKILL_ADMIN_TOKEN is not UTF-8"):
        config.from_env(str(tmp_path))


def test_a_non_ascii_admin_token_in_utf8_is_taken(monkeypatch, tmp_path):
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "tökén")
    assert config.from_env(str(tmp_path))["SECKILL_ADMIN_TOKEN"] == "tökén"


@pytest.mark.parametrize("name", ["ZOOKEEPER_HOSTS", "ZK_HOSTS"])
def test_serve_gives_its_shop_the_zookeeper_hosts_the_workers_read(monkeypatch, tmp_path, name):
    # ZK_HOSTS, an undocumented alias, reached the workers alone: `seckill serve` started
    # a shop locking on it with no note that nothing answered there, and its database
    # claim did not count it among the shop's lock servers
    import argparse

    from webapp import serve

    seen = {}

    class Recorded(serve.ServedApp):
        def start(self):
            seen["hosts"] = self.zookeeper_hosts
            raise serve.StartupError("recorded")

    monkeypatch.delenv("ZOOKEEPER_HOSTS", raising=False)
    monkeypatch.delenv("ZK_HOSTS", raising=False)
    monkeypatch.setenv(name, "127.0.0.1:2181")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(serve, "ServedApp", Recorded)
    assert serve.main(argparse.Namespace(host="127.0.0.1", port=0, workers=1)) == 1
    workers_read = config.from_env(str(tmp_path))["ZOOKEEPER_HOSTS"]
    assert seen["hosts"] == workers_read
    assert workers_read == ("127.0.0.1:2181" if name == "ZOOKEEPER_HOSTS" else None)
    assert config.zookeeper_hosts() == workers_read  # what showdown and bench read too


def test_serve_whose_ctrl_c_came_back_from_its_start_as_another_error_is_interrupted(
        monkeypatch, tmp_path, capsys):
    # a Ctrl-C that kazoo swallowed (its bare ``except:`` raises ConnectionClosedError
    # instead) said "could not start: ...", exit 1: it is "interrupted", 130 (a labs audit)
    from webapp import cli, serve

    class Interrupted(serve.ServedApp):
        def start(self):
            cli.STOPPING.set()  # what ``webapp.cli.stop_on_term`` does first
            raise ConnectionError("Connection has been closed")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(serve, "ServedApp", Interrupted)
    try:
        assert cli.main(["serve", "--port", "0"]) == 130
    finally:
        cli.STOPPING.clear()
    err = capsys.readouterr().err
    assert "could not start" not in err
    assert "seckill serve: interrupted; everything it started is stopped" in err


@pytest.mark.parametrize("url", ["sqlite://x.sqlite", "sqlite://localhost/x.sqlite"])
def test_a_sqlite_url_with_two_slashes_is_refused_for_its_host_not_called_in_memory(
        monkeypatch, tmp_path, url):
    # sqlite://x.sqlite is a host 'x.sqlite' and no database to SQLAlchemy: the hint
    # blamed "an in-memory SQLite database", which the user never asked for
    monkeypatch.setenv("DATABASE_URL", url)
    with pytest.raises(config.ConfigError) as refused:
        config.served_from_env(str(tmp_path))
    message = str(refused.value)
    assert "in-memory" not in message
    assert "names a host" in message and "sqlite:///relative" in message
    assert "sqlite:////absolute" in message


def test_sqlite_in_memory_is_still_refused_as_in_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "sqlite://")
    with pytest.raises(config.ConfigError, match="in-memory"):
        config.served_from_env(str(tmp_path))


@pytest.mark.parametrize("token", ["ab\ncd", "ab\rcd", "ab\x1bcd", "ab\x7fcd"])
def test_an_admin_token_with_a_control_character_is_refused_naming_it(
        monkeypatch, tmp_path, token):
    # a pasted newline inside it: `seckill serve` started, printed the token over two
    # lines and refused every admin call (no header carries it: 400 from gunicorn), and
    # the showdown it served broke every phase with an 'Invalid header value' traceback
    # (a CLI audit)
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", token)
    with pytest.raises(config.ConfigError, match="^SECKILL_ADMIN_TOKEN has a control character"):
        config.from_env(str(tmp_path))


@pytest.mark.parametrize("token", ["t" * 9000, "ключ" * 1100])
def test_an_admin_token_too_long_for_a_header_is_refused_naming_it(
        monkeypatch, tmp_path, token):
    # 9,000 characters: `seckill serve` started and printed it, and every admin call was
    # 431 (gunicorn caps a header line at 8190 bytes; a text audit)
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", token)
    with pytest.raises(config.ConfigError,
                       match="^SECKILL_ADMIN_TOKEN is .* at most 4096 bytes"):
        config.from_env(str(tmp_path))


def test_an_admin_token_of_the_longest_length_is_taken(monkeypatch, tmp_path):
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "t" * config.MAX_ADMIN_TOKEN_BYTES)
    assert len(config.from_env(str(tmp_path))["SECKILL_ADMIN_TOKEN"]) == 4096


def test_an_admin_token_with_a_tab_or_a_space_inside_is_taken(monkeypatch, tmp_path):
    # HTTP carries both inside a header value
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "my\tadmin token")
    assert config.from_env(str(tmp_path))["SECKILL_ADMIN_TOKEN"] == "my\tadmin token"


@pytest.mark.parametrize("name, url, says", [
    ("REDIS_URL", "redis://", "names no host"),
    ("REDIS_URL", "rediss://:pw@/0", "names no host"),
    ("REDLOCK_URLS", "redis://127.0.0.1:1/0,redis:///0,redis://127.0.0.1:2/0",
     "names no host"),
    ("REDIS_URL", "unix://", "names no socket"),
    ("DATABASE_URL", "postgresql://", "names no database"),
    ("DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:5432", "names no database"),
])
def test_a_url_that_leaves_the_server_to_a_default_is_refused(monkeypatch, tmp_path, name,
                                                              url, says):
    # redis:// is 127.0.0.1:6379 to redis-py and postgresql:// libpq's default database:
    # a CLI audit's `seckill serve` seeded both, someone else's, and printed "redis://"
    monkeypatch.delenv("PGDATABASE", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    monkeypatch.setenv(name, url)
    with pytest.raises(config.ConfigError, match=says) as refused:
        config.served_from_env(str(tmp_path))
    assert str(refused.value).startswith(f"{name}: ")


@pytest.mark.parametrize("name, url", [
    ("REDIS_URL", "redis://127.0.0.1:6399/0"), ("REDIS_URL", "unix:///tmp/r.sock?db=2"),
    ("DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:5432/shop"),
    ("DATABASE_URL", "postgresql:///shop"),
    ("DATABASE_URL", "postgresql://u@/?dbname=shop&host=/var/run/postgresql"),
    ("DATABASE_URL", "postgresql+psycopg://u@h?service=shop"),
    ("REDIS_URL", "redis://?host=127.0.0.1&port=6399"), ("REDIS_URL", "unix://?path=/tmp/r.sock"),
])
def test_a_url_naming_its_server_is_taken(monkeypatch, tmp_path, name, url):
    monkeypatch.delenv("PGDATABASE", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    monkeypatch.setenv(name, url)
    config.served_from_env(str(tmp_path))


def test_a_postgres_url_with_no_database_is_taken_when_libpq_is_told_one(monkeypatch,
                                                                         tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:5432")
    monkeypatch.setenv("PGDATABASE", "shop")
    config.served_from_env(str(tmp_path))


@pytest.mark.parametrize("urls", [
    "redis://127.0.0.1:6399/0,redis://?host=127.0.0.1&port=6399,redis://127.0.0.1:6400/0",
    "redis://127.0.0.1:6379/0,redis://?host=127.0.0.1,redis://127.0.0.1:6400/0",
])
def test_redlock_urls_naming_one_server_in_the_query_form_are_one_node(monkeypatch, tmp_path,
                                                                       urls):
    # a port in the query is a string to redis-py, and no port 6379: both passed as
    # another node (a review)
    monkeypatch.setenv("REDLOCK_URLS", urls)
    with pytest.raises(config.ConfigError, match="REDLOCK_URLS: redlock needs independent"):
        config.served_from_env(str(tmp_path))


def test_a_redis_url_whose_query_port_is_no_number_is_refused(monkeypatch, tmp_path):
    # passed the check, then a ValueError traceback at the first connection (a review)
    monkeypatch.setenv("REDIS_URL", "redis://?host=127.0.0.1&port=abc")
    with pytest.raises(config.ConfigError, match="port= must be a number"):
        config.served_from_env(str(tmp_path))


@pytest.mark.parametrize("name, url, option", [
    ("REDIS_URL", "redis://127.0.0.1:6399/0?service_name=mymaster", "service_name"),
    ("REDIS_URL", "redis://127.0.0.1:6399/0?socket_timeout=2&timeout=3", "timeout"),
    ("REDIS_URL", "redis://127.0.0.1:6399/0?ssl_cert_reqs=none", "ssl_cert_reqs"),
    ("REDLOCK_URLS", "redis://127.0.0.1:1/0?sentinel=1,redis://127.0.0.1:2/0,"
     "redis://127.0.0.1:3/0", "sentinel"),
])
def test_a_redis_url_with_an_option_redis_py_does_not_take_is_refused_naming_it(
        monkeypatch, tmp_path, name, url, option):
    """redis-py passed it on, and the first connection raised: "could not start:
    TypeError: AbstractConnection.__init__() got an unexpected keyword argument
    'service_name'" (a Redis HA audit)."""
    monkeypatch.setenv(name, url)
    with pytest.raises(config.ConfigError) as refused:
        config.served_from_env(str(tmp_path))
    said = str(refused.value)
    assert said.startswith(f"{name}: ") and said.endswith(option if option != "service_name"
                                                          else "follow a failover)"), said
    assert f"does not take: {option}" in said and "\n" not in said


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6399/0?socket_timeout=2&max_connections=9",
                                 "rediss://127.0.0.1:6399/0?ssl_cert_reqs=none",
                                 "redis://127.0.0.1:6399/0?client_name=shop&protocol=3"])
def test_a_redis_url_with_options_redis_py_takes_is_taken(monkeypatch, tmp_path, url):
    monkeypatch.setenv("REDIS_URL", url)
    config.served_from_env(str(tmp_path))
