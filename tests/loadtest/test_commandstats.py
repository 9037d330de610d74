"""``redis/purchase``: the commands a phase cost, from ``INFO commandstats``."""

from __future__ import annotations

import redis

from loadtest import commandstats
from lockcore.embedded import free_port


def test_a_server_that_does_not_answer_leaves_the_others_figure_standing(redis_server):
    # one dead RedLock node blanked the figure of every strategy, atomic's too
    live = redis.Redis.from_url(redis_server.url)
    dead = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    try:
        before = commandstats.total_calls([dead, live])
        for _ in range(10):
            live.set("commandstats-probe", 1)
        after = commandstats.total_calls([dead, live])
        assert commandstats.per_attempt(before, after, 10) == 1.0  # the SETs, no INFO
        assert commandstats.per_attempt({}, after, 10) is None  # nothing to compare
    finally:
        live.delete("commandstats-probe")
        live.close()
        dead.close()
