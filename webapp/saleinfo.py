"""``SaleInfo``: what a purchase needs to know about its sale, and where it comes from.

The row lives in the database; every reset also copies it into the Redis hash
``sale:{sku}:info``, so the purchase path reads it with one HGETALL. Under a spike the
database then does only what it alone can do, writing orders: a lock holder never
queues for a pooled connection behind a thousand sale lookups. A missing copy means
Redis lost its data; the stock is then restored from the database.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from .keys import SaleKeys
from .models import Order, Sale, aware, shown_sale_start, utcnow, whole_ms
from .problems import Busy, UnknownSku

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaleInfo:
    """A sale as the purchase paths see it (a plain copy, safe across sessions)."""

    id: int
    sku: str
    strategy: str
    work_ms: int
    per_user_limit: int
    initial_stock: int
    #: which reset of the sale this is (``generation(started_at)``); None: not known,
    #: and the order write does not check it
    generation: int | None = None

    @functools.cached_property
    def keys(self) -> SaleKeys:
        """Made once per copy: a purchase asks for several (the copies are shared:
        ``cached_sale``)."""
        return SaleKeys(self.sku)


def load_sale(sessions: sessionmaker[Session], sku: str) -> SaleInfo:
    with sessions() as session:
        sale = session.scalars(select(Sale).where(Sale.sku == sku)).first()
        if sale is None:
            raise UnknownSku(f"no product with sku {sku!r}")
        return SaleInfo(sale.id, sale.sku, sale.strategy, sale.work_ms, sale.per_user_limit,
                        sale.initial_stock, generation(sale.started_at))


#: raises the fencing counter of a sale's lock past the highest token its orders carry,
#: and answers the hold-off the reload starts (``locks.raise_fence``)
Fence = Callable[[SaleInfo, int], "int | None"]


def cached_sale(redis: Any, sessions: sessionmaker[Session], sku: str,
                cached: dict[bytes, bytes] | None = None, fence: Fence | None = None,
                *, at_start: bool = False, wait_for_reset: bool = True) -> SaleInfo:
    """The sale from its Redis hash (written by every reset), else from the database.

    :param cached: the hash if the caller already fetched it in a pipeline of its own.
    :param fence: called when Redis lost the sale (see ``_restore_stock``); None: the
        lock's fencing counter is left as Redis has it
    :param at_start: a shop starting on a kept database loads it into its Redis
        (``demo.seed``): news, logged as such, not "Redis lost the sale" (every
        ``seckill serve`` after the first in a folder warned so; a CLI audit)
    :param wait_for_reset: with no copy while a reset is in flight
        (``SaleKeys.reset_in_flight``), wait for the reset's copy rather than reload.
        False for a reset itself: a mark left by one that failed must not hold it up.

    **Failure timeline** the wait prevents (an HTTP audit: 12 resets amid 60 buyers,
    ``atomic``, "Redis lost the sale" in the log in 4 runs of 8, Redis never down)::

        reset:  commits the database: generation g1
        buyer:  took a unit of g0's copy; its row is refused: drops the g0 copy
        buyer:  finds no copy: "Redis lost the sale", reloads it as g1' (a lock
                strategy holds the sale off one lock TTL, ~10 s of 503s)
        reset:  its Redis side finds g1' newer and stands down
        fixed:  the second buyer sees the reset's mark and waits for its copy (g1)

    Not by leaving the copy (a review): a mark that outlived its reset (its DELETE
    failed with Redis, the worker killed) kept a stale copy whose buyers took its units
    and were refused, until it was sold out and answered 409 for good. A mark left now
    costs buyers who find no copy a 503 after ``COPY_WAIT_S`` for its TTL, then the next
    one reloads. The wait is outside the process's one-reload-at-a-time lock, and inside
    it a mark is a 503 at once: waited in it, a left mark queued every buyer of the
    process (and a reset's reload) behind one another's waits for its whole TTL (a
    second review: 8 buyers answered at 3, 6 and 8 s, the reset after 7.5 s).
    """
    if cached is None:
        cached = redis.hgetall(SaleKeys(sku).info)
    if cached:  # every purchase: nothing more made before this (~1 us a SaleKeys)
        return parsed_sale(sku, cached)
    keys = SaleKeys(sku)
    if wait_for_reset and (cached := _resets_copy(redis, keys)):
        return parsed_sale(sku, cached)
    with _restoring():  # the buyers behind the first find the copy back
        for _ in range(RELOAD_TRIES):
            cached = redis.hgetall(keys.info)
            if cached:
                return parsed_sale(sku, cached)
            sale = load_sale(sessions, sku)
            # after the read: a reset marks itself before it commits, so a read of its
            # sale sees its mark (asked before the read, a reset between the two was
            # reloaded over: "Redis lost the sale", a hold-off; a third review)
            if wait_for_reset and redis.exists(keys.reset_in_flight):
                raise _being_reset(sku)
            restored = _restore_stock(redis, sessions, sale, fence, at_start)
            if restored is not None:
                return restored
            # a reset, or another process's reload, wrote the sale or is writing it: that
            # one stands. Its copy follows its database write; without it, a buyer (or an
            # admin reset) heard 503 when the other worker was only a moment ahead
            cached = _copy_within(redis, sku, COPY_WAIT_S)
            if cached:
                return parsed_sale(sku, cached)
    raise NotReloaded(f"the sale of {sku} is being reset or reloaded; try again",
                      retry_after_s=1)


class NotReloaded(Busy):
    """``cached_sale`` found no copy and could not reload one: another reload or reset
    stands in Redis (a moment ahead), or keys of a generation the database never had
    (a database restored from a backup older than Redis's keys, a shop whose clock runs
    ahead) refuse every reload. A reset goes on over it, deleting the sale's keys
    (``admin._wait_out_holders_redis_forgot``)."""


def _resets_copy(redis: Any, keys: SaleKeys) -> dict[bytes, bytes]:
    """The copy a reset in flight writes, once it is in Redis, waited for up to
    ``COPY_WAIT_S``; empty if no reset is in flight (the caller reloads the sale), a
    503 if it stays in flight that long."""
    deadline, pause_s = time.monotonic() + COPY_WAIT_S, 0.02
    while True:
        pipe = redis.pipeline(transaction=False)
        pipe.hgetall(keys.info)
        pipe.exists(keys.reset_in_flight)
        cached, in_flight = pipe.execute()
        if cached or not in_flight:
            return cached  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            raise _being_reset(keys.sku)
        # gevent's, under gunicorn; longer and longer: every buyer who finds no copy
        # polls on its own (a third review: 50 round trips a second each, at 20 ms)
        time.sleep(pause_s)
        pause_s = min(2 * pause_s, 0.25)


def _being_reset(sku: str) -> Busy:
    return Busy(f"the sale of {sku} is being reset; try again", retry_after_s=1)


#: reloads a buyer tries before 503 (each after another process's copy did not come)
RELOAD_TRIES = 3
#: how long a reload that lost to another process's waits for that one's copy
COPY_WAIT_S = 1.0


def _copy_within(redis: Any, sku: str, seconds: float) -> dict[bytes, bytes]:
    """The sale's hash copy once it is in Redis, within ``seconds``; else empty."""
    deadline = time.monotonic() + seconds
    while not (cached := redis.hgetall(SaleKeys(sku).info)) and time.monotonic() < deadline:
        time.sleep(0.02)  # gevent's, under gunicorn
    return cached


@functools.cache  # made at first use: in a gevent worker, after the patching
def _restoring() -> threading.Lock:
    """One reload at a time in this process. A crowd of buyers after Redis lost its
    data queried the database once each; the fence's MAX over a sale's orders costs
    ~34 ms at 270,000 of them on SQLite (docs/performance.md, session 21)."""
    return threading.Lock()


#: added to the highest token the sale's orders carry, or to the fence the last reload
#: raised (``sales.fence_floor``) if higher, when its lock's counter is raised after
#: Redis lost it: tokens handed out that no order shows yet. The holder whose rows were
#: still being written when Redis went writes them later, with its token, and holders
#: that sold nothing (a refusal, a hold-off's 503) leave none. Tokens jump by this much
#: at each loss: a gap is harmless, a token handed out twice is not. A section whose
#: token runs more than half of it past the recorded fence records its own first
#: (``note_token``; a 10 s hold-off's retries took 800-2,500 tokens, and one buyer's
#: refusals 300-400 a second: a fault audit), so every token handed out stays below
#: the next reload's fence.
FENCE_SLACK = 100_000


def note_token(sessions: sessionmaker[Session], redis: Any, sale: SaleInfo,
               token: int) -> None:
    """Record ``token`` as the sale's fence floor (``sales.fence_floor``), and mirror it
    in Redis (``fence_mark``). A section calls it when its token runs more than half
    the slack past the floor recorded: tokens that no order shows (refusals, 503s) are
    then never more than half the slack above a recorded floor, so the next reload's
    fence, the floor plus the whole slack, is above every token handed out. Without it
    one buyer asking for 2 when 1 was left used up the 100,000 in 4-5 minutes, and the
    tokens went backwards again after a loss (a fault audit)."""
    floor = _floor_past(sessions, sale, token, 0)
    if floor is not None:
        redis.set(sale.keys.fence_mark, floor)


def raise_fence_floor(sessions: sessionmaker[Session], sale: SaleInfo, issued: int) -> int:
    """The fence for a reload of ``sale``: past the highest token its orders carry
    (``issued``) and past the fence the last reload raised, by ``FENCE_SLACK``; kept in
    the sale row for the next reload. Without it, tokens handed out after one reload
    with no order to show them were forgotten at the next loss, which computed the same
    fence again: later orders carried tokens below ones handed out (a fault audit:
    2797, then 2398)."""
    floor = _floor_past(sessions, sale, issued, FENCE_SLACK)
    if floor is None:
        raise UnknownSku(f"no product with sku {sale.sku!r}")  # deleted since
    return floor


def _floor_past(sessions: sessionmaker[Session], sale: SaleInfo, token: int,
                slack: int) -> int | None:
    """``sales.fence_floor`` set to ``max(fence_floor, token) + slack`` in one UPDATE;
    the new floor, or None if the sale is gone."""
    with sessions.begin() as session:
        floor = session.execute(
            update(Sale).where(Sale.id == sale.id)
            .values(fence_floor=case((Sale.fence_floor > token, Sale.fence_floor),
                                     else_=token) + slack)
            .returning(Sale.fence_floor)).scalar_one_or_none()
    return None if floor is None else int(floor)


#: ``SaleInfo`` by the hash it was read from: every purchase of a sale reads the same
#: bytes until its next reset, and decoding them cost ~6 us a purchase
_PARSED: dict[tuple[Any, ...], SaleInfo] = {}
#: distinct hashes kept; past it the memo starts again (resets make new ones)
_PARSED_MAX = 1024
#: the sale of each sku this process parsed last: a purchase sends its generation to
#: ``atomic_checkout.lua``, which then leaves the hash out of its reply when it matches
_LATEST: dict[str, SaleInfo] = {}


def latest_sale(sku: str) -> SaleInfo | None:
    """The sale of ``sku`` as this process last read it from its Redis hash, if ever.
    Maybe stale: a caller checks its ``generation`` against Redis before relying on it."""
    return _LATEST.get(sku)


def forget_stale_copy(redis: Any, sale: SaleInfo) -> None:
    """The database refused ``sale``'s order row: it is in a newer sale than the Redis
    copy ``sale`` was read from (``SaleMovedOn``). A reset in flight rewrites the copy
    itself; one whose Redis side failed after its database side committed (or a Redis
    back from an old snapshot) left the old sale in Redis for good: every purchase would
    take a unit of the old stock and hear 503, and a sold-out old sale would answer 409
    with the new one's units in the database. Drop the copy if it is still the stale
    one: the next buyer loads the sale from the database (``restore_sale.lua`` replaces
    the old generation's stock with it), or, while a reset is in flight, waits for the
    reset's copy (``cached_sale``)."""
    if sale.generation is None:
        return
    from . import scripts
    try:  # compare-and-delete, one step: a reset's new copy between them went too
        scripts.script(redis, "forget_stale_copy")(keys=[sale.keys.info],
                                                   args=[sale.generation])
    except Exception as exc:  # noqa: BLE001 - the 503 stands; the next refused row tries again
        logger.warning("%s: stale sale copy not dropped: %r", sale.sku, exc)


def stock_key_lost(redis: Any, sale: SaleInfo) -> Busy:
    """The 503 for a sale whose hash copy is in Redis and its stock key is not: Redis
    lost the key alone (an evicting Redis: ``served.evicting_redis``; a ``DEL``). Its
    copy goes too (if still ``sale``'s generation), so the next buyer reloads the whole
    sale from the database as after a restart (``cached_sale``).

    **Failure timeline** (a Redis audit, ``allkeys-random``)::

        redis:  evicts sale:{sku-1}:stock; sale:{sku-1}:info stays
        buyers: the section reads no stock: 503 "the next buyer reloads it", but the
                reload runs only when the copy is missing: 503 for good, 70 units left
        fixed:  the copy is dropped with the 503; the next buyer reloads the sale
    """
    forget_stale_copy(redis, sale)
    return Busy(f"Redis lost the stock of {sale.sku}; the next buyer reloads the sale from "
                "the database: try again", retry_after_s=1)


def parsed_sale(sku: str, cached: dict[bytes, bytes]) -> SaleInfo:
    """The sale of ``sku`` from its (non-empty) Redis hash; no I/O."""
    return parsed_sale_reply(sku, [part for item in cached.items() for part in item])


def parsed_sale_reply(sku: str, flat: list[bytes]) -> SaleInfo:
    """``parsed_sale`` for the hash as HGETALL answers it, ``[field, value, ...]``: a
    script's reply, read without making a dict of it first."""
    key = (sku, *flat)
    sale = _PARSED.get(key)
    if sale is None:
        fields = {k.decode(): v.decode() for k, v in zip(flat[::2], flat[1::2], strict=True)}
        known = fields.get("generation")
        sale = SaleInfo(int(fields["id"]), sku, fields["strategy"], int(fields["work_ms"]),
                        int(fields["per_user_limit"]), int(fields["initial_stock"]),
                        int(known) if known else None)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = sale
        if len(_LATEST) >= _PARSED_MAX and sku not in _LATEST:
            _LATEST.clear()
        _LATEST[sku] = sale
    return sale


def _restore_stock(redis: Any, sessions: sessionmaker[Session], sale: SaleInfo,
                   fence: Fence | None = None, at_start: bool = False) -> SaleInfo | None:
    """No copy in Redis: it lost its data (a restart without persistence) or was never
    loaded. The database's ``remaining`` is the truth then. What is read here goes back
    in one script (``restore_sale.lua``), and only while the copy is still missing: of
    many buyers arriving at once, only the first restores it, before anyone buys; and a
    reset that wrote its new sale after this read stands (the old copy written over it
    sold the new sale through the old strategy's lock, and oversold). None: it did.
    Else the sale as restored.

    The lock's fencing counter went with the data, and would start again at 1, below
    the tokens the sale's orders already carry. So ``fence`` raises it past the highest
    of them (plus ``FENCE_SLACK``) first: every process that finds the copy missing does
    (it never lowers the counter), and before the stock is back, so no one buys on the
    forgotten counter. The hold-off it answers (``section.hold_off``) is started by the
    script, with the stock: a reload that loses to a reset holds off nothing.

    A path that takes units with no lock to hold the reload off (``atomic``) gets a new
    generation instead (``new_generation``): the purchases whose units went with the
    lost data write no row.
    """
    from .paths import path_for  # paths imports services, which imports this module

    if path_for(sale.strategy, sale.sku).new_generation_on_reload and sale.generation is not None:
        started = new_generation(sessions, sale, logged=not at_start)
        if started is None:
            return None  # a reset or another process's reload moved the sale on first
        return _write_back(redis, sessions, *started, at_start=at_start)
    return _write_back(redis, sessions, sale, None, fence, at_start)


def _write_back(redis: Any, sessions: sessionmaker[Session], sale: SaleInfo,
                remaining: int | None, fence: Fence | None = None,
                at_start: bool = False) -> SaleInfo | None:
    """``_restore_stock``'s writes: ``sale`` back into Redis with ``remaining`` units
    (None: as the database counts them now). None if a reset or another reload's copy
    stands."""
    from . import scripts
    from .paths import path_for

    path = path_for(sale.strategy, sale.sku)
    staged = f"{sale.keys.buyers}:restoring:{uuid.uuid4().hex}"  # the same slot
    with sessions() as session:
        read, issued = session.execute(
            select(Sale.remaining,
                   select(func.max(Order.fencing_token))
                   .where(Order.sale_id == sale.id, Order.strategy == sale.strategy)
                   .scalar_subquery())
            .where(Sale.id == sale.id)).one_or_none() or (None, None)
        if read is None:
            raise UnknownSku(f"no product with sku {sale.sku!r}")  # deleted since
        # the one-order-per-user fast path went too: once sold out, only this set tells
        # an earlier buyer (409 already_purchased) from a new one (409 sold_out)
        buyers = session.scalars(select(Order.user_id).where(Order.sale_id == sale.id))
        for chunk in iter(functools.partial(buyers.fetchmany, 10_000), []):
            pipe = redis.pipeline(transaction=False)
            pipe.sadd(staged, *chunk)
            pipe.pexpire(staged, 600_000)  # a reload that dies here leaves no key for good
            pipe.execute()
    if remaining is None:
        remaining = read
    hold_ms, floor = None, None

    def raise_fence_to(floor: int) -> int | None:
        assert fence is not None
        hold = fence(sale, floor)
        redis.set(sale.keys.fence_mark, floor)  # sections compare their tokens with it
        return hold

    if fence is not None:
        floor = raise_fence_floor(sessions, sale, int(issued or 0))
        try:
            hold_ms = raise_fence_to(floor)
        except Exception:  # the lock's servers did not take it: no copy, no buyers staged
            redis.delete(staged)
            raise
    stock = max(remaining, 0)
    elsewhere = path.stock_elsewhere
    # NX, on their own slots: before the script, which writes the rest only if it can
    shards_restored = elsewhere and path.restore_stock(redis, sale, stock)
    keys = sale.keys
    written = scripts.script(redis, "restore_sale")(
        keys=[keys.info, keys.stock_gen, keys.stock, keys.soldout, keys.buyers, staged,
              keys.reloaded, keys.holdoff, keys.key_owners, keys.reservations, keys.taken],
        args=["" if sale.generation is None else sale.generation, remaining,
              "0" if elsewhere else "1", "" if hold_ms is None else hold_ms,
              *(part for item in sale_fields(sale).items() for part in item)])
    if shards_restored or written == 2:
        if at_start:  # a shop's start loading its own new Redis: news, not a loss
            logger.info("loaded the sale of %s from the database into Redis: %d left",
                        sale.sku, remaining)
        else:
            logger.warning("restored the Redis stock of %s from the database: %d",
                           sale.sku, remaining)
    if written and fence is not None and floor is not None:
        # Redis may have restarted again between the fence and the script, which then
        # wrote the copy into a Redis whose counter starts at 1 (a fault audit: tokens
        # 16, then 12). Raised again, now that the copy stands: idempotent, and a later
        # loss takes the copy with it, so the next buyer reloads
        raise_fence_to(floor)
    return sale if written else None


def new_generation(sessions: sessionmaker[Session], sale: SaleInfo,
                   why: str = "Redis lost the sale; reloaded", logged: bool = True
                   ) -> tuple[SaleInfo, int] | None:
    """Start a new generation of ``sale`` for its reload (or a lock section's count of
    its stock: ``section._reread_stock``): the sale with it, and the units left as the
    database counts them when it started; None if the sale is not at
    ``sale.generation`` any more (a reset, or another process's reload, came first).

    **Failure timeline** it prevents (an ``atomic`` sale with simulated work; a fault
    audit: 4-14 oversold with 300-3000 ms of work)::

        A:      the script takes 1 unit (Redis: 9 left, the database: 10), works
        redis:  restarts empty: the stock and the sale's copy are gone
        B:      reloads the sale: the database says 10 left; Redis 10
        A:      writes its order: the database 9, Redis 10; the unit is sold twice
        fixed:  B's reload starts generation g1 in the same UPDATE that reads the 10;
                A's row is written only WHERE the generation is g0 (``record_order``):
                nothing is written, A hears 503 busy, and its unit is B's 10th

    The UPDATE orders the two in the database: a row committed first is counted in the
    units read, a row after it is refused. No purchase of ``g1`` can come before the
    reload's copy is in Redis: it gets its generation from there.
    """
    assert sale.generation is not None  # ``_restore_stock`` starts none without one
    old = started_at(sale.generation)
    new = reloaded_started_at(old)
    with sessions.begin() as session:
        left = session.execute(
            update(Sale).where(Sale.id == sale.id, Sale.started_at == old)
            .values(started_at=new).returning(Sale.remaining)).scalar_one_or_none()
    if left is None:
        return None
    if logged:  # not a shop's start loading a kept database (``cached_sale``)
        logger.warning("%s: %s as a new generation, so a purchase whose units went with "
                       "Redis's lost data writes no order", sale.sku, why)
    return dataclasses.replace(sale, generation=generation(new)), int(left)


def next_started_at(current: datetime | None) -> datetime:
    """The ``started_at`` of a reset's new sale: now, to the millisecond, and always in a
    later millisecond than ``current`` (a clock that stepped back, two resets in one
    millisecond, a reload's generation: ``reloaded_started_at``)."""
    now = whole_ms(utcnow())
    if current is None:
        return now
    return max(now, whole_ms(aware(current)) + _MILLISECOND)


def reloaded_started_at(current: datetime) -> datetime:
    """The ``started_at`` of an ``atomic`` sale's generation after a reload: one
    microsecond on. A reset starts its sale at a whole millisecond, so the millisecond
    (``models.shown_sale_start``) still names the reset: the storefront tells a new sale
    by it, and a reload is not one (it cleared the buyers' "Confirmed!" messages: a UI audit)."""
    return aware(current) + _MICROSECOND


def counted_since(looked_up: int, current: int) -> bool:
    """Whether generation ``current`` is ``looked_up``'s sale counted again since (a
    reload's or a lock section's count: ``reloaded_started_at``), not a reset's: a later
    generation in the same millisecond. A count changes no term of the sale (strategy,
    limit, its buyers): a buyer who looked it up before buys in it."""
    return looked_up < current and looked_up // 1000 == current // 1000


@functools.lru_cache(maxsize=64)
def shown_generation(generation_: int) -> str:
    """A sale generation as the API shows the sale (``sale_started_at``). Remembered: a
    sale has few generations, and a lock path asks inside its section (~8 us each)."""
    return shown_sale_start(started_at(generation_))


def sale_fields(sale: SaleInfo) -> dict[str, Any]:
    """The Redis hash copy of ``sale`` (``cached_sale`` reads it back): its terms and its
    generation."""
    fields: dict[str, Any] = {
        "id": sale.id, "strategy": sale.strategy, "work_ms": sale.work_ms,
        "per_user_limit": sale.per_user_limit, "initial_stock": sale.initial_stock}
    if sale.generation is not None:
        fields["generation"] = sale.generation
    return fields


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_MILLISECOND = timedelta(milliseconds=1)


def generation(started_at: datetime) -> int:
    """A sale's generation: its ``started_at`` (set by every reset) in microseconds
    since the epoch, the same whether the database hands it back aware or naive UTC."""
    if started_at.tzinfo is not None:
        started_at = started_at.astimezone(UTC).replace(tzinfo=None)
    return (started_at - _EPOCH) // _MICROSECOND


def started_at(generation: int) -> datetime:
    """The ``started_at`` of a generation, as an aware UTC datetime: ``generation``'s
    inverse, for a statement comparing the column with it."""
    return (_EPOCH + generation * _MICROSECOND).replace(tzinfo=UTC)
