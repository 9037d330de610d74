"""The arrival log's check against Locust's count leaves the cut-off lines out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loadtest import arrivals, phase
from loadtest.verdict import PURCHASE_NAME


class Shop:
    url = "http://x"

    def reset_sale(self, *args: object) -> None:
        pass

    def settled_audit(self, sku: str, seconds: float) -> dict[str, object]:
        return {"initial_stock": 10, "remaining": 0, "orders": 10, "units_sold": 10,
                "oversold": 0, "duplicate_buyers": 0, "consistent": True}

    def buyers(self, sku: str) -> set[str]:
        return {f"u{i}" for i in range(10)}


def test_lost_lines_are_not_hidden_by_cut_off_lines(tmp_path, monkeypatch):
    """Locust counted 10 answered purchases; the log lost 3 of them and has 5 lines of
    attempts cut off at the run's end, which Locust never counts: 12 lines against 10
    passed the check, and an order whose 201 line was lost went unseen (a review)."""
    def fake_locust(command, log, limit):
        path = command[command.index("--seckill-arrivals") + 1]
        rows = [arrivals.Arrival(f"u{i}", 1, i, i + .1, 201, "order") for i in range(7)]
        rows += [arrivals.Arrival(f"w{i}", 1, 20 + i, 40, 0, "cut_off") for i in range(5)]
        arrivals.write_arrivals(path, rows)
        return 0

    monkeypatch.setattr(phase, "run_locust", fake_locust)
    monkeypatch.setattr(phase, "_read_locust", lambda result, prefix, plan, in_flight=0:
                        {PURCHASE_NAME: SimpleNamespace(requests=10)})
    monkeypatch.setattr(phase.commandstats, "total_calls", lambda clients: 0)
    monkeypatch.setattr(phase.commandstats, "per_attempt", lambda *args: 0)
    with pytest.raises(phase.PhaseBroken, match="7 of the 10"):
        phase.run_phase(Shop(), [], "token", True,
                        phase.Plan(users=15, stock=10, drain_s=0), tmp_path)
