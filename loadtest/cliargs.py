"""What the load commands' command lines share (``seckill showdown``, ``seckill bench``):
argparse types whose refusals are usage errors (exit 2, not a traceback), a list of
names, and the check of an output file before a run. (``seckill`` makes SIGTERM and
SIGHUP unwind every command like Ctrl-C: ``webapp.cli.stop_like_ctrl_c``.)"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path


def comma_names(text: str) -> list[str]:
    """A comma-separated list of names: each once, stripped, in the order given; empty
    ones dropped (a name given twice ran its phase or contender twice)."""
    return list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def _missing_folders(path: Path) -> list[Path]:
    """The folders ``path.mkdir(parents=True)`` would make, the deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    return missing


@contextlib.contextmanager
def folders_made_for_a_check(path: Path) -> Iterator[None]:
    """Around a check before the run that may make ``path`` and its missing parents:
    on leaving, the folders it made are removed, the deepest first, if still empty. A
    run refused after the check (a strategy the shop at --url cannot run) left an empty
    --report folder behind (a showdown audit). The run makes them again when it writes."""
    made = _missing_folders(path)
    try:
        yield
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()


def unwritable_file(path: Path, *, make_parent: bool = False) -> str | None:
    """Why ``path`` could not be written, found before a run rather than after minutes
    of it: its folder (made for the check, with ``make_parent``, and removed again)
    must be a writable directory."""
    with folders_made_for_a_check(path.resolve().parent):
        return _unwritable_file(path, make_parent=make_parent)


def _unwritable_file(path: Path, *, make_parent: bool) -> str | None:
    parent = path.resolve().parent
    if make_parent:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a folder should be ("File exists")
            return f"{parent} is not a directory"
        except OSError as exc:
            return exc.strerror or str(exc)
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"{parent} is not a writable directory"
    if path.is_dir():  # found only when the results were written, after the whole run
        return f"{path} is a directory, not a file"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    target = Path(os.path.realpath(path))  # a dangling link's file, made through it
    if not target.exists():
        # made and removed: what the folder's mode bits do not say (root is let in by
        # them everywhere, and a read-only mount or /sys refused the file only after
        # the whole run; a showdown audit)
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            target.unlink()
        except FileExistsError:  # made meanwhile by someone else: theirs to keep
            return None
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def at_least(low: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low`` (and <= ``most``, given one)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}, not {value}")
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


def seconds_up_to(most: float) -> Callable[[str], float]:
    """An argparse type: ``seconds``, and at most ``most`` (a timer past about 49 days
    is an OverflowError deep in a run, after everything has started)."""
    def parse(text: str) -> float:
        value = seconds(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:g} seconds, not {text}")
        return value
    return parse


def write_results(path: Path, text: str, command: str) -> bool:
    """Write a run's results; a failure (a full disk, ``/dev/full``) is one line naming
    the file, found only now, after the run (``unwritable_file`` checked the folder)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"seckill {command}: error: could not write {path}: {exc.strerror or exc}",
              file=sys.stderr)
        return False
    return True

