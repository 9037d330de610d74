"""Admin: reset a sale (``PUT /api/admin/sales/<sku>``, bearer token) and its page.

The token is compared with ``hmac.compare_digest`` on bytes, so the time taken does
not reveal how many leading characters were right (and a non-ASCII header cannot
raise ``TypeError``, as ``compare_digest`` on ``str`` would).
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from redis.exceptions import AuthenticationError, RedisError, ResponseError

import lockcore
from lockcore import LockError

from . import locks, paths, sales, section, services, shop, validation
from .api import refuse_unknown
from .deadlines import LOST_REPLY
from .extensions import Backends, get_backends
from .keys import SaleKeys
from .lockedpath import LockedPath
from .problems import Busy, InvalidRequest, Unauthorized, UnknownSku
from .retrylater import UnsettledLock, release_or_settle_later
from .saleinfo import NotReloaded, cached_sale, load_sale

logger = logging.getLogger(__name__)

bp = Blueprint("admin", __name__)

MAX_STOCK = 1_000_000
MAX_WORK_MS = 10_000
MAX_LIMIT = sales.NO_LIMIT
#: buyers per page of ``GET /api/admin/sales/<sku>/buyers``: about 0.3 MB of JSON at
#: the showdown's ids; a sustained phase's ~250,000 orders are 25 pages
BUYERS_PAGE = 10_000


def _as_sent(header: str) -> bytes:
    """The header's bytes as the client sent them: WSGI decodes headers as latin-1, and
    a client sends a non-ASCII token in UTF-8 (so ``tökén`` matches its UTF-8 bytes)."""
    try:
        return header.encode("latin-1")
    except UnicodeEncodeError:  # not from a WSGI server (a test client's str)
        return header.encode("utf-8", "surrogateescape")


def _require_token() -> None:
    expected = get_backends().config["SECKILL_ADMIN_TOKEN"].encode("utf-8")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # only HTTP's whitespace (RFC 9110 OWS: space, tab): the header is latin-1-decoded
    # bytes, where str.strip() also takes NBSP (0xA0) and NEL (0x85) for spaces, the
    # last UTF-8 byte of à, Å, Р or х: a token ending in one of them never matched
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            _as_sent(given.strip(" \t")), expected):
        raise Unauthorized("send Authorization: Bearer <the admin token>")


@bp.put("/api/admin/sales/<sku>")
def reset_sale(sku: str) -> Response:
    _require_token()
    if not validation.plausible_sku(sku):
        raise UnknownSku("no product with that sku")
    backends = get_backends()
    try:
        body = validation.json_object(request)
        stock = validation.integer(body, "stock", low=0, high=MAX_STOCK)
        strategy = validation.text(body, "strategy", 40)
        paths.known(strategy)  # unknown -> 400 invalid_request
        locks.check_configured(strategy, backends.config)
        work_ms = validation.integer(body, "work_ms", low=0, high=MAX_WORK_MS, default=0)
        limit = validation.integer(body, "limit", low=1, high=MAX_LIMIT,
                                   default=sales.NO_LIMIT)
    except InvalidRequest:
        # a bad body for a sku that does not exist was its 400, where a purchase's is
        # the 404 (an API fuzz audit): the purchase's check, on the error path only
        refuse_unknown(backends, sku)
        raise
    # a new history's refused connections are cleared by a look, not only a buyer's:
    # the audit and the reset that mends a sale were 503 until one came (a review)
    backends.history.before_purchase()
    with _one_reset_at_a_time(backends, sku):
        _wait_out_holders_redis_forgot(backends, sku)
        with _current_lock(backends, sku):
            reset = sales.reset_sale(backends.sessions, backends.redis, sku, stock=stock,
                                     strategy=strategy, work_ms=work_ms, limit=limit)
    return jsonify(reset)


@bp.get("/api/admin/sales/<sku>/buyers")
def sale_buyers(sku: str) -> Response:
    """The buyers with an order in the sale, ``BUYERS_PAGE`` at a time: ``{"buyers":
    [...], "next": <the last of them, or null after the last page>}``, the next page
    at ``?after=<next>``. ``seckill showdown`` compares them, buyer by buyer, with the
    buyers it was told got one: compared as counts, an order told 201 and never written
    and one written whose answer was lost cancelled out (a showdown audit). Admin only:
    who bought is not every visitor's to read."""
    _require_token()
    if not validation.plausible_sku(sku):
        raise UnknownSku("no product with that sku")
    backends = get_backends()
    after = request.args.get("after", "")
    if len(after) > backends.config["MAX_USER_ID_LENGTH"] or \
            not validation.is_clean_text(after):
        refuse_unknown(backends, sku)  # the 404 first, as a reset's (an API fuzz audit)
        raise InvalidRequest("after must be the user id the page before ended with")
    page = sales.buyers(backends.sessions, sku, after, BUYERS_PAGE)
    return jsonify({"buyers": page, "next": page[-1] if len(page) == BUYERS_PAGE else None})


