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
    "lockcore/py.typed",  # a user's mypy reads lockcore's annotations
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


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution a plain ``pip install`` of ``requirements`` brings in, read from
    the installed packages' own metadata (markers evaluated, extras followed)."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[tuple[str, str]] = set()
    todo = [(Requirement(text), "") for text in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        wanted = {(name, e) for e in {"", *requirement.extras}}
        for dist_name, dist_extra in wanted:
            if (dist_name, dist_extra) in found:
                continue
            found.add((dist_name, dist_extra))
            try:
                requires = metadata.requires(dist_name) or []
            except metadata.PackageNotFoundError:
                continue
            todo += [(Requirement(text), dist_extra) for text in requires]
    return {name for name, _ in found}


def test_what_the_served_app_imports_comes_with_the_base_install():
    # gunicorn's gevent worker imports `packaging`, which gunicorn asks for only under its
    # `gevent` extra: a plain `pip install .` could not serve (our own .venv had it from
    # pytest). Every distribution the app and its gunicorn config import must be in the
    # closure of the base dependencies
    import importlib.metadata as metadata
    import tomllib

    from packaging.utils import canonicalize_name

    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    closure = _closure(base)
    probe = ("import sys, webapp.gunicorn_conf, webapp.app, webapp.serve\n"
             "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True, timeout=120).stdout.split()
    owners = metadata.packages_distributions()
    ours = {"lockcore", "webapp", "loadtest", "migrations", "tests"}
    optional = {"pygments"}  # Mako imports it if it is there (syntax-highlighted errors)
    needed = {canonicalize_name(dist) for module in imported
              if module not in sys.stdlib_module_names and module not in ours | optional
              for dist in owners.get(module, [])}
    assert needed, "the probe found no third-party imports: it is broken"
    assert needed <= closure, f"imported but not installed by `pip install .`: " \
                              f"{sorted(needed - closure)}"
