"""The commands README.md, the deployment page and the Makefile show, as a user types them.

``make demo`` was broken for a whole session while its command was tested only as the
tests typed it (an absolute ``--report``; the Makefile passes a relative one). Most of
the README's commands are minutes of load, so they do not all run here: each is put
through the parser it meets and, for the showdown, every check made before the shop is
served (the run itself is stubbed). What runs for real, smaller: the Makefile's demo
recipe (``tests/loadtest/test_showdown_app.py``), ``seckill redis --nodes 5``
(``tests/contract/test_cli.py``) and the workshop's commands (``test_workshop.py``).
"""

from __future__ import annotations

import re
import shlex

import pytest

from tests.support import ROOT, make_recipe
from webapp.cli import build_parser, main

DOCS = ["README.md", "docs/deployment.md", "webapp/README.md"]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
#: how a documented command line starts the console script
SECKILL = re.compile(r"^(?:setarch -R )?(?:\.venv/bin/)?seckill (.+)$")


def documented_lines(doc: str) -> list[str]:
    """The lines of ``doc``'s fenced blocks, each without its trailing ``# comment``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    return [line.split(" #")[0].strip()
            for block in FENCE.findall(text) for line in block.splitlines()]


def seckill_commands() -> list[tuple[str, str]]:
    """``(where, command line)`` of every ``seckill`` command the docs and Makefile show.
    A synopsis (``seckill serve [--host 127.0.0.1]``) is no command."""
    found = [(doc, line) for doc in DOCS for line in documented_lines(doc)
             if SECKILL.match(line) and "[--" not in line]
    for target in ("demo", "serve", "showdown", "bench"):
        found.append((f"make {target}", shlex.join(make_recipe(target))))
    return found


COMMANDS = seckill_commands()


def test_the_docs_show_the_commands_this_file_checks():
    # a change to how the README writes its commands must not empty the list quietly
    shown = {arguments(line)[0] for _, line in COMMANDS}
    assert shown == {"serve", "showdown", "scenario", "bench", "redis"}, shown
    assert len([where for where, _ in COMMANDS if where == "README.md"]) >= 12


def arguments(line: str) -> list[str]:
    said = SECKILL.match(line)
    assert said, f"not a seckill command line: {line!r}"
    return shlex.split(said[1])


@pytest.mark.parametrize("where, line", COMMANDS, ids=[f"{w}: {c}" for w, c in COMMANDS])
def test_every_documented_seckill_command_is_accepted_as_written(where, line, capsys,
                                                                 tmp_path, monkeypatch):
    argv = arguments(line)
    try:
        parsed = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where} shows `{line}`: {capsys.readouterr().err}")
    if parsed.command != "showdown":
        return
    # the showdown's own checks (--rounds without --sustained, --stock with it, an
    # unwritable --report, ...) come after the parser: run them, stop before the shop
    import loadtest.showdown

    ran = []
    monkeypatch.setattr(loadtest.showdown, "_run", lambda *a: ran.append(a) or 0)
    for name in ("REDIS_URL", "REDLOCK_URLS", "SECKILL_ADMIN_TOKEN", "LOCK_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # a --report folder is made where it is typed
    assert main(argv) == 0 and ran, f"{where}: {capsys.readouterr().err}"


def test_every_make_target_the_readme_names_is_in_the_makefile():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^make ([\w-]+)", readme, re.M))  # the code blocks' lines
    named |= set(re.findall(r"`make ([\w-]+)", readme))  # and the prose's
    assert {"demo", "test", "serve", "test-all", "sysdeps"} <= named, named
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    assert named <= targets, f"the README names make targets there are not: {named - targets}"


def test_the_readme_shows_the_command_make_demo_runs():
    shown = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
             if line.rstrip().endswith("# what make demo runs")]
    assert len(shown) == 1, shown
    assert shlex.split(shown[0].split(" #")[0]) == make_recipe("demo")

