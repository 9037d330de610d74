"""Helpers shared by the test packages (fixtures live in conftest.py files)."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def missing_system_part(reason: str) -> None:
    """Skip loudly when a system package or service is missing; under CI=true, fail."""
    message = f"MISSING SYSTEM PART: {reason}"
    if IN_CI:
        pytest.fail(message + " (CI=true: the test suite must not skip this)")
    pytest.skip(message)


class FakeClock:
    """A clock whose sleep advances time instantly, so timeout tests run in microseconds."""

    def __init__(self, start: float = 1_000.0, wall: float = 1_700_000_000.0) -> None:
        self.now = start
        self.wall_offset = wall - start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now + self.wall_offset

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0)
