"""Auto-pipelining: the Lua scripts of concurrent purchases sent in one round trip.

Every purchase starts with one script, ``atomic_checkout.lua``. Sent alone, each one
pays redis-py's fixed cost per command under gevent: a connection checked out of the
blocking pool (with a poll of the socket to make sure it is clean), a ``send``, a wait
in the hub, a read. The last profile put that at about a fifth of a worker for an
``atomic`` purchase, more than Redis running the script. Here the scripts of every
purchase waiting at the same moment share one checkout, one ``send`` and one read of
all their replies (``batching.Batcher``'s leader and followers; the bytes go through
``lockcore.wire.round_trip``), the way ioredis's ``enableAutoPipelining`` does it for
Node.

**What does not change.** Redis still runs each script on its own and to its end: a
pipeline is only how the bytes travel, not a transaction, so one buyer's check-and-take
cannot interleave with another's exactly as before. Each caller gets its own reply, or
its own error: a script that fails (``NOSCRIPT``, a Lua error) fails for that caller
alone, since Redis answers every command of a pipeline in order.

**Failure timeline** (the connection dies mid-batch)::

    leader sends 40 scripts; Redis runs them; the connection drops before the replies
    every caller of the batch: ConnectionError -> 503 busy, as a lone EVALSHA would be

A lost reply is as ambiguous for 40 scripts as for one (did it run?); it is not
retried, since running a purchase twice is worse than answering 503.

**NOSCRIPT** (Redis restarted or flushed its script cache): the first caller to see it
loads the script (``SCRIPT LOAD``) and sends its own again, alone.
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.exceptions import NoScriptError, ResponseError

from lockcore.wire import round_trip

from . import scripts
from .batching import Batcher, Pending, own_copy

#: scripts per round trip at most
MAX_BATCH = 256

#: what a caller queues: the script's name, its keys and its arguments
_Call = tuple[str, list[Any], list[Any]]


class ScriptPipeline(Batcher[_Call]):
    """One per Redis client (per worker process): see the module docstring."""

    def __init__(self, redis: Redis, max_batch: int = MAX_BATCH) -> None:
        super().__init__(max_batch)
        self._redis = redis

    def run(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """EVALSHA ``webapp/scripts/<name>.lua``; its reply, or raise its error."""
        try:
            return self.submit((name, keys, args))
        except NoScriptError:  # redis-py's Script loads it and sends this one again
            return scripts.script(self._redis, name)(keys=keys, args=args)

    def _serve(self, batch: list[Pending[_Call]]) -> None:
        try:
            self._round_trip(batch)
        except Exception as exc:  # Redis down, timed out, dropped: every caller's error
            for pending in batch:
                if not pending.answered:
                    pending.error = own_copy(exc)

    def _round_trip(self, batch: list[Pending[_Call]]) -> None:
        commands = [("EVALSHA", scripts.script(self._redis, name).sha, len(keys), *keys, *args)
                    for name, keys, args in (pending.item for pending in batch)]
        answers = round_trip(self._redis, commands, replies=len(batch))
        for pending, answer in zip(batch, answers, strict=True):
            if isinstance(answer, ResponseError):  # this script's own error
                pending.error = answer
            else:
                pending.result = answer
