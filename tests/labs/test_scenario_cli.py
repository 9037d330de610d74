"""``seckill scenario``: the list, a bad name, and one real run end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from loadtest.labs import LABS
from webapp.cli import main


def test_list_names_every_lab_with_its_seed_and_title(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "--list"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(LABS)
    assert len(listed) == 12
    assert re.search(r"^crash-no-ttl\s+seed 002\s+\S", out, re.MULTILINE)


def test_an_unknown_lab_exits_non_zero_naming_the_choices(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "no-such-lab"]) == 2
    err = capsys.readouterr().err
    assert "unknown lab 'no-such-lab'" in err
    assert "crash-no-ttl" in err


def test_no_name_and_no_list_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario"]) == 2
    assert "--list" in capsys.readouterr().err


def test_a_lab_run_narrates_with_timestamps_and_ends_with_one_verdict_line() -> None:
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "scenario", "wrong-release"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    verdicts = [line for line in lines if line.startswith("VERDICT:")]
    assert verdicts == [lines[-1]]
    assert "LockNotOwned" in lines[-1]
    assert any(re.match(r"\[ *\+\d+ ms\] B acquires", line) for line in lines)
