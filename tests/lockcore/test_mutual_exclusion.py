"""Eight processes compete for one lock; no two critical sections may overlap.

Each worker process records (start, end, fencing token) for every critical section with
CLOCK_MONOTONIC, which Linux shares between processes, so sections from different
workers can be laid on one time line. Then: sorted by start, each section must begin
after the previous one ended, and fencing tokens must strictly increase along that line
(python-redis-lock ``test_no_overlap2``, cosmicpython ``test_concurrent_updates``).

The default run is 8 workers x 25 acquisitions per strategy and wait mode; the
``slow`` variant is the full 8 x 200.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lockcore.processes import Holder, holders
from tests.lockcore.strategy_params import SAFE, lock_class

WORKERS = 8


def backend_spec(strategy: str, request: pytest.FixtureRequest) -> Any:
    if strategy == "redlock":
        return {"redlock": request.getfixturevalue("redlock_cluster").urls}
    if strategy == "zookeeper":
        return {"zookeeper": request.getfixturevalue("zookeeper_hosts")}
    if strategy == "local":
        return None
    return {"redis": request.getfixturevalue("redis_url")}


@pytest.fixture(scope="module")
def workers():
    """Eight worker processes, started once for every contest of this module."""
    with holders(*[{"mode": "contests"}] * WORKERS) as started:
        yield started


def run_contest(strategy: str, wait: str, rounds: int, request: pytest.FixtureRequest,
                workers: list[Holder]) -> list[tuple[int, int, int | None]]:
    lock_class(strategy)
    request.getfixturevalue("redis_client")  # flushes our server before the contest
    if strategy == "redlock":
        request.getfixturevalue("redlock_clients")  # restarts and flushes the five nodes
    resource: Any = f"exclusion-{strategy}-{wait}"
    if strategy == "multi":
        resource = [resource, resource + ":b"]
    spec = {"strategy": strategy, "resource": resource, "rounds": rounds,
            "backend": backend_spec(strategy, request),
            "options": {"wait": wait, "poll_ms": 5, "ttl_ms": 10_000}}
    for worker in workers:
        worker.send(json.dumps(spec))
    for worker in workers:
        assert worker.read() == {"ready": True}
    for worker in workers:
        worker.send("go")
    sections: list[tuple[int, int, int | None]] = []
    for worker in workers:
        report = worker.read()
        assert "error" not in report, f"worker {worker.pid}: {report['error']}"
        sections.extend(tuple(s) for s in report["sections"])
    assert len(sections) == WORKERS * rounds
    return sorted(sections)


def assert_one_holder_at_a_time(sections: list[tuple[int, int, int | None]]) -> None:
    for before, after in zip(sections, sections[1:], strict=False):
        assert after[0] > before[1], f"sections overlap: {before} and {after}"


def assert_fencing_tokens_increase(strategy: str,
                                   sections: list[tuple[int, int, int | None]]) -> None:
    # every safe strategy fences (redlock by a counter raised on every node, zookeeper
    # by the sequence number): one that stopped was let off here (a mutation check)
    tokens = [fence for _, _, fence in sections]
    assert None not in tokens, f"{strategy} issued no fencing token for some sections"
    for before, after in zip(tokens, tokens[1:], strict=False):
        assert after > before, f"fencing token {after} came after {before}"  # type: ignore


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wait", ["poll", "notify"])
@pytest.mark.parametrize("strategy", SAFE)
def test_safe_strategy_never_lets_two_workers_in_at_once(strategy, wait, request, workers):
    sections = run_contest(strategy, wait, 25, request, workers)
    assert_one_holder_at_a_time(sections)
    assert_fencing_tokens_increase(strategy, sections)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("wait", ["poll", "notify"])
@pytest.mark.parametrize("strategy", SAFE)
def test_safe_strategy_holds_for_eight_workers_times_two_hundred(strategy, wait, request,
                                                                 workers):
    sections = run_contest(strategy, wait, 200, request, workers)
    assert_one_holder_at_a_time(sections)
    assert_fencing_tokens_increase(strategy, sections)


def test_the_overlap_check_catches_two_holders():
    # The checks above must be able to fail: two overlapping sections and a token
    # that went backwards are both reported.
    with pytest.raises(AssertionError, match="overlap"):
        assert_one_holder_at_a_time([(0, 10, 1), (5, 15, 2)])
    with pytest.raises(AssertionError, match="fencing token"):
        assert_fencing_tokens_increase("token", [(0, 1, 2), (2, 3, 1)])
