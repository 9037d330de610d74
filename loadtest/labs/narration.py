"""The two things every lab hands back: a timeline as it happens, and a verdict.

A lab is a story with a clock. ``Narrator`` stamps every line with the milliseconds
since the lab started (``[  +12 ms] A acquires ...``) and prints it at once, so a
reader watching ``seckill scenario crash-no-ttl`` sees the pauses where they happen.
It also keeps the lines, so a test can read the same story the user saw.

Several actors (threads, or the parent reporting on a child process) narrate at
once; a mutex keeps their lines whole.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass(frozen=True)
class Verdict:
    """What the lab showed. ``demonstrated`` is True when the claimed failure (or the
    claimed protection) actually happened in this run; ``facts`` carries the numbers
    (oversold units, PTTL, ...) that tests assert on."""

    demonstrated: bool
    line: str
    facts: dict[str, Any] = field(default_factory=dict)


class Narrator:
    """Prints timestamped lines as they happen and remembers them."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        """:param stream: where lines go; None means whatever ``sys.stdout`` is when
            a line is printed (so pytest's capture and redirections see them).
        :param quiet: only remember the lines (the tests read ``text()``)."""
        self.stream = stream
        self.quiet = quiet
        self.lines: list[str] = []
        self._started = time.monotonic()
        self._mutex = threading.Lock()

    @property
    def elapsed_ms(self) -> float:
        return (time.monotonic() - self._started) * 1000

    def __call__(self, text: str, *args: Any) -> None:
        """Narrate one event; ``args`` are %-style, as with logging."""
        message = text % args if args else text
        with self._mutex:
            self._emit(f"[{self.elapsed_ms:+7.0f} ms] {message}")

    say = __call__

    def section(self, title: str) -> None:
        """An unstamped heading between acts of the story (``-- with the token lock --``)."""
        with self._mutex:
            self._emit(f"-- {title} --")

    def _emit(self, line: str) -> None:
        self.lines.append(line)
        if not self.quiet:
            try:
                print(line, file=self.stream or sys.stdout, flush=True)
            except BrokenPipeError:
                # the reader stopped (``| head``): the main thread's next line ends the
                # lab (exit 141, quietly); a line from another thread (the watchdog
                # lab's on_lost callback) raised there instead, and lockcore printed a
                # traceback for its failed callback (a labs audit)
                if threading.current_thread() is threading.main_thread():
                    raise

    def text(self) -> str:
        return "\n".join(self.lines)
