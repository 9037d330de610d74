"""A failure every request hits is logged once per kind, not once per request (a
PostgreSQL fault audit: 20,596 tracebacks in 15 minutes, 5,150 of them the same
``ReadOnlySqlTransaction``, 42 MB of log hiding the warnings to settle)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy.exc import ProgrammingError

from tests.webapp.conftest import make_app
from webapp import sales
from webapp.logthrottle import PER_REQUEST, Throttle

logger = logging.getLogger("tests.throttled")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def failure() -> ValueError:
    try:
        raise ValueError("refused")
    except ValueError as exc:
        return exc


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool]]:
    return [(r.getMessage(), r.exc_info is not None) for r in caplog.records
            if r.name == logger.name]


def test_a_repeated_failure_logs_its_traceback_once_then_a_count_per_interval(clock, caplog):
    throttle = Throttle(every_s=60, clock=clock)
    for second in range(0, 130):  # one a second for two minutes and more
        clock.now = 1000.0 + second
        throttle.log(logger, logging.ERROR, "refused", "the database refused: %s", "X",
                     exc_info=failure())
    assert records(caplog) == [
        ("the database refused: X", True),
        ("the database refused: X (59 more like it left out since its last line, 60 s ago)",
         False),
        ("the database refused: X (59 more like it left out since its last line, 60 s ago)",
         False)]


def test_a_kind_quiet_for_an_interval_gets_its_traceback_again(clock, caplog):
    throttle = Throttle(every_s=60, clock=clock)
    for at in (1000.0, 1010.0, 1200.0):
        clock.now = at
        throttle.log(logger, logging.ERROR, "refused", "refused", exc_info=failure())
    assert records(caplog) == [
        ("refused", True),
        ("refused (1 more like it left out since its last line, 200 s ago)", True)]


def test_each_kind_is_logged_with_its_own_traceback(clock, caplog):
    throttle = Throttle(every_s=60, clock=clock)
    for kind in ("ReadOnlySqlTransaction", "LockNotAvailable", "ReadOnlySqlTransaction"):
        throttle.log(logger, logging.ERROR, kind, "refused: %s", kind, exc_info=failure())
    assert records(caplog) == [("refused: ReadOnlySqlTransaction", True),
                               ("refused: LockNotAvailable", True)]


class ReadOnlySqlTransaction(Exception):
    """Named as psycopg names PostgreSQL's refusal of a write in a read-only database."""


def read_only(*args: object) -> None:
    raise ProgrammingError("SELECT ...", {}, ReadOnlySqlTransaction(
        "cannot execute UPDATE in a read-only transaction"))


def redis_down(*args: object) -> None:
    raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")


def bug(*args: object) -> None:
    raise KeyError("sku-1")


@pytest.fixture
def fresh_throttle() -> Iterator[None]:
    PER_REQUEST.forget()
    yield
    PER_REQUEST.forget()


@pytest.mark.parametrize(("fault", "status", "message"), [
    (read_only, 503, "the database refused: ReadOnlySqlTransaction"),
    (redis_down, 503, "redis unavailable: Error 111"),
    (bug, 500, "unhandled error"),
])
def test_a_burst_of_identical_failures_logs_one_line_not_one_a_request(
        sqlite_url, redis_url, monkeypatch, caplog, fresh_throttle, fault, status, message):
    # a read-only database: each refused request logged its traceback (a PostgreSQL
    # fault audit: 5,150 tracebacks from 40 s of it)
    monkeypatch.setattr(sales, "list_products", fault)
    app = make_app(sqlite_url, redis_url)
    try:
        client = app.test_client()
        with caplog.at_level(logging.WARNING, logger="webapp.errors"):
            statuses = [client.get("/api/products").status_code for _ in range(20)]
    finally:
        app.extensions["seckill"].close()
    assert statuses == [status] * 20
    logged = [r for r in caplog.records if r.name == "webapp.errors"]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert logged[0].getMessage().startswith(message)
    assert (logged[0].exc_info is not None) == (fault is not redis_down)


def test_a_librarys_repeated_line_is_let_through_once_an_interval_with_the_count(clock,
                                                                                caplog):
    from webapp.logthrottle import RepeatFilter

    library = logging.getLogger("tests.library")
    repeats = RepeatFilter(every_s=60, clock=clock)
    library.addFilter(repeats)
    try:
        with caplog.at_level("WARNING", logger="tests.library"):
            for _ in range(5):
                library.warning("Connection dropped: %s", "refused")
                clock.now += 2
            library.warning("Session has expired")  # another line: its own
            clock.now += 60
            library.warning("Connection dropped: %s", "refused")
        said = [record.getMessage() for record in caplog.records]
    finally:
        library.removeFilter(repeats)
    assert said == ["Connection dropped: refused", "Session has expired",
                    "Connection dropped: refused (4 more like it left out since its last "
                    "line, 70 s ago)"], said


def test_a_library_line_per_bad_request_is_let_through_once_a_minute_and_cut():
    # gunicorn's "Invalid request from ip=...: <request line>", ~4 KB each: 12,000 in
    # 14 s rotated the whole kept log away (a security audit)
    import logging

    from webapp.logthrottle import PrefixFilter

    now = [0.0]
    kept = PrefixFilter(("Invalid request from ip=",), longest=40, clock=lambda: now[0])

    def passes(message: str) -> logging.LogRecord | None:
        record = logging.LogRecord("gunicorn.error", logging.WARNING, __file__, 1,
                                   message, None, None)
        return record if kept.filter(record) else None

    first = passes("Invalid request from ip=10.0.0.1: " + "x%s" * 500)
    assert first is not None and first.getMessage().endswith(" [...]")
    assert len(first.getMessage()) < 60
    assert all(passes(f"Invalid request from ip=10.0.0.{n}: bad") is None for n in range(50))
    assert passes("Worker exiting (pid: 7)") is not None  # other lines pass
    now[0] = 30.0
    odd = PrefixFilter(("Invalid request",), clock=lambda: now[0])
    quoted = logging.LogRecord("gunicorn.error", logging.WARNING, __file__, 1,
                               "Invalid request: GET /a%2Fb", None, None)
    assert odd.filter(quoted) and quoted.getMessage() == "Invalid request: GET /a%2Fb"
    now[0] = 61.0
    again = passes("Invalid request from ip=10.0.0.9: bad")
    assert again is not None and "50 more like it left out" in again.getMessage()