def _wait_out_holders_redis_forgot(backends: Backends, sku: str) -> None:
    """Redis lost the sale (a restart without persistence), and with it the lock of a
    holder that may still be in its section: its stock and order are written when its
    work is done. The reset took the lock at once in the empty Redis, and that holder's
    stock (the old sale's, minus one) and order landed in the new sale: oversold by the
    whole old stock (a fault audit).

    So the reset reloads the sale as a buyer would, which starts the hold-off of one
    lock TTL (``restore_sale.lua``: no section sells meanwhile), and waits out what is
    left of it before it takes the lock. Nothing to wait for when Redis has the sale.

    If no reload can stand over what Redis holds, the sale's keys there are deleted
    before the reset (after any hold-off), which then writes its own."""
    foreign = None
    try:
        cached_sale(backends.redis, backends.sessions, sku, wait_for_reset=False,
                    fence=functools.partial(locks.raise_fence, backends))
    except paths.UnknownStrategy:
        pass  # the database's sale names a strategy no path reloads: no buyer of it got
        # into a section either (refused before: paths.path_for), and the reset mends it
    except NotReloaded:
        # Redis holds a generation no reload stands over (the database was restored
        # from an older backup; a shop of another database, or one whose clock runs
        # ahead, wrote there): every buyer and the reset, the one way out, answered
        # 503 for good (a showdown audit). Its keys go, after a hold-off another
        # process's reload started, and the reset writes its own: not a generation
        # past that one, which may be years ahead, or not a number (a review)
        foreign = backends.redis.get(SaleKeys(sku).stock_gen)
        logger.warning("reset of %s: Redis holds the sale in generation %r, which no "
                       "reload of the database's stands over; its keys are deleted",
                       sku, foreign)
    left_ms = backends.redis.pttl(SaleKeys(sku).holdoff)
    if left_ms > 0:
        logger.warning("reset of %s: Redis lost the sale; waiting %.1fs for a lock holder "
                       "from before to finish", sku, left_ms / 1000)
        time.sleep(left_ms / 1000)  # gevent's, under gunicorn: other requests go on
    if foreign is not None:
        backends.redis.delete(*SaleKeys(sku).all())


@contextlib.contextmanager
def _one_reset_at_a_time(backends: Backends, sku: str) -> Iterator[None]:
    """Two resets of one sale must not interleave (database A, database B, Redis B,
    Redis A leaves A's stock in Redis and B's in the database). The lock strategies'
    stock lock would serialize them, the lock-free paths have none: this one is for
    resets only, so buyers never wait for it."""
    services.UNDONE_LATER.drain()  # a reset lock left for Redis to answer: settled first
    timeout = backends.config["LOCK_TIMEOUT_S"]
    # outlives a reset that waits ``timeout`` for the stock lock (or, with its server
    # down, one lock TTL at most: ``_current_lock``) and then works
    longest_lock_ttl_ms = int(backends.config["LOCK_TTL_MS"]) + 2 * MAX_WORK_MS
    # and before that, a hold-off after Redis lost the sale (one lock TTL at most too)
    lock = lockcore.create("token", backends.redis, f"reset:{sku}",
                           ttl_ms=int(2 * timeout * 1000) + 2 * longest_lock_ttl_ms + 10_000)
    try:
        got = lock.acquire(blocking=True, timeout=2 * timeout)
    except LOST_REPLY:
        # Sent to a Redis that did not answer in time (paused): it may take the lock when
        # it wakes, for nobody. Every reset of the sale then heard 503 "another reset is
        # still running" for the lock's whole 90 s (an HTTP audit). Let it go then.
        services.UNDONE_LATER.add(UnsettledLock(lock.settle, sku, "reset", _RESET_REMEDY))
        raise
    if not got:
        raise Busy(f"another reset of {sku} is still running")
    try:
        yield
    finally:  # a release whose reply was lost is settled later too (a review)
        with contextlib.suppress(LockError):
            release_or_settle_later(lock, sku, "reset", services.UNDONE_LATER, _RESET_REMEDY)


#: what ``retrylater.last_chance`` tells an operator of a reset lock still unsettled
_RESET_REMEDY = "its lock expires with its TTL (90 s by default); resets of the sale wait"


