"""A lab's verdict follows what happened, the protection failing included.

The lab tests run each lab for real and check the facts of a run where the protection
held; none ran a lab where it failed, so a verdict that ignored the safe side's
outcome ("token oversold too") passed them all (a mutation check). Here the labs' own
measurements are replaced by the outcome to judge, and the verdict must follow it.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from loadtest.labs import (
    Narrator,
    crash_no_ttl,
    getset_clock,
    oversell,
    process_lock,
    wrong_release,
)
from loadtest.labs.crowd import SaleResult


def _sale(strategy: str, oversold: int, stock: int = 30) -> SaleResult:
    sold = stock + oversold
    audit = {"oversold": oversold, "units_sold": sold, "consistent": oversold == 0}
    return SaleResult(strategy, {201: sold}, audit)


def _storefront_selling(monkeypatch: pytest.MonkeyPatch, module: Any,
                        oversold: dict[str, int]) -> None:
    """``module``'s storefront replaced: each strategy's sale oversells as given."""
    @contextlib.contextmanager
    def storefront(workers: int) -> Any:
        yield SimpleNamespace(url="http://shop.invalid", redis_url="redis://lab.invalid/0")

    monkeypatch.setattr(module, "lab_storefront", storefront)
    monkeypatch.setattr(module, "flash_sale", lambda narrator, app, strategy, **kw:
                        _sale(strategy, oversold[strategy], kw["stock"]))


@pytest.mark.parametrize(("naive", "token", "demonstrated"), [
    (5, 0, True), (5, 1, False), (0, 0, False)])
def test_oversell_is_demonstrated_only_if_naive_oversells_and_token_does_not(
        monkeypatch, naive, token, demonstrated):
    _storefront_selling(monkeypatch, oversell, {"naive": naive, "token": token})
    verdict = oversell.run(Narrator(quiet=True), buyers=300, stock=30)
    assert verdict.demonstrated is demonstrated, verdict.line


@pytest.mark.parametrize(("local", "token", "demonstrated"), [
    (4, 0, True), (4, 2, False), (0, 0, False)])
def test_process_lock_is_demonstrated_only_if_local_oversells_across_workers_alone(
        monkeypatch, local, token, demonstrated):
    _storefront_selling(monkeypatch, process_lock, {"local": local, "token": token})
    sold = iter([process_lock.THREAD_STOCK + 3, process_lock.THREAD_STOCK])  # no lock, local
    monkeypatch.setattr(process_lock, "_sell_in_threads", lambda client, strategy: next(sold))
    monkeypatch.setattr(process_lock.redis.Redis, "from_url",
                        staticmethod(lambda url: SimpleNamespace(close=lambda: None)))
    verdict = process_lock.run(Narrator(quiet=True), buyers=300, stock=30)
    assert verdict.demonstrated is demonstrated, verdict.line


@contextlib.contextmanager
def _no_redis(narrator: Narrator) -> Any:
    """A lab's ``lab_client`` replaced: no server, the acts that would use it replaced too."""
    yield SimpleNamespace(url="redis://lab.invalid/0"), None


@pytest.mark.parametrize(("setnx", "token", "demonstrated"), [
    ((False, -1), (True, 1000), True),   # setnx stuck for good, token's TTL freed it
    ((True, -1), (True, 1000), False),   # setnx's waiter got the lock: nothing stuck
    ((False, -1), (False, 1000), False)])  # token did not recover either
def test_crash_no_ttl_is_demonstrated_only_if_setnx_sticks_and_token_recovers(
        monkeypatch, setnx, token, demonstrated):
    outcomes = {"setnx": setnx, "token": token}
    monkeypatch.setattr(crash_no_ttl, "lab_client", _no_redis)
    monkeypatch.setattr(crash_no_ttl, "_crash_and_wait",
                        lambda narrator, client, url, strategy, ttl_ms:
                        (*outcomes[strategy], 0.5))
    verdict = crash_no_ttl.run(Narrator(quiet=True))
    assert verdict.demonstrated is demonstrated, verdict.line


#: each strategy's story: (B held its lock, A's release refused, C got in beside B)
TAUGHT = {"setnx-expire": (True, False, True), "token": (True, True, False)}


@pytest.mark.parametrize(("changed", "demonstrated"), [
    ({}, True),
    ({"token": (True, True, True)}, False),    # token let C in beside B too
    ({"token": (True, False, False)}, False),  # token's wrong release was not refused
    ({"setnx-expire": (True, False, False)}, False)])  # the plain DEL harmed nobody
def test_wrong_release_is_demonstrated_only_if_the_plain_del_harms_and_token_refuses(
        monkeypatch, changed, demonstrated):
    stories = {**TAUGHT, **changed}
    monkeypatch.setattr(wrong_release, "lab_client", _no_redis)
    monkeypatch.setattr(wrong_release, "_story",
                        lambda narrator, client, strategy: stories[strategy])
    verdict = wrong_release.run(Narrator(quiet=True))
    assert verdict.demonstrated is demonstrated, verdict.line


@pytest.mark.parametrize(("acts", "demonstrated"), [
    ({}, True),
    ({"clock": (True, True)}, False),           # the honest clock took the live lock too
    ({"clock": (False, False)}, False),         # the fast clock did not take it
    ({"getset": (True, True, False)}, False),   # GETSET's loser acquired as well
    ({"getset": (False, True, True)}, False)])  # the winner's expiry was not overwritten
def test_getset_clock_is_demonstrated_only_by_the_acts_that_ran_real_locks(
        monkeypatch, acts, demonstrated):
    outcome = {"clock": (False, True), "getset": (False, True, False), **acts}
    monkeypatch.setattr(getset_clock, "lab_client", _no_redis)
    monkeypatch.setattr(getset_clock, "_skewed_clock_takes_live_lock",
                        lambda narrator, client: outcome["clock"])
    monkeypatch.setattr(getset_clock, "_del_setnx_race", lambda narrator, client: True)
    monkeypatch.setattr(getset_clock, "_getset_race",
                        lambda narrator, client: outcome["getset"])
    verdict = getset_clock.run(Narrator(quiet=True))
    assert verdict.demonstrated is demonstrated, verdict.line

