"""gunicorn settings for the storefront (``gunicorn -c webapp/gunicorn_conf.py``).

gevent workers: a purchase mostly waits (on Redis, on the lock, on the database), and
a greenlet per connection lets 1000 concurrent buyers wait on 2 cores; in our
measurements gevent served a trivial endpoint fastest on this machine. Two workers by
default, which is also what makes the ``local`` lock's failure visible: two processes,
two unrelated process-local locks.
"""

import contextlib
import gc
import http
import json
import logging
import os
import re
import secrets
import sys

from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker


def write_json_error(sock, status_int, reason, mesg):  # type: ignore[no-untyped-def]
    """gunicorn's own answer to a request it cannot parse (bad request line, header too
    large...), as JSON ``{"error", "detail"}`` like every other error of the API."""
    try:  # gunicorn names a 501 "Bad Request" (a security audit): the status's own
        reason = http.HTTPStatus(int(status_int)).phrase
    except ValueError:
        pass
    code = re.sub(r"[^a-z0-9]+", "_", reason.lower()).strip("_")
    body = json.dumps({"error": code, "detail": mesg[:500]}).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


#: the shop's lines as gunicorn writes its own ("[date] [pid] [LEVEL] ..."), and whose
LOG_FORMAT = "%(asctime)s [%(process)d] [%(levelname)s] %(name)s: %(message)s"
LOG_DATEFMT = "[%Y-%m-%d %H:%M:%S %z]"


def log_like_gunicorn(level: str) -> None:
    """The app's log records to stderr (gunicorn's log: the file ``seckill serve``
    names), each with its time, pid, level and logger.

    No handler was set up: the records went through Python's last-resort handler, the
    message alone ("settled the order in doubt of 'ann' for sku-1: not written, units
    back": when, which worker?). A handler on the root logger, set up in the served
    worker only: the tests' app keeps pytest's own capture.

    At gunicorn's ``loglevel`` (``SECKILL_LOG_LEVEL``, ``warning`` by default, as the
    last-resort handler let through): ``info`` adds a line per order, 230,000 a minute
    in a sustained showdown phase."""
    handler = logging.StreamHandler(sys.stderr)  # fd 2: gunicorn reopens it on SIGUSR1
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper())


class JsonErrorGeventWorker(GeventWorker):
    """The gevent worker, with JSON instead of gunicorn's HTML error page, and the app's
    log lines dated (``log_like_gunicorn``). Defined here, not in the webapp package, so
    the master never imports the app before the fork."""

    def init_process(self):  # type: ignore[no-untyped-def]
        util.write_error = write_json_error  # looked up at call time by handle_error
        super().init_process()

    def load_wsgi(self):  # type: ignore[no-untyped-def]
        log_like_gunicorn(self.cfg.loglevel)  # after gevent's patching, before the app logs
        # gunicorn's own line per malformed request, at most once a minute (logthrottle)
        from webapp.logthrottle import GUNICORN_BAD_REQUESTS

        logging.getLogger("gunicorn.error").addFilter(GUNICORN_BAD_REQUESTS)
        super().load_wsgi()


