"""``python -m loadtest.bench.spinning`` measures all three calls both ways (a smoke run)."""

from __future__ import annotations

import pytest

from loadtest.bench import spinning


def test_the_spinning_bench_prints_every_call_read_both_ways(capsys):
    spinning.main(["0.05"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["raw", "lane", "token"]
    for line in lines[1:]:
        blocking, spun = map(float, line.split()[-2:])
        assert blocking > 0 and spun > 0


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["abc"], 2), (["0"], 2),
                                        (["nan"], 2)])
def test_help_and_a_bad_duration_are_answered_by_the_parser_not_a_traceback(argv, code,
                                                                             capsys):
    # `--help` was "ValueError: could not convert string to float: '--help'", and 0 or
    # nan measured no call at all: a ZeroDivisionError after starting a redis-server
    with pytest.raises(SystemExit) as exited:
        spinning.main(argv)
    assert exited.value.code == code
    said = capsys.readouterr()
    assert "usage: python -m loadtest.bench.spinning" in said.out + said.err
