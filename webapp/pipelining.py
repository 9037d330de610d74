"""Auto-pipelining: the Lua scripts of concurrent purchases sent in one round trip.

Every purchase starts with one script, ``atomic_checkout.lua``. Sent alone, each one
pays redis-py's fixed cost per command under gevent: a connection checked out of the
blocking pool (with a poll of the socket to make sure it is clean), a ``send``, a wait
in the hub, a read. The last profile put that at about a fifth of a worker for an
``atomic`` purchase, more than Redis running the script. Here the scripts of every
purchase waiting at the same moment share one checkout, one ``send`` and one read of
all their replies (``batching.Batcher``'s leader and followers; the bytes go through
``lockcore.wire.round_trip_packed``), the way ioredis's ``enableAutoPipelining`` does it for
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

**What comes after the script** (``then``): a caller may hand the leader work to do
with its reply before waking it: ``after`` (given to the pipeline) gets every such
caller's ``then`` and reply at once. ``takenorders.py`` writes there the order rows of
the ``atomic`` purchases whose units the batch took, in one transaction: a purchase then
waits once (script and row) instead of twice. ``after`` must not yield (it runs while
every caller of the batch waits) and leaves a ``then`` it could not serve to its caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from redis import Redis
from redis.exceptions import NoScriptError, ResponseError

from lockcore.wire import round_trip_packed

from . import scripts
from .batching import Batcher, Pending, own_copy
from .deadlines import AT_SEND, deadline

logger = logging.getLogger(__name__)

#: scripts per round trip at most
MAX_BATCH = 256

#: encoded script heads kept (one per script and sale); past it they are made again
_MAX_HEADS = 1024


def _bulk(encoded: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(encoded), encoded)


#: what a caller queues: the script's name, its keys, its arguments, and what the
#: leader does with its reply (``then``; None: nothing)
_Call = tuple[str, list[Any], list[Any], Any]

#: the leader's work after a round trip: every ``then`` of the batch, with its reply
After = Callable[[list[tuple[Any, Any]]], None]


class ScriptPipeline(Batcher[_Call]):
    """One per Redis client (per worker process): see the module docstring."""

    def __init__(self, redis: Redis, max_batch: int = MAX_BATCH,
                 after: After | None = None) -> None:
        super().__init__(max_batch)
        self._redis = redis
        self._after = after
        self._encode = redis.get_encoder().encode  # redis-py's own, for every argument
        #: ``EVALSHA sha numkeys keys...`` in the protocol, by script and keys
        self._heads: dict[tuple[str, tuple[Any, ...]], bytes] = {}

    def _packed(self, name: str, keys: list[Any], args: list[Any],
                sent_by: int | str = "") -> bytes:
        """``EVALSHA`` of script ``name`` in the Redis protocol, as redis-py's
        ``pack_commands`` writes it. The head (the script's SHA and the keys, the same
        for every buyer of a sale) is encoded once; each call encodes its arguments.
        redis-py's packing was 2% of a served worker in an ``atomic`` purchase's profile;
        this takes half its time (timeit: 2.5 against 6 us a script, with the SHA lookup).
        An ``AT_SEND`` argument goes out as ``sent_by``, the deadline of this send."""
        head_key = (name, tuple(keys))
        head = self._heads.get(head_key)
        if head is None:
            sha = scripts.script(self._redis, name).sha
            head = b"".join(_bulk(self._encode(part))
                            for part in ("EVALSHA", sha, len(keys), *keys))
            if len(self._heads) >= _MAX_HEADS:
                self._heads.clear()
            self._heads[head_key] = head
        parts = [b"*%d\r\n" % (3 + len(keys) + len(args)), head]
        for arg in args:
            parts.append(_bulk(self._encode(sent_by if arg is AT_SEND else arg)))
        return b"".join(parts)

    def run(self, name: str, keys: list[Any], args: list[Any], then: Any = None) -> Any:
        """EVALSHA ``webapp/scripts/<name>.lua``; its reply, or raise its error. With
        ``then``, the leader hands it and the reply to ``after`` first (if this script
        went in a batch: a reloaded script's caller does its own work)."""
        try:
            return self.submit((name, keys, args, then))
        except NoScriptError:  # redis-py's Script loads it and sends this one again
            return scripts.script(self._redis, name)(keys=keys,
                                                     args=self._sent(args, deadline(self._redis)))

    @staticmethod
    def _sent(args: list[Any], sent_by: int | str) -> list[Any]:
        """``args`` as they go out: ``AT_SEND`` is the deadline from now (``deadlines.py``)."""
        return [sent_by if arg is AT_SEND else arg for arg in args]

    def _serve(self, batch: list[Pending[_Call]]) -> None:
        try:
            self._round_trip(batch)
        except Exception as exc:  # Redis down, timed out, dropped: every caller's error
            for pending in batch:
                if not pending.answered:
                    pending.error = own_copy(exc)
            return
        if self._after is None:
            return
        follow = [(pending.item[3], pending.result) for pending in batch
                  if pending.item[3] is not None and pending.error is None]
        if follow:
            try:
                self._after(follow)
            except Exception:  # a bug of ``after``: its callers still do their own work
                logger.exception("the work after a script batch failed")

    def _round_trip(self, batch: list[Pending[_Call]]) -> None:
        sent_by = deadline(self._redis)  # for the scripts that carry one (AT_SEND)
        packed = b"".join(self._packed(name, keys, args, sent_by)
                          for name, keys, args, _ in (pending.item for pending in batch))
        answers = round_trip_packed(self._redis, packed, replies=len(batch))
        for pending, answer in zip(batch, answers, strict=True):
            if isinstance(answer, ResponseError):  # this script's own error
                pending.error = answer
            else:
                pending.result = answer
