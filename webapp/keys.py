"""Redis key names of one sale. They share the hash tag ``{sku}``, so a Lua script may
touch all of them on a Redis Cluster too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SaleKeys:
    sku: str

    @property
    def stock(self) -> str:
        """Live units left (an integer string): what the storefront shows."""
        return f"sale:{{{self.sku}}}:stock"

    @property
    def stock_gen(self) -> str:
        """The sale generation the stock copy belongs to (``sql``: ``mirror_stock.lua``)."""
        return f"sale:{{{self.sku}}}:stockgen"

    @property
    def soldout(self) -> str:
        """Set once the stock is gone, so late buyers get 409 without touching the lock."""
        return f"sale:{{{self.sku}}}:soldout"

    @property
    def buyers(self) -> str:
        """Users with an order or a purchase in flight: the one-order-per-user fast path."""
        return f"sale:{{{self.sku}}}:buyers"

    @property
    def info(self) -> str:
        """A hash copy of the sale's row, so a purchase needs no database read."""
        return f"sale:{{{self.sku}}}:info"

    @property
    def reloaded(self) -> str:
        """Set when the sale was reloaded after Redis lost its data: the first lock
        section after the hold-off reads the stock from the database (``section.py``)."""
        return f"sale:{{{self.sku}}}:reloaded"

    @property
    def holdoff(self) -> str:
        """Lives one lock TTL after such a reload: no lock section sells meanwhile."""
        return f"sale:{{{self.sku}}}:holdoff"

    @property
    def key_owners(self) -> str:
        """Idempotency-Key -> the user whose purchase it is, claimed before any stock is
        taken (``services.claim_key``); a reset forgets them with the sale's orders."""
        return f"sale:{{{self.sku}}}:key_owners"

    @property
    def reservations(self) -> str:
        """User -> the nonce of the purchase that reserved them: how a purchase whose
        reply was lost tells its own reservation apart (``undo_lost.lua``)."""
        return f"sale:{{{self.sku}}}:reservations"

    @property
    def taken(self) -> str:
        """User -> the nonce of the purchase whose take script took their units, after
        the reservation (``atomic_purchase.lua``; ``undo_take.lua``)."""
        return f"sale:{{{self.sku}}}:taken"

    @property
    def fence_mark(self) -> str:
        """The lock's fence as the database last recorded it (``sales.fence_floor``): a
        section whose token runs far past it records its own (``saleinfo.note_token``).
        Kept across resets, like the floor it mirrors."""
        return f"sale:{{{self.sku}}}:fence_mark"

    @property
    def resetting(self) -> str:
        """Lives while an admin reset waits for the sale's lock: a lock section that
        takes it meanwhile sells nothing and lets go (``admin._current_lock``)."""
        return f"sale:{{{self.sku}}}:resetting"

    @property
    def reset_in_flight(self) -> str:
        """Lives from a reset's database side to its Redis side (``sales.reset_sale``):
        a buyer who finds no copy of the sale meanwhile waits for the reset's rather
        than reload it (``saleinfo.cached_sale``). Not in ``all``: the reset's own
        Redis side deletes those."""
        return f"sale:{{{self.sku}}}:reset_in_flight"

    def all(self) -> list[str]:
        return [self.stock, self.stock_gen, self.soldout, self.buyers, self.info,
                self.reloaded, self.holdoff, self.key_owners, self.reservations, self.taken,
                self.resetting]
