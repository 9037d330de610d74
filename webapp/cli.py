"""The ``seckill`` command: one entry point, each sub-command imported only when used.

Importing Locust monkey-patches the process with gevent, so nothing here imports it;
the showdown runs Locust as a subprocess.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: sub-command -> "module:function"; each function takes the parsed args, returns an exit code
_COMMANDS = {
    "serve": "webapp.serve:main",
    "showdown": "loadtest.showdown:main",
    "scenario": "loadtest.labs:main",
    "bench": "loadtest.bench:main",
    "redis": "lockcore.embedded:cli_main",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seckill", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, target in _COMMANDS.items():
        module = importlib.import_module(target.partition(":")[0])
        add_arguments = getattr(module, "add_arguments", None)
        doc = (module.__doc__ or command).strip().splitlines()[0]
        p = sub.add_parser(command, help=doc, description=doc)
        if add_arguments is not None:
            add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module_name, _, func = _COMMANDS[args.command].partition(":")
    code: int = getattr(importlib.import_module(module_name), func)(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
