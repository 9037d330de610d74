"""The built wheel carries everything the installed program reads at run time.

An editable install reads the source tree, so it cannot tell whether a ``.lua`` script,
a template or an Alembic revision would be left out of a real install. This builds the
wheel, installs it into a scratch directory, and loads every Lua script from *there*
into a real redis-server.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, timeout=300)
    (built,) = out.glob("seckill-*.whl")
    return built


def source_files(pattern: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern)}


@pytest.mark.parametrize("pattern", [
    "lockcore/scripts/*.lua",
    "webapp/scripts/*.lua",
    "webapp/templates/*.html",
    "webapp/static/*",
    "migrations/alembic.ini",
    "migrations/script.py.mako",
    "migrations/versions/*.py",
])
def test_the_wheel_ships_every_runtime_file(wheel: Path, pattern: str):
    expected = source_files(pattern)
    assert expected, f"nothing in the source tree matches {pattern}"
    with zipfile.ZipFile(wheel) as zf:
        shipped = set(zf.namelist())
    assert expected <= shipped, f"missing from the wheel: {sorted(expected - shipped)}"


def test_every_lua_script_loads_from_the_installed_wheel(wheel: Path, tmp_path: Path,
                                                         redis_client):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(target), str(wheel)], check=True, timeout=300)
    scripts = sorted(target.glob("*/scripts/*.lua"))
    assert {p.parent.parent.name for p in scripts} == {"lockcore", "webapp"}
    for path in scripts:
        sha = redis_client.script_load(path.read_text(encoding="utf-8"))
        assert redis_client.script_exists(sha) == [True], path