@contextlib.contextmanager
def _current_lock(backends: Backends, sku: str) -> Iterator[None]:
    """Hold the sale's current lock while resetting it: a buyer inside the critical
    section would otherwise write the old stock minus one over the new stock."""
    sale = load_sale(backends.sessions, sku)
    if sale.strategy not in paths.names():
        yield  # a strategy this shop does not know (an operator's SQL): every buyer of
        return  # it was refused before a section (paths.path_for); the reset mends it
    if not isinstance(paths.path_for(sale.strategy), LockedPath):
        yield  # lock-free paths have no section to wait for
        return
    # asked first: a cohorted lock builds its real one only at acquire
    if not locks.configured(sale.strategy, backends.config):
        yield  # not configured (any more): no buyer here can hold it either
        return
    timeout = backends.config["LOCK_TIMEOUT_S"]
    with _sections_refused(backends, sale, timeout):
        try:
            lock = locks.lock_for(backends, sale, "admin-reset")
            acquired = lock.acquire(blocking=True, timeout=timeout)
            down = None if acquired else _redlock_majority_down(backends, sale)
        except _unreachable(sale.strategy) as exc:
            down = str(exc)
    if down is not None:
        # ZooKeeper, or a majority of the redlock nodes, is down, for this worker at
        # least (a sale set to it could never be switched away: every reset was 503).
        # Other workers may still reach it, so fence through the shop's Redis, which
        # every section checks: a hold-off stops new sections everywhere, and one begun
        # before ends within the lock's TTL. Wait that long; use the lock if it is back.
        ttl_ms = locks.lock_ttl_ms(backends, sale)
        logger.warning("reset of %s: its %s lock is unreachable (%s); holding the sale off "
                       "and resetting after %.1fs", sku, sale.strategy, down, ttl_ms / 1000)
        # held off for the wait and the reset after it: a section begun once the wait
        # is over must not sell either, while the reset runs without the lock
        section.hold_off(backends.redis, sale, 2 * ttl_ms + 10_000)
        time.sleep(ttl_ms / 1000)  # gevent's, under gunicorn: other requests go on
        try:
            lock = locks.lock_for(backends, sale, "admin-reset")
            acquired = lock.acquire(blocking=False)
        except _unreachable(sale.strategy):
            acquired = False
        if not acquired:
            yield  # still down, or taken since: every section has ended or been held off
            return
    if not acquired:
        raise Busy(f"could not take the {sale.strategy} lock of {sku} within {timeout:g}s: "
                   "purchases hold it, or keep winning it")
    try:
        yield
    finally:
        try:  # a release whose reply was lost: settled later, as a purchase's (a review)
            release_or_settle_later(lock, sku, sale.strategy, services.UNDONE_LATER)
        except LockError:  # the TTL ran out during the reset: nothing left to release
            pass


@contextlib.contextmanager
def _sections_refused(backends: Backends, sale: Any, timeout: float) -> Iterator[None]:
    """While the reset waits for the sale's lock, a section that takes it sells nothing
    and lets go (``section.stock_if_still``): the reset waits for the section in
    progress and the quick refusals of those queued, not for the crowd.

    **Failure timeline** it prevents (an HTTP audit, 100 buyers without pause)::

        reset:   asks for the redlock lock, LOCK_TIMEOUT_S to get it
        buyers:  each release, another buyer's try wins it (they are 100, it is one)
        reset:   503 after 10 s, twice in a row; token and fair got in after 9 s

    The mark goes with the reset's Redis side (``SaleKeys.all``), or here."""
    keys = sale.keys
    try:
        backends.redis.set(keys.resetting, 1, px=int(timeout * 1000) + 5_000)
    except RedisError:  # the lock's wait decides alone, as before
        pass
    try:
        yield
    finally:
        with contextlib.suppress(RedisError):
            backends.redis.delete(keys.resetting)


def _redlock_majority_down(backends: Backends, sale: Any) -> str | None:
    """For a ``redlock`` sale whose lock was not acquired: why, if a majority of its
    nodes does not answer a PING (``redlock`` answers False either way: held, or not
    reachable). None when enough answer: then buyers hold the lock."""
    if sale.strategy != "redlock":
        return None
    nodes = backends.redlock
    answering = 0
    for node in nodes:
        try:
            node.ping()
            answering += 1
        except RedisError:
            pass
    if answering > len(nodes) // 2:
        return None
    return f"{len(nodes) - answering} of {len(nodes)} redlock nodes do not answer"


def _unreachable(strategy: str) -> tuple[type[BaseException], ...]:
    """What a ZooKeeper lock raises when its server cannot be reached (not: a buyer
    holds it). The locks kept in the shop's Redis need it for the reset anyway (their
    errors stay 503); ``redlock`` answers an unreachable majority with False, and a
    majority answering with an error (a wrong password, a bad database index) with
    that error: no buyer can hold it either (a sale set to it could not be reset)."""
    redlock = (ResponseError, AuthenticationError) if strategy == "redlock" else ()
    try:
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError
    except ImportError:  # kazoo is optional
        return redlock
    return (KazooException, KazooTimeoutError, *redlock)


@bp.get("/admin")
def page() -> Response:
    strategies = []
    config = get_backends().config
    for name in paths.names():
        try:
            safe = paths.path_for(name).safe
        except (ImportError, AttributeError):  # a strategy module still being written
            safe = False
        # one this shop has no server for is shown, greyed, with what it needs (picked,
        # it was a 400 the page showed only after the reset)
        missing = locks.missing_backend(name, config)
        strategies.append((name, safe, missing.split(" needs ", 1)[-1] if missing else None))
    return shop.page(render_template("admin.html", strategies=strategies,
                                     no_limit=sales.NO_LIMIT,
                                     purchase_timeout_s=shop.purchase_timeout_s(config)))
