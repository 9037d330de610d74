"""Every Lua script the package ships loads into Redis and documents its interface.

The scripts are package data read with ``importlib.resources`` (as flaskr reads its
``schema.sql``), so this walks the *imported* package, not the source tree: a script
left out of the package, or one that no longer compiles, fails here rather than on the
first request of a flash sale.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest

from lockcore import scripts

SHIPPED = sorted(p.name for p in resources.files("lockcore.scripts").iterdir()
                 if p.name.endswith(".lua"))


def header_of(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_the_package_ships_the_scripts_the_strategies_use():
    assert SHIPPED, "no .lua files found in the installed lockcore.scripts"
    assert {"token_acquire.lua", "token_release.lua", "token_extend.lua", "signal.lua",
            "fenced_set.lua"} <= set(SHIPPED)
    assert scripts.names() == [name[:-4] for name in SHIPPED]


@pytest.mark.parametrize("filename", SHIPPED)
def test_script_compiles_in_a_real_redis(filename, redis_client):
    sha = redis_client.script_load(scripts.source(filename[:-4]))
    assert redis_client.script_exists(sha) == [True]


@pytest.mark.parametrize("filename", SHIPPED)
def test_script_header_names_every_key_argument_and_return_value(filename):
    text = scripts.source(filename[:-4])
    header = header_of(text)
    body = text[len(header):]
    assert re.search(r"\breturns\b", header), f"{filename}: the header says nothing it returns"
    for used in sorted(set(re.findall(r"\b(KEYS|ARGV)\[(\d+)\]", body))):
        name = f"{used[0]}[{used[1]}]"
        assert re.search(rf"^--\s+{re.escape(name)}\s", header, re.M), \
            f"{filename}: {name} is used but not described in the header"


def test_a_script_is_registered_once_per_client(redis_client):
    assert scripts.script(redis_client, "signal") is scripts.script(redis_client, "signal")
