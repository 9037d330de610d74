"""What the load commands' command lines share (``seckill showdown``, ``seckill bench``):
argparse types whose refusals are usage errors (exit 2, not a traceback), and the
SIGTERM handler that makes ``kill``, ``timeout`` and CI unwind a run like Ctrl-C."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value
    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0: {text!r}")
    return value


def stop_on_term(signum: int, frame: object) -> None:
    """SIGTERM handler: unwind like Ctrl-C, so what the run started is stopped by pid."""
    raise KeyboardInterrupt
