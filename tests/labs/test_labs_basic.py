"""Labs 1-8 as tests: each lab's own run must demonstrate what its verdict claims.

The labs start their own redis-server processes (and gunicorn, for the storefront
labs) on free loopback ports, so these tests need no fixtures beyond a quiet narrator.
"""

from __future__ import annotations

from loadtest.labs import Narrator, Verdict, run_lab


def run_quietly(name: str) -> tuple[Verdict, Narrator]:
    narrator = Narrator(quiet=True)
    return run_lab(name, narrator), narrator


def test_watchdog_lab_shows_renewal_keeps_long_work_safe_and_reports_loss() -> None:
    verdict, narrator = run_quietly("watchdog")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["rival_got_in_without_watchdog"] is True
    assert verdict.facts["refused_without"] is True
    assert verdict.facts["rival_got_in_with_watchdog"] is False
    assert verdict.facts["on_lost_called"] is True
    assert verdict.facts["with_raised_lock_lost"] is True
    assert "renewal" in verdict.facts["lost_reason"]


def test_crash_no_ttl_lab_shows_setnx_stuck_forever_and_token_recovering() -> None:
    verdict, narrator = run_quietly("crash-no-ttl")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["setnx_pttl"] == -1
    assert verdict.facts["setnx_waiter_acquired"] is False
    assert verdict.facts["token_waiter_acquired"] is True
    assert 0 < verdict.facts["token_pttl"] <= 1_000


def test_setnx_expire_gap_lab_leaves_a_lock_without_ttl() -> None:
    verdict, narrator = run_quietly("setnx-expire-gap")
    assert verdict.demonstrated, narrator.text()
    assert verdict.facts["pttl_after_crash_in_gap"] == -1
    assert verdict.facts["waiter_acquired"] is False
    assert verdict.facts["pttl_after_crash_with_set_nx_px"] > 0
