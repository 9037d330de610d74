"""``python -m loadtest.bench.spinning`` measures all three calls both ways (a smoke run)."""

from __future__ import annotations

from loadtest.bench import spinning


def test_the_spinning_bench_prints_every_call_read_both_ways(capsys):
    spinning.main(["0.05"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["raw", "lane", "token"]
    for line in lines[1:]:
        blocking, spun = map(float, line.split()[-2:])
        assert blocking > 0 and spun > 0
