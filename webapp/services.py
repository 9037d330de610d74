"""``checkout``: one purchase, from the request to the order row. No Flask in here.

The steps every strategy shares, in order, each cheaper than the next:

1. The sold-out flag answers 409 before anything else: after the sale ends, a
   thousand late buyers cost one GET each instead of a queue on the lock. (A request
   with an ``Idempotency-Key`` first looks for the order it may already have made.)
2. The sale comes from its Redis copy (``saleinfo.py``), not from the database. The
   script is sent the generation of the copy this process read last, and leaves the
   copy out of its reply while Redis holds that same generation.
3. ``SADD buyers user`` reserves the user's one order per sale. Fifty concurrent
   clicks by one user: one gets the reservation, the rest wait for it (``twinwait.py``):
   409 once it made an order (with the same Idempotency-Key, that order with 200), or
   their own try if it failed.
4. The sale's purchase path (``paths.py``) takes the stock: under a lock, with one
   Lua script, or with a conditional SQL UPDATE. If it fails, the reservation goes.

Steps 1-3 run as one script, ``atomic_checkout.lua``, which for an ``atomic`` sale
also does step 4's decrement: such a purchase costs one Redis round trip, then its
order row (written with concurrent ones: ``groupcommit.py``). The scripts of
concurrent purchases share that round trip too (``pipelining.py``). Round trips, not
Redis, are what a purchase waits for under gevent.

Everything the function needs comes in ``Checkout`` so the tests can hand it a
``FakeLock`` and a fake clock (cosmicpython's service layer with a fake UoW).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from . import scripts
from .batching import Pending
from .deadlines import AT_SEND, LATE, LOST_REPLY, deadline, reserve, too_late
from .keys import SaleKeys
from .logthrottle import PER_REQUEST
from .models import OrderLike
from .orders import (
    IN_DOUBT,
    KEY_OTHER_BUYERS,
    KEY_USED_ELSEWHERE,
    find_order_or_key,
    give_back,
    has_order,
)
from .pipelining import ScriptPipeline
from .problems import (
    AlreadyPurchased,
    InvalidRequest,
    OrderInDoubt,
    Replay,
    SaleMovedOn,
    SoldOut,
    already_bought,
    first_line,
    not_enough,
)
from .retrylater import RetryLater
from .saleinfo import (
    Fence,
    SaleInfo,
    cached_sale,
    forget_stale_copy,
    latest_sale,
    load_sale,
)
from .takenorders import TakenOrder
from .twinwait import TwinWait

logger = logging.getLogger(__name__)

# SaleInfo and load_sale moved to saleinfo.py; other modules still import them from here
__all__ = ["Checkout", "PurchaseRequest", "PurchaseResult", "SaleInfo", "checkout",
           "load_sale"]


@dataclass(frozen=True)
class PurchaseRequest:
    sku: str
    user_id: str
    quantity: int = 1
    idempotency_key: str | None = None
    #: this purchase's name in its scripts (``new_nonce``): what undoes them after a
    #: lost reply (``undo_lost``, ``undo_take``); one is made if none is given
    nonce: str = ""


@dataclass
class Checkout:
    """The dependencies of a purchase."""

    sessions: sessionmaker[Session]
    redis: Any
    #: (sale, user_id) -> an unacquired lockcore lock (or anything with its interface)
    lock_for: Callable[[SaleInfo, str], Any]
    lock_timeout_s: float = 5.0
    #: the whole ``LOCK_TIMEOUT_S``, which ``less_time`` leaves as it is: what a buyer
    #: who ran out of it is told it was (the rest of it, "within 0.02s", read as if
    #: the buyer had waited 0.02 s, after 10 s; a PostgreSQL audit). None: lock_timeout_s
    lock_budget_s: float | None = None
    #: bounds the buyers of one worker queueing for a lock (a BoundedSemaphore); None: no bound
    lock_slots: Any = None
    #: the same for a combined lock's buyers (``combining.py``); None: ``lock_slots``
    combined_slots: Any = None
    #: how long a purchase waits for its buyer's other purchase in flight (``twinwait.py``)
    replay_wait_s: float = 10.0
    #: sends the first script of concurrent purchases in one round trip; None: alone
    script_pipeline: ScriptPipeline | None = None
    #: raises a sale's fencing counter after Redis lost it (``saleinfo.cached_sale``)
    fence: Fence | None = None
    sleep: Callable[[float], None] = field(default=time.sleep)
    monotonic: Callable[[], float] = field(default=time.monotonic)


@dataclass(frozen=True)
class PurchaseResult:
    order: OrderLike
    created: bool


def checkout(deps: Checkout, request: PurchaseRequest) -> PurchaseResult:
    """Buy ``request.quantity`` units for ``request.user_id``, or raise a ``ShopError``."""
    UNDONE_LATER.drain()  # an outage left undos of failed purchases: try them first
    IN_DOUBT.drain()  # and orders whose write may have committed: ask the database again
    if not request.nonce:
        request = dataclasses.replace(request, nonce=new_nonce())
    try:
        fast = None
        if request.idempotency_key is None:
            fast, waited_s = _fast_checkout_after_twin(deps, request)
            deps = less_time(deps, waited_s)
    except LOST_REPLY:  # the script may have run: undo what it did, if it did
        undo_lost(deps, request, fast_script=True)
        raise
    try:
        if fast is not None and fast.written_for is not None:
            # the row is written: nothing that can fail stands before its answer
            sale = fast.written_for
        elif fast is not None and fast.same is not None:  # Redis has the sale we know
            sale = fast.same
        else:
            sale = cached_sale(deps.redis, deps.sessions, request.sku,
                               None if fast is None else fast.info, deps.fence)
        path = _path_for(sale.strategy, sale.sku)
    except BaseException:  # the script reserved (and for atomic took): undo it
        if fast is not None and fast.reserved:
            _undo_fast(deps, request, fast)
        raise
    if fast is not None and fast.taken:  # reserved and taken by the script: write the order
        buy = functools.partial(path.record_taken, deps, sale, request, fast.written)
    else:
        if fast is None or not fast.reserved:  # a replayable request, or a reloaded sale
            if request.quantity > sale.per_user_limit:
                raise over_the_limit(sale.per_user_limit)
            reserving = deps.monotonic()
            try:
                earlier = _reserve(deps, sale, request, soldout_checked=fast is not None)
            except LOST_REPLY:
                undo_lost(deps, request, fast_script=False)
                raise
            if earlier is not None:
                return PurchaseResult(earlier, created=False)
            deps = less_time(deps, deps.monotonic() - reserving)
        buy = functools.partial(path.purchase, deps, sale, request)
    try:
        order = buy()
    except Replay as replay:  # a concurrent twin won the Idempotency-Key race
        return PurchaseResult(_replay(replay.order, request), created=False)
    except (AlreadyPurchased, OrderInDoubt):  # the user's order is (or may be) written:
        raise                                   # keep them reserved (orders.IN_DOUBT)
    except SaleMovedOn:  # the database is in a newer sale than the copy the sale came from
        _unreserve(deps, sale.sku, request.user_id, request.nonce)
        forget_stale_copy(deps.redis, sale)  # if a failed reset left it: the next reloads
        raise
    except BaseException:
        _unreserve(deps, sale.sku, request.user_id, request.nonce)
        raise
    logger.info("order %s: %s x%d for %r (%s)", order.id, sale.sku, request.quantity,
                request.user_id, sale.strategy)
    return PurchaseResult(order, created=True)


def less_time(deps: Checkout, waited_s: float) -> Checkout:
    """``deps`` with ``waited_s`` taken off the lock timeout: what a purchase has left
    after waiting for its user's other purchase in flight (``twinwait.py``), or for a
    purchase slot (``lockedpath.py``): one ``LOCK_TIMEOUT_S`` for all its waits.

    **Failure timeline** it prevents (a contract audit, RedLock nodes down)::

        A:      alice buys, no key; waits for the lock (10 s: LOCK_TIMEOUT_S)
        B:      alice buys again, with a key: waits for A, her purchase in flight
        A:      503 busy after 10 s; alice is free again
        B:      reserves her, waits for the lock another 10 s: 503 after 20 s
    """
    if waited_s <= 0.001:  # the usual case: nothing waited for
        return deps
    return dataclasses.replace(deps, lock_timeout_s=max(deps.lock_timeout_s - waited_s, 0.0))


_paths: Any = None


def over_the_limit(limit: int) -> InvalidRequest:
    if limit == 1:  # "between 1 and 1" (an API audit)
        return InvalidRequest("quantity must be 1 for this sale (one unit per buyer)")
    return InvalidRequest(f"quantity must be between 1 and {limit} for this sale")


def _path_for(strategy: str, sku: str) -> Any:
    """``paths.path_for``; the module is imported on first use, not at every purchase
    (an import statement in a function costs a lookup through importlib each time),
    nor at the top (paths imports this module's dataclasses)."""
    global _paths
    if _paths is None:
        from . import paths

        _paths = paths
    return _paths.path_for(strategy, sku)


class _Fast:
    """What ``atomic_checkout.lua`` answered. A plain class with slots: made once per
    purchase, a frozen dataclass cost a microsecond more (docs/performance.md, session 9)."""

    __slots__ = ("flat", "same", "reserved", "taken", "written", "written_for")

    def __init__(self, flat: list[bytes], reserved: bool, taken: bool,
                 same: SaleInfo | None = None, written: Pending[Any] | None = None,
                 written_for: SaleInfo | None = None) -> None:
        #: the sale's cached row, as HGETALL flattens it (empty: Redis lost it, or
        #: ``same``)
        self.flat = flat
        #: the sale the caller sent the generation of, when Redis still has that
        #: generation (the script then leaves the row out)
        self.same = same
        #: the buyer is reserved (any strategy)
        self.reserved = reserved
        #: an ``atomic`` sale: the buyer is reserved and the units are taken
        self.taken = taken
        #: the order row's outcome, if the script's batch wrote it too
        #: (``takenorders.py``), and the sale it was written for
        self.written = written
        self.written_for = written_for

    @property
    def info(self) -> dict[bytes, bytes]:
        """The sale's cached row as a hash (made only for a purchase that needs it)."""
        return dict(zip(self.flat[::2], self.flat[1::2], strict=True))


#: ``atomic_checkout.lua``'s keys by sku (the same five for every buyer of a sale)
_SCRIPT_KEYS: dict[str, list[str]] = {}
#: skus kept; past it the memo starts again (a plausible sku need not exist)
_SCRIPT_KEYS_MAX = 1024


def _script_keys(sku: str) -> list[str]:
    found = _SCRIPT_KEYS.get(sku)
    if found is None:
        keys = SaleKeys(sku)
        found = [keys.soldout, keys.buyers, keys.info, keys.stock, keys.reservations]
        if len(_SCRIPT_KEYS) >= _SCRIPT_KEYS_MAX:
            _SCRIPT_KEYS.clear()
        _SCRIPT_KEYS[sku] = found
    return found


def _fast_checkout(deps: Checkout, request: PurchaseRequest) -> _Fast:
    """One round trip (``atomic_checkout.lua``): after the sale, 409 ``sold_out`` (a
    reserved buyer first: ``_BuyerReserved``); the sale's cached row; the buyer's
    reservation; for an ``atomic`` sale the whole purchase but its order row."""
    script_keys = _script_keys(request.sku)  # shared: nobody may change it
    known = latest_sale(request.sku)
    script_args: list[Any] = [
        request.user_id, request.quantity,
        # the script leaves out a row we have; and changes nothing if run too late
        known.generation if known is not None and known.generation is not None else "",
        deadline(deps.redis) if deps.script_pipeline is None else AT_SEND, request.nonce]
    then = None
    if deps.script_pipeline is not None:
        then = TakenOrder(deps.sessions, request.sku, request.user_id, request.quantity, known)
        reply = deps.script_pipeline.run("atomic_checkout", script_keys, script_args, then)
    else:
        reply = scripts.script(deps.redis, "atomic_checkout")(keys=script_keys, args=script_args)
    code, units, *rest = reply
    fast = _Fast(rest[0] if rest else [], reserved=code in (1, 2), taken=code == 1,
                 same=None if rest or code == -4 else known)
    if code == LATE:  # Redis ran it after we would have given up: nothing changed
        raise too_late()
    if code == -3:
        raise _BuyerReserved(request.sku)
    if code == -1:  # "sold out", or fewer left than asked for: how many, as a lock path says
        raise not_enough(request.sku, int(units))
    if code == -2:
        limit = (fast.same.per_user_limit if fast.same is not None
                 else int(fast.info[b"per_user_limit"]))
        raise over_the_limit(limit)
    if then is not None and then.written is not None:
        fast.written, fast.written_for = then.written, then.sale
    return fast


class _BuyerReserved(Exception):
    """``atomic_checkout.lua`` found the buyer reserved: by an order, or by a purchase of
    theirs still in flight (``_fast_checkout_after_twin`` tells which)."""


def _fast_checkout_after_twin(deps: Checkout, request: PurchaseRequest
                              ) -> tuple[_Fast, float]:
    """``_fast_checkout``; if the buyer is reserved already, 409 ``already_purchased`` when
    they have an order, else wait for their purchase in flight (``twinwait.py``) and try
    again: it may fail and leave the unit to this one. Returns how long it waited (the
    lock's timeout is shortened by it).

    **Failure timeline** of answering 409 at once (a contract audit)::

        alice:  buys 3 units of the 2 left; reserved; waits for the lock
        alice:  buys 1 unit beside it: reserved already: 409 already_purchased
        alice:  the 3-unit purchase fails: 409 sold_out. No order, 2 units unsold, and
                the answer that told her to stop was wrong (50 purchases of one user
                on a sale of 0 units: up to 49 "already_purchased", no order)
    """
    wait = None
    while True:
        try:
            return _fast_checkout(deps, request), 0.0 if wait is None else wait.waited_s
        except _BuyerReserved:
            if has_order(deps.sessions, request.sku, request.user_id):
                raise already_bought(request.user_id, request.sku) from None
            wait = wait or TwinWait(deps, request.sku, request.user_id, keyed=False)
            wait.look_again()


def _replay(earlier: OrderLike, request: PurchaseRequest) -> OrderLike:
    if earlier.quantity != request.quantity:
        raise InvalidRequest("this Idempotency-Key was used with another quantity")
    return earlier


def claim_key(redis: Any, keys: SaleKeys, request: PurchaseRequest) -> None:
    """Bind ``request.idempotency_key`` to this user in this sale before any stock is taken.

    Without it a key sent by many users at once (a client bug, or a replayed capture)
    let each of them take units that only the order write's UNIQUE key gave back: honest
    buyers meanwhile heard ``sold_out`` with stock left. Another user's key is 400.
    (Another sku's committed order with the key is found in the database first.)
    """
    if redis.hsetnx(keys.key_owners, request.idempotency_key, request.user_id):
        return
    owner = redis.hget(keys.key_owners, request.idempotency_key)
    if owner is not None and owner.decode("utf-8", "surrogateescape") != request.user_id:
        raise InvalidRequest(KEY_OTHER_BUYERS)


def _reserve(deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
             soldout_checked: bool = False) -> OrderLike | None:
    """Reserve the user's single order; return an earlier order for a replayed key.

    :param soldout_checked: ``_fast_checkout`` just read the flag: skip the first GET.

    The sold-out flag does not answer a user whose own purchase is in flight: that one
    may have taken the last unit. **Failure timeline** the look at the buyers prevents::

        ann:   key K; takes the last unit, works, writes her order
        bob:   refused at stock 0: sets the sold-out flag
        ann:   her client retries with K: no order yet, the flag: 409 sold_out
        ann:   the first request answers 201: she holds an order she was told she
               did not get (the contract: the same key again returns that order)
        fixed: reserved, she waits for her purchase in flight (``TwinWait``) and hears
               its order, with 200
    """
    keys = sale.keys
    claimed, wait = False, None
    while True:
        if request.idempotency_key is not None:
            earlier, keyed = find_order_or_key(deps.sessions, sale.id, request.user_id,
                                               request.idempotency_key)
            if keyed is not None and keyed is not earlier:
                raise InvalidRequest(KEY_USED_ELSEWHERE)
            if earlier is not None:
                if earlier.idempotency_key == request.idempotency_key:
                    return _replay(earlier, request)
                raise already_bought(request.user_id, sale.sku)
        if not soldout_checked and _sold_out_to(deps.redis, keys, request.user_id):
            raise SoldOut(f"{sale.sku} is sold out")
        soldout_checked = False
        if request.idempotency_key is not None and not claimed:
            # before any stock is taken, after the sold-out check (the claims of a
            # sold-out sale's late buyers would only pile up until its reset)
            claim_key(deps.redis, keys, request)
            claimed = True
        if reserve(deps.redis, keys.buyers, request.user_id, keys.reservations,
                   request.nonce):
            return None
        if request.idempotency_key is None and has_order(deps.sessions, sale.sku,
                                                         request.user_id):
            raise already_bought(request.user_id, sale.sku)
        # the same user has a purchase in flight, maybe with this very key: wait for it
        # (it may fail, and leave the unit to this one)
        wait = wait or TwinWait(deps, sale.sku, request.user_id,
                                keyed=request.idempotency_key is not None)
        wait.look_again()


def _sold_out_to(redis: Any, keys: SaleKeys, user_id: str) -> bool:
    """Whether the sold-out flag is up and ``user_id`` has no purchase reserved: the
    flag and the buyers asked in one round trip (asked one after the other, a keyed
    request of a sold-out sale paid two)."""
    pipe = redis.pipeline(transaction=False)
    pipe.get(keys.soldout)
    pipe.sismember(keys.buyers, user_id)
    flagged, reserved = pipe.execute()
    return bool(flagged) and not reserved


def _undo_fast(deps: Checkout, request: PurchaseRequest, fast: _Fast) -> None:
    """The script reserved the buyer (and for ``atomic`` took the units), and the purchase
    failed before its order write. The units go back only to the sale generation the
    script took them from: a reset in between made them the old sale's."""
    if fast.taken:
        if fast.same is not None:
            taken_from = fast.same.generation
        else:
            known = fast.info.get(b"generation")
            taken_from = int(known) if known else None
        give_back(deps.redis, request.sku, request.quantity, taken_from)
    _unreserve(deps, request.sku, request.user_id, request.nonce)


@dataclass(frozen=True)
class _Undropped:
    """A failed purchase's reservation that Redis was down to drop."""

    redis: Any
    sessions: sessionmaker[Session]
    sku: str
    user_id: str

    def retry(self) -> bool:
        """Drop it, unless the user has an order by now; False if that failed again."""
        try:
            if not has_order(self.sessions, self.sku, self.user_id):  # else: the order's
                self.redis.srem(SaleKeys(self.sku).buyers, self.user_id)
        except Exception:  # noqa: BLE001 - still down: next time
            return False
        logger.warning("dropped the reservation of %r (%s) once Redis answered",
                       self.user_id, self.sku)
        return True


def _unreserve(deps: Checkout, sku: str, user_id: str, nonce: str = "") -> None:
    """Drop the reservation of a purchase that failed (it answers 503 or an error: "nothing
    was bought, try again").

    **Failure timeline** the retry prevents::

        buyer: reserved (SADD buyers); Redis goes down; the purchase fails: 503
        buyer: the SREM fails too: the reservation stays, with no order behind it
        buyer: retries once Redis is back: 409 already_purchased, for good
        fixed: the SREM is kept and retried by this worker's purchases, at most once a
               second (``UNDONE_LATER``), unless the user has an order by then (the
               SREM ran after all, or their retry bought elsewhere): that reservation
               is the order's. One reserved again and still in flight may lose it; the
               database's UNIQUE row still stops a second order.
    """
    keys = SaleKeys(sku)
    try:
        deps.redis.srem(keys.buyers, user_id)
    except Exception as exc:  # Redis down: retried by a later purchase of this process
        # once a minute: while Redis is down every failed purchase comes here (an
        # operator hears of those still undone at the worker's exit: ``last_chance``)
        PER_REQUEST.log(logger, logging.WARNING, ("unreserve", type(exc).__name__),
                        "could not drop the reservation of %r (%s) yet; will retry",
                        user_id, sku, exc_info=True)
        UNDONE_LATER.add(_Undropped(deps.redis, deps.sessions, sku, user_id))
        return
    if nonce:  # and its nonce, best-effort: one left behind names a purchase that is
        # over, and misleads no undo (``drop_nonce.lua``)
        with contextlib.suppress(Exception):
            scripts.script(deps.redis, "drop_nonce")(keys=[keys.reservations],
                                                     args=[user_id, nonce])


_nonces = itertools.count()
#: this process's part of every nonce (a pid is reused only by a later process)
_NONCE_PREFIX = f"{os.getpid():x}.{os.urandom(4).hex()}."


def new_nonce() -> str:
    """A name for one purchase, unique across processes and hosts: what its first script
    keeps for its buyer (``undo_lost.lua``). A counter: cheaper than 16 random bytes."""
    return f"{_NONCE_PREFIX}{next(_nonces)}"


def _now_or_later(entry: Any) -> None:
    """An undo (``_LostTake``, ``_LostReply``) tried now; if Redis does not answer, by
    this worker again later (``UNDONE_LATER``)."""
    if not entry.retry():
        UNDONE_LATER.add(entry)


def undo_take(redis: Any, sku: str, request: PurchaseRequest, stock_key: str,
              taken_key: str) -> None:
    """A take script (``atomic_purchase.lua``, ``sharded_take.lua``) lost its reply with
    its connection: give its units back if it ran (``undo_take.lua``: by the nonce it
    kept). The caller's 503 drops the reservation."""
    _now_or_later(_LostTake(redis, sku, request.user_id, request.quantity, request.nonce,
                            stock_key, taken_key))


@dataclass(frozen=True)
class _LostTake:
    """A take whose reply was lost; ``retry`` is False if Redis still does not answer."""

    redis: Any
    sku: str
    user_id: str
    quantity: int
    nonce: str
    stock_key: str
    taken_key: str

    def retry(self) -> bool:
        try:
            undone = scripts.script(self.redis, "undo_take")(
                keys=[self.stock_key, self.taken_key],
                args=[self.user_id, self.nonce, self.quantity])
            if undone:  # the flag may be set while they were out; or keep buyers from
                # the purchase that finds the stock key lost and reloads the sale
                self.redis.delete(SaleKeys(self.sku).soldout)
                logger.warning("a take of %d unit(s) of %s for %r lost its reply: %s",
                               self.quantity, self.sku, self.user_id,
                               "given back" if undone > 0 else
                               "its stock key is gone, the sale's reload counts them")
        except Exception as exc:  # noqa: BLE001 - still unreachable: tried again later
            PER_REQUEST.log(logger, logging.WARNING, ("undo_take", type(exc).__name__),
                            "could not undo the lost take of %r (%s) yet; will retry",
                            self.user_id, self.sku, exc_info=True)
            return False
        return True


def undo_lost(deps: Checkout, request: PurchaseRequest, *, fast_script: bool) -> None:
    """The purchase's first script (``atomic_checkout.lua`` if ``fast_script``, else
    ``reserve.lua``) lost its reply with its connection: undo what it did, if it ran.

    **Failure timeline** it prevents (a helper's proxy; ``CLIENT KILL`` storms)::

        buyer:  the script reserves alice and, in an atomic sale, takes her unit
        link:   drops before the reply: ConnectionError, 503 "nothing was bought"
        alice:  retries: 409 already_purchased, with no order, until the next reset;
                and the atomic sale is a unit short in Redis for good

    ``undo_lost.lua`` drops the reservation only if it holds this purchase's nonce
    (another purchase of hers keeps its own), and gives an atomic sale's units back
    with it."""
    _now_or_later(_LostReply(deps.redis, request.sku, request.user_id, request.quantity,
                             request.nonce, fast_script))


@dataclass(frozen=True)
class _LostReply:
    """A first script whose reply was lost; ``retry`` (``undo_lost.lua``) is False if
    Redis still does not answer (nothing known to be undone)."""

    redis: Any
    sku: str
    user_id: str
    quantity: int
    nonce: str
    fast_script: bool

    def retry(self) -> bool:
        keys = SaleKeys(self.sku)
        try:
            undone = scripts.script(self.redis, "undo_lost")(
                keys=[keys.buyers, keys.reservations, keys.info, keys.stock, keys.soldout],
                args=[self.user_id, self.nonce, self.quantity,
                      "1" if self.fast_script else "0"])
        except Exception as exc:  # noqa: BLE001 - still unreachable: tried again later
            # one line: while Redis is down every purchase queues one of these, and each
            # try logged a three-part traceback (a contract audit: 40 lines a buyer)
            # and at most once a minute per kind: a worker retries each undo once a
            # second while Redis is down (an operator audit: 30 lines in 30 s for one)
            PER_REQUEST.log(logger, logging.WARNING, ("undo-lost", type(exc).__name__),
                            "could not undo the lost purchase of %r (%s) yet; will retry: "
                            "%s: %s", self.user_id, self.sku, type(exc).__name__,
                            first_line(exc))
            return False
        if undone:
            logger.warning("a purchase of %r (%s) lost its reply: its reservation%s undone",
                           self.user_id, self.sku, " and units" if undone == 2 else "")
        return True


#: the reservations ``_unreserve`` could not drop and the lost replies ``undo_lost`` and
#: ``undo_take`` could not undo, each retried by its own ``retry`` (``retrylater.py``)
UNDONE_LATER: RetryLater[Any] = RetryLater(lambda entry: bool(entry.retry()))
