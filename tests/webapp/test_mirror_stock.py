"""mirror_stock.lua against a real redis-server: Redis's copy of an ``sql`` sale's stock.

Each ``sql`` purchase sends what the database had left after its commit, and the
replies of concurrent purchases arrive in any order; one committed before a reset may
arrive after the reset wrote the new sale. A mutation audit took out each of the two
checks below (the smallest value of a generation, an older generation ignored) and no
test noticed: the storefront showed units the database did not have, and a stale
"sold out" stopped the new sale for good.
"""

from __future__ import annotations

from typing import Any

from webapp import scripts
from webapp.keys import SaleKeys


def fresh(redis_client: Any, sku: str) -> SaleKeys:
    keys = SaleKeys(sku)
    redis_client.delete(*keys.all())
    return keys


def mirror(redis_client: Any, keys: SaleKeys, remaining: int, generation: int) -> int:
    return int(scripts.script(redis_client, "mirror_stock")(
        keys=[keys.stock, keys.stock_gen, keys.soldout, keys.info], args=[remaining, generation]))


def test_the_replies_of_one_generation_keep_the_smallest_whatever_their_order(redis_client):
    keys = fresh(redis_client, "sku-mirror-order")
    assert mirror(redis_client, keys, 8, 100) == 8
    assert mirror(redis_client, keys, 6, 100) == 6  # the later commit's reply came first
    assert mirror(redis_client, keys, 7, 100) == 6  # the earlier one's, late: the database has 6
    assert redis_client.get(keys.stock) == b"6"


def test_a_reply_from_before_a_reset_leaves_the_new_sale_alone(redis_client):
    keys = fresh(redis_client, "sku-mirror-reset")
    mirror(redis_client, keys, 1, 100)  # the old sale, one unit left
    mirror(redis_client, keys, 50, 200)  # the reset: a new generation, 50 units
    # the old sale's last unit, committed before the reset, its reply after it
    assert mirror(redis_client, keys, 0, 100) == 50
    assert redis_client.get(keys.stock) == b"50"
    assert not redis_client.exists(keys.soldout)  # else the new sale is "sold out" for good


def test_a_reply_of_an_older_sale_than_the_copy_writes_nothing_before_the_generation_is_in(
        redis_client):
    # a reset deleted the keys and wrote its copy (generation 200); its stock generation
    # is not written yet (atomic-sharded writes it after the shards)
    keys = fresh(redis_client, "sku-mirror-copy")
    redis_client.hset(keys.info, mapping={"generation": 200})
    assert mirror(redis_client, keys, 0, 100) == 0  # the old sale had sold out
    assert redis_client.get(keys.soldout) is None
    assert redis_client.get(keys.stock_gen) is None
    assert mirror(redis_client, keys, 5, 200) == 5  # the new sale's own
    assert redis_client.get(keys.stock_gen) == b"200"
