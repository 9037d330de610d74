"""A shop that never gets healthy says what its /healthz answered: a Redis user refused
the shop's own keys answered 503 "down: NoPermissionError" all along, and ``seckill
serve`` waited its whole start-up timeout and said "no log" (a Redis audit)."""

from __future__ import annotations

import pytest
import redis

from lockcore.embedded import RedisServer
from webapp.serve import ServedApp
from webapp.served import StartupError

pytestmark = pytest.mark.timeout(120)


def test_a_shop_that_never_gets_healthy_says_what_healthz_answered():
    server = RedisServer().start()
    try:
        admin = redis.Redis.from_url(server.url)
        admin.execute_command("ACL", "SETUSER", "shop", "on", ">pw", "~sale:*", "~lock:*",
                              "&*", "+@all")  # no seckill:* keys: /healthz writes one
        admin.close()
        url = f"redis://shop:pw@127.0.0.1:{server.port}/0"
        with pytest.raises(StartupError) as refused:
            with ServedApp(workers=1, redis_url=url, startup_timeout=8):
                pass
        # with Redis's own words (it said "down: NoPermissionError" alone)
        assert "NoPermissionError (" in str(refused.value) and \
            "permissions" in str(refused.value), str(refused.value)
    finally:
        server.stop()
