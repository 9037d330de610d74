"""One failure lab from the seed articles, narrated, ending with a VERDICT line.

``seckill scenario NAME`` runs one lab; ``seckill scenario --list`` lists them. Each lab
starts the real servers it needs (redis-server via ``lockcore.embedded``, ZooKeeper,
a gunicorn-served storefront), makes one failure from the seeds happen on purpose,
narrates the timeline as it happens, and ends with exactly one ``VERDICT:`` line. The
exit code is 0 when the lab demonstrated what it claims, so the labs double as tests
that the lessons still hold.

A lab module exposes ``TITLE``, ``SEED`` and ``run(narrator) -> Verdict``. Modules are
imported only when their lab runs: some import kazoo or start gunicorn.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from types import ModuleType

from lockcore.zkserver import ZooKeeperMissing

from .narration import Narrator, Verdict

#: a lab that cannot run here for a missing system part: SKIPPED, as a missing Python
#: package or ``partition`` without ``ip`` says (it said "lab error", with its message)
MISSING_PARTS: tuple[type[Exception], ...] = (ZooKeeperMissing,)

__all__ = ["LABS", "Narrator", "Verdict", "add_arguments", "load", "main", "run_lab"]

logger = logging.getLogger(__name__)

#: lab name -> module in this package; the order follows the seeds and the workshop
LABS: dict[str, str] = {
    "process-lock": "process_lock",
    "oversell": "oversell",
    "crash-no-ttl": "crash_no_ttl",
    "setnx-expire-gap": "setnx_expire_gap",
    "getset-clock": "getset_clock",
    "wrong-release": "wrong_release",
    "pause-past-ttl": "pause_past_ttl",
    "watchdog": "watchdog",
    "ghost-node": "ghost_node",
    "failover": "failover",
    "redlock-restart": "redlock_restart",
    "partition": "partition",
}


def load(name: str) -> ModuleType:
    """Import the module of lab ``name``; ValueError names the labs if it is unknown."""
    try:
        module_name = LABS[name]
    except KeyError:
        raise ValueError(f"unknown lab {name!r}; choose one of: {', '.join(LABS)}") from None
    return importlib.import_module(f"{__name__}.{module_name}")


def run_lab(name: str, narrator: Narrator | None = None) -> Verdict:
    """Run one lab and return its verdict (what the tests call)."""
    module = load(name)
    verdict: Verdict = module.run(narrator or Narrator())
    return verdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="the lab to run (see --list)")
    parser.add_argument("--list", action="store_true", help="list the labs and exit")
    parser.epilog = ("Exit status: 0 the lab demonstrated what it claims; 1 it did not, or "
                     "could not run (its VERDICT line says why: NOT DEMONSTRATED, SKIPPED, "
                     "lab error); 2 no lab or an unknown one named; 130 interrupted "
                     "(Ctrl-C, SIGTERM), with no VERDICT line; 141 the reader of the "
                     "output stopped early (| head).")


def print_list() -> None:
    for name in LABS:
        try:
            module = load(name)
            seed, title = str(module.SEED), str(module.TITLE)
        except ImportError as exc:  # a lab whose module is not importable here
            seed, title = "?", f"(unavailable: {missing_package(exc)})"
        print(f"{name:<18} seed {seed:<8} {title}")


#: the extra that brings an optional package a lab imports
EXTRAS = {"kazoo": "zookeeper"}


def missing_package(exc: ImportError) -> str:
    """What to install for a lab whose import failed."""
    name = (exc.name or "").partition(".")[0]
    if name in EXTRAS:
        return f"needs the Python package {name!r} (pip install 'seckill[{EXTRAS[name]}]')"
    return f"cannot be imported here: {exc}"


def interrupted(exc: BaseException) -> bool:
    """A KeyboardInterrupt somewhere in ``exc``'s chain: the error came while unwinding."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def main(args: argparse.Namespace) -> int:
    if args.list:
        if args.name:  # it was ignored: "--list crash" listed everything, ran nothing
            print(f"seckill scenario: --list takes no lab name ({args.name!r}): run "
                  f"`seckill scenario {args.name}`, or `--list` alone", file=sys.stderr)
            return 2
        print_list()
        return 0
    if not args.name:
        print("seckill scenario: name a lab, or use --list to see them", file=sys.stderr)
        return 2
    try:
        module = load(args.name)
    except ValueError as exc:
        print(f"seckill scenario: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional package (kazoo: the zookeeper extra)
        print(f"VERDICT: NOT DEMONSTRATED: SKIPPED: {missing_package(exc)}")
        return 1
    print(f"== {args.name}: {module.TITLE} (seed {module.SEED}) ==", flush=True)
    narrator = Narrator()
    try:
        verdict: Verdict = module.run(narrator)
    except Exception as exc:  # the lab itself broke: say so, in the one verdict line
        from webapp.cli import stopping

        # Ctrl-C, then cleanup against a frozen server timed out; or the Ctrl-C itself
        # swallowed by kazoo and raised as ConnectionClosedError, no KeyboardInterrupt
        # in the chain (ghost-node said "VERDICT: lab error", exit 1; a labs audit)
        if interrupted(exc) or stopping():
            raise KeyboardInterrupt from exc
        if isinstance(exc, BrokenPipeError):
            from webapp.cli import reader_gone

            if reader_gone():  # `| head`: nobody reads the verdict either
                raise
        if isinstance(exc, MISSING_PARTS):
            print(f"VERDICT: NOT DEMONSTRATED: SKIPPED: {exc}")
            return 1
        traceback.print_exc()
        print(f"VERDICT: lab error, nothing demonstrated: {type(exc).__name__}: {exc}")
        return 1
    if verdict.demonstrated:
        print(f"VERDICT: {verdict.line}")
        return 0
    print(f"VERDICT: NOT DEMONSTRATED: {verdict.line}")
    return 1
