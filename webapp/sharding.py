"""atomic-sharded: a hot SKU's stock split over N keys, each in its own hash slot.

``atomic`` runs one Lua script on one key, so every buyer of a hot SKU queues on one
Redis thread, and on a cluster on one shard. Here the stock of ``sku-1`` lives in
``shard:{sku-1#0}:stock`` ... ``shard:{sku-1#N-1}:stock``: different hash tags, so a
cluster spreads them over its nodes and N buyers can be served in parallel. Their own
prefix, not ``sale:``: ``sale:{sku-1#0}:stock`` was also the stock key of a product
whose sku is ``sku-1#0`` (a text audit: that product's ``atomic`` sale read and took
the other sale's shard, and oversold by 10). A shard key's tag ends in ``#<index>``,
so two (sku, index) pairs never make one key.

**How a purchase picks a shard.** It starts at ``crc32(user_id) % N`` (a stable spread
without a random generator, so tests are repeatable), runs ``sharded_take.lua`` on that
one key, and on "not enough here" moves to the next shard, up to ``probes`` shards.

**The unsold-remainder trade-off.** A shard that is empty says nothing about the others.

* ``probes=N`` (the default, our choice): a buyer hears ``sold_out`` only after every
  shard said no. That costs up to N round trips, but only near the end of the sale,
  when most shards are empty. With ``quantity=1`` nothing is ever left unsold.
* ``probes=1``: one round trip, always; a buyer can hear ``sold_out`` while another
  shard still holds units, and the sale may end with stock on the shelf.
* Either way, a multi-unit purchase can find every shard below its quantity while
  the sum is enough (shards 1 + 1, quantity 2): that remainder is the price of
  sharding. ``read_shards`` and the audit's ``remaining`` show it.

The per-user rule and the order row stay where they are for every path (services.py):
the buyer is reserved in ``sale:{sku}:buyers`` before, and the order row is written
after, the stock is taken; if the row cannot be written, the unit goes back to the
shard it came from, not to a shared key.

**Resets amid buyers.** Each shard keeps the sale generation its units belong to
(``shard:{sku#i}:stockgen``, written with the units in one script by every reset). The
take checks it against the generation the buyer looked up, the order row is written
only in that generation, and a unit goes back only to its own generation's shard. A
buyer who looked the sale up before a reset hears 503 busy and takes nothing from the
new sale (the contract sweep's resets amid a crowd had sold 31 units of 30). A reset
writes its shards by generation too, as a reload does: a reload between the reset's
commit and its Redis side starts a newer generation, whose shards the reset's had
replaced, and every buyer heard 503 while the old sale's last buyers drained units no
row recorded (Redis 294, the database 300; ``StockPath._write_copy``).

**Reloads after Redis lost the sale.** Each process that finds the sale missing starts
a generation of its own (``saleinfo.new_generation``), so two reloads carry two. A
later generation's shards replace an earlier one's (``restore_shard.lua``), as its copy
of the sale does (``restore_sale.lua``); written only where absent, the shards kept the
first generation under the second's copy, and every buyer heard 503 until a reset.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

from . import scripts
from .deadlines import LOST_REPLY, deadline, too_late
from .orders import record_order
from .paths import StockPath
from .problems import SaleReset, SoldOut
from .saleinfo import stock_key_lost
from .services import Checkout, PurchaseRequest, SaleInfo, undo_take

logger = logging.getLogger(__name__)

DEFAULT_SHARDS = 4


def shard_key(sku: str, index: int) -> str:
    """``shard:{sku#index}:stock``: the hash tag includes the index, so shards spread."""
    return f"shard:{{{sku}#{index}}}:stock"


def shard_taken_key(sku: str, index: int) -> str:
    """``shard:{sku#index}:taken``: user -> the nonce of the purchase whose take emptied
    units from shard ``index`` (``undo_take.lua``, after a lost reply)."""
    return f"shard:{{{sku}#{index}}}:taken"


def shard_gen_key(sku: str, index: int) -> str:
    """``shard:{sku#index}:stockgen``: the sale generation shard ``index``'s units belong
    to, in the shard's own slot, so one script checks it and takes (``sharded_take.lua``)."""
    return f"shard:{{{sku}#{index}}}:stockgen"


def _old_shard_keys(sku: str, index: int) -> tuple[str, str, str]:
    """A shard's keys before they had a prefix of their own (8e6bd40): stock, stockgen,
    taken. The same hash tag as the new ones: one slot, so RENAMENX works on a cluster."""
    return tuple(f"sale:{{{sku}#{index}}}:{part}"  # type: ignore[return-value]
                 for part in ("stock", "stockgen", "taken"))


def move_old_shard_keys(redis: Any, sessions: Any) -> int:
    """Move every ``atomic-sharded`` sale's shards left under their old names
    (``sale:{sku#i}:*``) to the new ones (``shard:{sku#i}:*``), where no new one is; the
    number of shards moved. Called once a shop starts (``demo.seed``), before its
    workers sell.

    A sale left by a shop of the old names had its copy and no shard under the new:
    every purchase was 503 "reset while in flight" and its audit inconsistent until an
    admin reset (a review). Not for a shard whose old name is also a product's own key
    (a product whose sku is ``sku#i``: the very clash the rename ends): that sale waits
    for its reset."""
    from sqlalchemy import select

    from .models import Product, Sale
    from .paths import known

    with sessions() as session:
        sharded = list(session.scalars(select(Sale.sku).where(Sale.strategy == "atomic-sharded")))
        skus = set(session.scalars(select(Product.sku)))
    shards = getattr(known("atomic-sharded"), "shards", DEFAULT_SHARDS)
    moved = 0
    for sku in sharded:
        for index in range(shards):
            if f"{sku}#{index}" in skus:
                continue
            new = (shard_key(sku, index), shard_gen_key(sku, index), shard_taken_key(sku, index))
            old = _old_shard_keys(sku, index)
            if redis.exists(*new) or not redis.exists(old[1]):
                continue
            for before, after in zip(old, new, strict=True):
                if redis.exists(before):
                    redis.renamenx(before, after)
            moved += 1
    if moved:
        logger.warning("moved %d atomic-sharded shards to their new key names "
                       "(shard:{sku#i}:*, from sale:{sku#i}:*)", moved)
    return moved


def split(stock: int, shards: int) -> list[int]:
    """``stock`` units dealt over ``shards`` as evenly as possible (10 over 4: 3 3 2 2)."""
    base, extra = divmod(stock, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


class ShardedPath(StockPath):
    """Lock-free like ``atomic``, over ``shards`` stock keys instead of one."""

    stock_elsewhere = True  # its shards live on slots of their own
    #: no lock holds a reload off, as with ``atomic``: a purchase that took a unit the
    #: reload then counted as unsold must not write its row (``saleinfo.new_generation``)
    new_generation_on_reload = True

    def __init__(self, shards: int = DEFAULT_SHARDS, probes: int | None = None) -> None:
        if shards < 1:
            raise ValueError("shards must be >= 1")
        self.shards = shards
        self.probes = shards if probes is None else max(1, min(probes, shards))

    def keys(self, sale: SaleInfo) -> list[str]:
        return [shard_key(sale.sku, i) for i in range(self.shards)]

    def reset_redis(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        # the shards live on other cluster slots than the sale's keys: no one MULTI
        self._reset_in_steps(redis, sessions, sale, stock, generation)

    def reset_stock(self, redis: Any, sessions: Any, sale: SaleInfo, stock: int,
                    generation: int) -> None:
        """A reset's shards, then their generation (after them: ``_flag_sold_out`` reads
        it first). Each by generation, as a reload's are: a reload, or another reset,
        may be writing its own at the same time, and the newer one's stand
        (``restore_shard.lua``, ``set_stock_gen.lua``; ``StockPath._write_copy`` has the
        failure timeline). A shard of this reset's own generation is left as buyers left
        it: the reset's Redis side tried again after a lost connection."""
        self._restore_shards(redis, sale, stock, generation)
        scripts.script(redis, "set_stock_gen")(keys=[sale.keys.stock_gen, sale.keys.info],
                                               args=[generation])

    def restore_stock(self, redis: Any, sale: SaleInfo, stock: int) -> bool:
        """Each shard its share of the database's ``remaining`` where it is missing or
        of an older generation (``restore_shard.lua``: one script per shard, since a
        cluster keeps them on different nodes; a reload is rare). A shard of the
        reload's own generation, or a newer one, stands."""
        return self._restore_shards(redis, sale, stock,
                                    "" if sale.generation is None else sale.generation)

    def _restore_shards(self, redis: Any, sale: SaleInfo, stock: int,
                        generation: int | str) -> bool:
        """``stock`` dealt over the shards, each written with ``generation`` unless one as
        new stands there (``restore_shard.lua``; '': written only where missing); whether
        any was written. Each shard's units and generation go in one script (the two keys
        share the shard's slot): a buyer never finds the new units beside the old
        generation, or the reverse."""
        restore = scripts.script(redis, "restore_shard")
        written = [restore(keys=[shard_key(sale.sku, index), shard_gen_key(sale.sku, index),
                                 shard_taken_key(sale.sku, index)],
                           args=[generation, units])
                   for index, units in enumerate(split(stock, self.shards))]
        return any(written)

    def _shard_values(self, redis: Any, sale: SaleInfo) -> list[bytes | None]:
        """Each shard's stock key as Redis has it (None: missing), in one round trip."""
        pipe = redis.pipeline(transaction=False)
        for key in self.keys(sale):
            pipe.get(key)
        values: list[bytes | None] = pipe.execute()
        return values

    def read_shards(self, redis: Any, sale: SaleInfo) -> list[int]:
        """Units left in each shard (what the unsold remainder is made of)."""
        return [int(value or 0) for value in self._shard_values(redis, sale)]

    def read_stock(self, redis: Any, sale: SaleInfo) -> int | None:
        """The units left in all shards; None if Redis has none of them (lost its data)."""
        return self.stock_of(self._shard_values(redis, sale))

    def stock_keys(self, sale: SaleInfo) -> list[str]:
        return self.keys(sale)

    def stock_of(self, values: list[bytes | None]) -> int | None:
        if all(value is None for value in values):
            return None
        return sum(int(value or 0) for value in values)

    def first_shard(self, user_id: str) -> int:
        return zlib.crc32(user_id.encode()) % self.shards

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        self._work(deps, sale)
        take = scripts.script(deps.redis, "sharded_take")
        generation = "" if sale.generation is None else sale.generation
        start, seen = self.first_shard(request.user_id), []
        for step in range(self.probes):
            index = (start + step) % self.shards
            keys = (shard_key(sale.sku, index), shard_gen_key(sale.sku, index))
            taken = shard_taken_key(sale.sku, index)
            try:
                reply = take(keys=[*keys, taken], args=[
                    request.quantity, generation, deadline(deps.redis), request.user_id,
                    request.nonce])
            except LOST_REPLY:  # it may have run: its units back, if it did
                undo_take(deps.redis, sale.sku, request, keys[0], taken)
                raise
            if reply == b"stale":  # reset since this request looked the sale up
                raise SaleReset(sale.sku)
            if reply == b"lost":  # a key of the shard alone is gone: reload the sale
                raise stock_key_lost(deps.redis, sale)
            if reply == b"late":
                raise too_late()
            left = int(reply)
            if left >= 0:
                return self._record(deps, sale, request, keys)
            seen.append(-1 - left)
        if self.probes == self.shards and not any(seen):
            self._flag_sold_out(deps.redis, sale)  # every shard is empty: stop the queue
            raise SoldOut(f"{sale.sku} is sold out")
        logger.info("%s: %s found no shard with %d unit(s) in %d probe(s); shards seen %s",
                    sale.sku, request.user_id, request.quantity, self.probes, seen)
        raise SoldOut(f"{sale.sku}: no shard had {request.quantity} unit(s) left")

    def _flag_sold_out(self, redis: Any, sale: SaleInfo) -> None:
        """Set the sold-out flag if every shard of the sale as it is now is empty.

        The probes above may have met a reset between its deleting the keys (a missing
        shard reads as 0) and its loading the new stock: a plain SET then outlived the
        reset and answered ``sold_out`` to every buyer of the new sale. So: read the
        generation the reset writes after the shards, read the shards again (all there,
        all 0), and set the flag only while that generation stands (``flag_soldout.lua``).
        A buyer who looked up an older generation than the one standing hears 503
        (``SaleReset``) instead: its empty shards were the old sale's. Only on the way
        out of a sale, so the extra round trips are rare."""
        generation = redis.get(sale.keys.stock_gen)
        if generation is None:  # mid-reset, or Redis lost the sale: leave the flag alone
            return
        if sale.generation is not None and int(generation) != sale.generation:
            # A reset since this buyer looked the sale up, maybe to another strategy,
            # which leaves these shards as they were (empty, of the old generation):
            # they say nothing of the new sale, whose flag this buyer would have set.
            raise SaleReset(sale.sku)
        if not self._all_empty(redis, sale):
            return
        if not scripts.script(redis, "flag_soldout")(keys=[sale.keys.soldout,
                                                          sale.keys.stock_gen],
                                                    args=[generation]):
            return
        # A give-back (INCRBY, then DEL of the flag) may have landed between the read
        # above and the set: its DEL went first, and the flag stood over its unit, for
        # good. Read again: a unit there now lifts the flag. Any give-back later than
        # this read deletes the flag itself, after its INCRBY.
        if not self._all_empty(redis, sale):
            redis.delete(sale.keys.soldout)

    def _all_empty(self, redis: Any, sale: SaleInfo) -> bool:
        """Every shard there and at 0 (a missing one is not empty: its units may be on
        their way, from a reset or a reload)."""
        return all(value is not None and int(value) <= 0
                   for value in self._shard_values(redis, sale))

    def _record(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                keys: tuple[str, str]) -> Any:
        """Write the order; if that fails, the unit goes back to the shard it came from.

        Only in the sale generation the request looked up (as ``atomic``'s, see
        ``AtomicPath.record_taken``): a reset since then refuses the row (``SaleReset``)
        and the unit is not given back, since it was the old sale's: the take checked
        the shard's generation (``sharded_take.lua``), so it never takes from a new
        shard for an old request."""
        return record_order(deps.sessions, deps.redis, sale, request.user_id,
                            request.quantity, None, request.idempotency_key,
                            generation=sale.generation, stock_keys=keys)
