"""The claims of a shop gunicorn runs itself, held by a small process of its own.

``seckill serve`` claims its database (``servelock``) and names itself in its Redis
(``redisclaim``) before it starts gunicorn. gunicorn started by hand, as
docs/deployment.md's "Without Docker" and compose's ``web`` run it, claimed nothing: a
``seckill serve`` of another database started beside it on the same Redis, overwrote
its sale, and the gunicorn shop answered 503 "being reset or reloaded" to every
purchase until an admin reset deleted its orders (a multi-host audit).

So ``gunicorn_conf.when_ready`` (the master, its sockets bound, before any worker)
starts ``python -m webapp.claimholder``, which takes both claims with the settings the
workers will read, says on its first line of output whether it holds them, and keeps
them until its standard input closes (the master and every worker it forked gone) or
the master dies (``PR_SET_PDEATHSIG``). A separate process, because the master imports
no part of the app before the fork (its workers patch the standard library first).

Its first line: ``held``, ``refused <why>`` (another shop's claim: gunicorn does not
start), or ``held, unchecked <what>`` (a server that did not answer: the shop starts,
as it starts with Redis down, and says what it could not check). The holder is kept on
gunicorn's arbiter, which outlives a HUP's fresh read of a config file."""

from __future__ import annotations

import contextlib
import os
import sys

from .problems import first_line


def _first_line(exc: BaseException) -> str:
    return first_line(exc) or type(exc).__name__


def hold(stack: contextlib.ExitStack) -> list[str]:
    """Take the claims the shop of this environment's settings makes, into ``stack``;
    what could not be checked.

    :raises servelock.DatabaseInUse: another shop's claim stands in the way."""
    from flask import Flask

    from . import config as settings
    from . import redisclaim, servelock

    instance = Flask("webapp", instance_relative_config=True).instance_path  # the app's
    config = settings.from_env(instance)
    database_url, redis_url = config["DATABASE_URL"], config["REDIS_URL"]
    unchecked = []
    # REDLOCK_URLS unset is no list of servers of its own here: the workers embed none
    servers = servelock.Servers(redis_url, config["REDLOCK_URLS"] or [],
                                config["ZOOKEEPER_HOSTS"])
    try:
        stack.enter_context(servelock.claimed(database_url, servers))
        identity = redisclaim.database_identity(database_url)
    except servelock.DatabaseInUse:
        raise
    except Exception as exc:  # not reachable now: the workers say so at /healthz
        # and no Redis claim either: it names the database, unknown (a review: the
        # note blamed REDIS_URL, after a second wait for the same silent server)
        return [f"DATABASE_URL ({_first_line(exc)}); so REDIS_URL too"]
    try:
        stack.enter_context(redisclaim.claimed(redis_url, identity))
    except servelock.DatabaseInUse:
        raise
    except Exception as exc:
        unchecked.append(f"REDIS_URL {settings.without_password(redis_url)} "
                         f"({_first_line(exc)})")
    return unchecked


def main() -> int:
    from lockcore.lifeline import die_with_parent

    from . import servelock
    from .servelock import DatabaseInUse

    master = os.getppid()
    die_with_parent(master)
    servelock.speak_for(master)  # a refused shop is told the master's pid, not ours
    with contextlib.ExitStack() as stack:
        try:
            unchecked = hold(stack)
        except DatabaseInUse as exc:
            print(f"refused {exc}", flush=True)
            return 1  # (not 3: gunicorn reads a child's 3 as a worker that failed to boot)
        print("held" + (f", unchecked {'; '.join(unchecked)}" if unchecked else ""),
              flush=True)
        sys.stdin.read()  # until the master and its workers have closed it
    return 0


if __name__ == "__main__":
    sys.exit(main())
