"""Labs 1-8 as tests: each lab's own run must demonstrate what its verdict claims.

The labs start their own redis-server processes (and gunicorn, for the storefront
labs) on free loopback ports, so these tests need no fixtures beyond a quiet narrator.
"""

from __future__ import annotations

import pytest

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
