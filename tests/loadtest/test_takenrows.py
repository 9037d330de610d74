"""``python -m loadtest.bench.takenrows`` writes every row through the served path and
reports it (a small smoke run)."""

from __future__ import annotations

import pytest

from loadtest.bench import takenrows


def test_a_small_run_writes_its_rows_and_reports_them(capsys):
    takenrows.main(["--rows", "200", "--batch", "10", "--rounds", "1"])
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("200 rows, 10 per transaction: CPU us per row ")


def test_a_row_that_is_not_written_fails_the_run(monkeypatch):
    monkeypatch.setattr(takenrows, "write_taken", lambda follow: None)
    with pytest.raises(AssertionError):
        takenrows.measure(batch=10, rows=50)


def test_every_measured_batch_is_written_and_the_figure_is_per_row_in_microseconds(
        monkeypatch):
    """The figure divides the CPU time of the measured batches by their rows: measuring
    fewer batches than it divides by, or in the wrong unit, went unnoticed (a mutation
    audit). A row's write costs far more than 1 us of CPU and far less than 1 s."""
    real, calls = takenrows.write_taken, []

    def counted(follow):
        calls.append(len(follow))
        return real(follow)

    monkeypatch.setattr(takenrows, "write_taken", counted)
    per_row_us = takenrows.measure(batch=10, rows=200)
    assert calls == [10] * (200 // 10 + 5)  # 5 warm-up batches, then the 20 measured
    assert 1 <= per_row_us <= 1_000_000, per_row_us