wsgi_app = "webapp:create_app()"
bind = os.environ.get("SECKILL_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("SECKILL_WORKERS", "2"))
worker_class = JsonErrorGeventWorker
worker_connections = int(os.environ.get("SECKILL_WORKER_CONNECTIONS", "1000"))  # per worker
backlog = 2048
timeout = 60
graceful_timeout = 5
keepalive = 5
loglevel = os.environ.get("SECKILL_LOG_LEVEL", "warning")
accesslog = None
errorlog = "-"
# no preload: each worker imports the app after gevent has patched it
preload_app = False


#: an admin token shorter than this is warned about
WEAK_TOKEN_CHARS = 16
#: the token docker-compose.yml falls back on (``${SECKILL_ADMIN_TOKEN:-...}``)
COMPOSE_DEFAULT_TOKEN = "change-me-admin-token"


def on_starting(server):  # type: ignore[no-untyped-def]
    """In the master, before any worker: with ``SECKILL_ADMIN_TOKEN`` unset, one token
    for every worker, printed in the log (the contract: "generated and printed when
    unset"). Each worker made a random one of its own and printed none: run as the
    image's ``CMD`` or by hand, the admin API answered every token 401 (a deployment
    audit). ``seckill serve`` always passes its own."""
    given = os.environ.get("SECKILL_ADMIN_TOKEN") or ""
    if given == COMPOSE_DEFAULT_TOKEN:
        server.log.warning("SECKILL_ADMIN_TOKEN is docker-compose.yml's default, "
                           "%r: anyone who read the file can reset the sales; set your "
                           "own", COMPOSE_DEFAULT_TOKEN)
    if given and len(given) < WEAK_TOKEN_CHARS:
        # "x" or "admin" were taken without a word (a security audit): a guessable token
        # resets every sale, and failed tries are not slowed down
        server.log.warning("SECKILL_ADMIN_TOKEN is %d characters: anyone who guesses it "
                           "can reset the sales; use %d or more (python -c 'import "
                           "secrets; print(secrets.token_urlsafe(24))')", len(given),
                           WEAK_TOKEN_CHARS)
    if not given:
        os.environ["SECKILL_ADMIN_TOKEN"] = secrets.token_urlsafe(24)  # the workers' too
        server.log.warning("SECKILL_ADMIN_TOKEN unset: the admin token of this server's "
                           "workers is %s", os.environ["SECKILL_ADMIN_TOKEN"])


#: how long the claims may take to check: two servers, each up to its connect timeout
#: (a database's 10 s per address it resolves to)
CLAIM_WAIT_S = 60.0
#: where the holder is kept: on gunicorn's arbiter, which a HUP keeps (a config file
#: given by path is read afresh, and a module global of the old one went with it)
HOLDER = "seckill_claim_holder"


def when_ready(server):  # type: ignore[no-untyped-def]
    """The master, its sockets bound, before any worker: claim the shop's database and
    Redis, as ``seckill serve`` does before it starts gunicorn (``webapp/claimholder.py``).
    Another shop's claim in the way: gunicorn does not start (``RuntimeError``: its
    "Error: ..." and exit 1). ``seckill serve`` holds them itself (``SECKILL_SERVE_ID``)."""
    import select
    import subprocess

    if os.environ.get("SECKILL_SERVE_ID") or getattr(server, HOLDER, None) is not None:
        return
    # the master's sys.path: gunicorn's --pythonpath and --chdir are not in the child's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    holder = subprocess.Popen([sys.executable, "-m", "webapp.claimholder"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], CLAIM_WAIT_S)
    said = holder.stdout.readline().decode(errors="replace").strip() if ready else ""
    if said.startswith("held"):
        setattr(server, HOLDER, holder)
        if ", unchecked " in said:
            server.log.warning("not checked for another shop's claim, not answering: %s",
                               said.split(", unchecked ", 1)[1])
        return
    holder.kill()
    code = holder.wait()
    if said.startswith("refused "):
        raise RuntimeError(said[len("refused "):])
    if ready:  # it ended without a word: its traceback is above, in the log
        raise RuntimeError(f"the shop's claims (python -m webapp.claimholder) ended with "
                           f"exit code {code} before saying whether they hold")
    raise RuntimeError(f"the shop's claims were not checked within {CLAIM_WAIT_S:.0f} s "
                       "(python -m webapp.claimholder)")


def on_exit(server):  # type: ignore[no-untyped-def]
    """The claims go with the master (the holder also dies with it, if killed)."""
    import subprocess

    holder = getattr(server, HOLDER, None)
    if holder is None:
        return
    assert holder.stdin is not None
    holder.stdin.close()  # its claims let go of in order (a PostgreSQL session's too)
    try:
        holder.wait(5)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()


#: the garbage collector's youngest-generation threshold in a worker (CPython's is 700)
GC_GEN0_THRESHOLD = int(os.environ.get("SECKILL_GC_GEN0_THRESHOLD", "50000"))


#: how often a worker drains its undo queues without a purchase to do it
RETRY_LATER_EVERY_S = 5.0
#: how long an exiting worker tries its waiting undos once more (within graceful_timeout)
LAST_CHANCE_S = 2.0


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    """Once the worker has imported the app: its ~115,000 objects (Flask, SQLAlchemy,
    redis-py, gevent, our modules) are moved out of the collector's reach
    (``gc.freeze``, as Instagram's pre-fork servers do), and the youngest generation
    is collected every 50,000 allocations instead of 700.

    Measured in one process, 500 concurrent purchases (docs/performance.md, session 7):
    a full collection walked every object of the app, 65-80 ms each, and the young
    ones ran 150 times per 5,000 purchases: 30-50 us of collector per purchase.

    Why 50,000 and not the 7,000 of session 7 (session 10): the count that triggers a
    young collection is allocations minus deallocations, and under load a worker keeps
    thousands of live young objects (a greenlet, a parser, a request per connection:
    500 of them). At 7,000 that count crossed the threshold again and again as the
    requests in flight rose and fell, and each collection walked them all and freed
    nothing: served, 12-19 us of collector per ``atomic`` purchase (``gc.callbacks``
    timing, four phases); at 50,000, 0.9-2.0 us. Garbage cycles (the no-op's request
    objects make a few) are still collected, every few seconds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    # the undos a backend was down for (webapp/retrylater.py), also when no buyer comes,
    # and a look at the sales for units a crashed purchase left in checkout
    # and this host's clock against Redis's, for the purchases' deadlines; and whether
    # Redis's data has a new history since the sales were checked (redishistory.py)
    from webapp.checkoutwatch import watch_for
    from webapp.deadlines import clock_watch_for
    from webapp.redishistory import history_watch_for
    from webapp.retrylater import drain_every

    app = getattr(worker, "wsgi", None)
    watch, clock, history = watch_for(app), clock_watch_for(app), history_watch_for(app)

    def look_at_clock() -> None:
        if clock is not None:
            with contextlib.suppress(Exception):  # Redis down: /healthz and buyers say it
                clock()

    def look_at_history() -> None:
        # while a look is owed: at the start (a Redis of a new history, a failover:
        # before the first sale), and a quiet shop's refused connections (the undo
        # drains' too), cleared without a buyer
        if history is not None and history.suspect:
            with contextlib.suppress(Exception):  # Redis down: the next purchase looks
                history.check()

    def periodic() -> None:
        look_at_clock()
        look_at_history()
        if watch is not None:
            watch()

    look_at_history()  # a new watch owes a look
    look_at_clock()  # before the first purchase, not 5 s after
    drain_every(RETRY_LATER_EVERY_S, also=periodic)


def worker_exit(server, worker):  # type: ignore[no-untyped-def]
    """The undos this worker still holds die with it: try them once more, and log each
    one left (``retrylater.last_chance``)."""
    from webapp.retrylater import last_chance

    last_chance(LAST_CHANCE_S)
