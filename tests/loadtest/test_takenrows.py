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
