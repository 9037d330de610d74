"""The workshop's commands, run: every ``console`` block in docs/workshop must still hold.

A lesson that shows a command and an output the code no longer produces teaches the
wrong thing, quietly. So the lessons are executable, doctest-style: in a fenced block
marked ``console``, a line starting with ``$ `` is a command (run with bash from the
repository root, the virtualenv's ``bin`` first on PATH), and the lines after it are
output lines that must appear in that order, each matching one line of the output.
``...`` stands for anything and a run of spaces for any run of whitespace (stamps,
pids, ports and column widths change). The command must exit 0. ``text`` blocks are
for the reader only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support import need_network_namespaces, need_zookeeper

ROOT = Path(__file__).resolve().parent.parent
WORKSHOP = ROOT / "docs" / "workshop"
LESSONS = sorted(WORKSHOP.glob("[0-9][0-9]-*.md"))
BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
#: a command mentioning one of these needs a system part a marker names
MARKERS = {"ghost-node": pytest.mark.zookeeper, "partition": pytest.mark.netns}


class Example(NamedTuple):
    lesson: str
    command: str
    expected: list[str]


def examples(path: Path) -> list[Example]:
    found: list[Example] = []
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append(Example(path.name, line[2:], []))
            elif line.strip():
                assert found, f"{path.name}: output line before any command: {line!r}"
                found[-1].expected.append(line)
    return found


def pattern(expected: str) -> re.Pattern[str]:
    """``...`` matches anything; a run of whitespace matches any run of whitespace."""
    parts = [r"\s+".join(re.escape(word) for word in part.split())
             for part in expected.split("...")]
    return re.compile(".*".join(parts))

def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines not found, in order, among the output's lines."""
    lines = output.splitlines()
    position = 0
    for index, want in enumerate(expected):
        regex = pattern(want)
        while position < len(lines) and not regex.search(lines[position]):
            position += 1
        if position == len(lines):
            return expected[index:]
        position += 1
    return []


ALL = [example for lesson in LESSONS for example in examples(lesson)]


def test_every_lesson_is_in_the_index_and_shows_a_command_to_run() -> None:
    index = (WORKSHOP / "index.md").read_text(encoding="utf-8")
    assert len(LESSONS) >= 10
    for lesson in LESSONS:
        assert f"({lesson.name})" in index, f"{lesson.name} is missing from index.md"
        assert examples(lesson), f"{lesson.name} has no console block to run"


def test_every_lesson_has_an_exercise_with_its_answer_folded() -> None:
    for lesson in LESSONS:
        text = lesson.read_text(encoding="utf-8")
        assert "## Exercise" in text and "<details><summary>Answer</summary>" in text, \
            lesson.name


def test_every_file_a_lesson_tells_you_to_read_exists() -> None:
    ours = re.compile(r"`((?:lockcore|webapp|loadtest|docs)/[\w/.-]+\.(?:py|lua|md))`")
    for lesson in [*LESSONS, WORKSHOP / "index.md"]:
        for path in ours.findall(lesson.read_text(encoding="utf-8")):
            assert (ROOT / path).is_file(), f"{lesson.name} names {path}, which does not exist"


def test_the_matcher_honours_dots_and_whitespace_and_order() -> None:
    output = "[  +12 ms] A acquires  lock\nB   refused\n"
    assert missing_lines(["... A acquires lock", "B refused"], output) == []
    assert missing_lines(["B refused", "... A acquires lock"], output) == ["... A acquires lock"]
    assert missing_lines(["A acquires the lock"], output) == ["A acquires the lock"]


@pytest.mark.parametrize("example", [
    pytest.param(ex, id=f"{ex.lesson}:{ex.command[:60]}",
                 marks=[mark for word, mark in MARKERS.items() if word in ex.command])
    for ex in ALL])
def test_workshop_command_prints_what_its_lesson_says(example: Example) -> None:
    # the markers only label these examples; without the system part the lab would say
    # SKIPPED and exit 1, a failure: skip loudly instead (fail under CI=true)
    if "ghost-node" in example.command:
        need_zookeeper("the ghost-node lab")
    if "partition" in example.command:
        need_network_namespaces("the partition lab")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "ZOOKEEPER_HOSTS"):
        env.pop(name, None)  # the lessons run on servers the commands start themselves
    done = subprocess.run(["bash", "-c", example.command], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{example.command} exited {done.returncode}:\n{output}"
    missing = missing_lines(example.expected, output)
    assert not missing, f"{example.lesson}: `{example.command}` did not print, in order:\n" + \
        "\n".join(missing) + f"\n--- it printed ---\n{output}"
