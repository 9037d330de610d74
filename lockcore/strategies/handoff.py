"""The FIFO hand-off queue that ``fair`` waits in, and ``token`` in starvation mode.

Not a strategy: what two strategies share, so each of their modules teaches one idea.

* **One identity per acquisition.** ``acquire`` draws a uuid that every attempt of
  that acquisition reuses: it is the waiter's name in the queue, the value of the
  lock key once held, and the suffix of its own wake list ``lock:{name}:wake:<uuid>``
  (``signal_key``). A retry after a lost reply therefore finds its old ticket.
* **A lease.** Every call renews it (``lease_ms``); a waiter that stops calling is
  skipped once it runs out, and a lock handed to it is lent for one lease at most.
* **Hand-off on release.** A release with anyone queued sets the lock to the oldest
  live waiter and pushes onto its list only: no herd, no ``SET NX`` in between.
* **Join, block, claim: one round trip** (``join_block_claim``). The join rings our
  own list if it found the lock free, so the BLPOP behind it returns at once; the
  claim behind the BLPOP runs inside Redis the moment a hand-off wakes us. The join
  is sent with ``CLIENT REPLY SKIP``: the releaser that joins right after handing the
  lock on is not woken by a reply nobody reads while the new holder needs the CPU.
  A ``RedisCluster`` client has no connection of its own to pipeline on (each command
  goes to its slot's node): it joins, BLPOPs and claims in three calls, as ``multi``
  waits. It raised ``AttributeError`` (no ``connection_pool``) as soon as a waiter
  blocked, an ``acquire`` with a timeout included (a lockcore audit).
  An ACL user refused ``CLIENT`` (``-client``) gets the join's reply too: the first
  refusal answers the join instead of the claim (``wire.py`` drops the connection,
  whose replies are out of step), and the pool's later joins are sent answered. It
  raised ``NoPermissionError`` out of every such join (a lockcore audit).
* **Leaving.** Giving up leaves the queue, or passes on a lock handed over meanwhile.
* **Settling.** An acquisition that raised with a reply lost may still take the lock
  when Redis wakes, and a release that raised so may never have run: ``settle()`` lets
  it go, by the acquisition's name.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from .. import scripts
from ..base import DistributedLock, acquire_arguments, new_token, whole_ms
from ..errors import LockNotOwned
from ..fencing import raise_counter
from ..poolfull import MaxConnectionsError, patiently
from ..waiting import blpop_timeout
from ..wire import round_trip

logger = logging.getLogger(__name__)

#: fair.lua's release replies
RELEASED, LEFT_QUEUE, HANDED_ON = 1, 2, 3

#: connection pools whose user Redis refused ``CLIENT REPLY`` (an ACL's ``-client``):
#: their joins are sent answered. Held weakly, as the pool.
_reply_refused: weakref.WeakSet[Any] = weakref.WeakSet()


class HandOffLock(DistributedLock):
    """A lock on one Redis whose waiters may queue in ``fair.lua`` and be handed it."""

    signals_on_release = True

    def __init__(self, client: Any, name: str, *, lease_ms: int, **options: Any) -> None:
        super().__init__(client, name, **options)
        if self.ttl_ms is None:
            raise ValueError(f"the {self.strategy} lock needs a ttl_ms: "
                             "it is what frees a crashed holder")
        # the lease goes to Redis as whole ms (PEXPIRE, a ZSET score): -5 or 1.5 there
        # failed at the first acquire, with a Lua or a NoneType error
        try:
            self.lease_ms = whole_ms("lease_ms", lease_ms)
        except TypeError as exc:  # a bad lock option is a ValueError at create
            raise ValueError(str(exc)) from None
        self.fence_key = f"{self.key}:fence"
        self.queue_keys = [self.key, f"{self.key}:queue", f"{self.key}:leases",
                           f"{self.key}:lease_ms", f"{self.key}:seq", self.fence_key,
                           f"{self.key}:wake:"]
        self._uuid = new_token()  # this acquisition's name: in the queue and in the key
        #: the name of an acquisition that raised with a reply lost: it may hold the lock
        #: (or a place in the queue) after all, when Redis runs its command late
        self._unsettled: str | None = None
        self._maybe_queued = False  # a queue call of this acquisition may have been sent
        self._queue_script = scripts.script(client, "fair")
        self._extend_script = scripts.script(client, "token_extend")

    def _fence_at_least(self, issued: int) -> None:
        # One past the floor: ``fair.lua`` counts a hand-off's token at the grant and the
        # waiter reads it at its claim, so a fence raised between the two (the web app
        # raises it after Redis lost its data, buyers already queued) gave the waiter
        # the floor itself, a token already issued (a lockcore audit). Counted at the
        # claim instead, a claim repeated by the pipelined join counted two.
        raise_counter(self.client, self.fence_key, issued + 1)

    @property
    def signal_key(self) -> str:
        """Our own wake list: a hand-off wakes only the waiter it hands the lock to."""
        return f"{self.key}:wake:{self._uuid}"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """As ``DistributedLock.acquire``; leaves the queue if it gives up while queued."""
        blocking, timeout = acquire_arguments(blocking, timeout)
        return self._acquire_occupied(blocking, timeout, self._acquire_queued)

    def _acquire_queued(self, blocking: bool, timeout: float | None) -> bool:
        if self._token is not None:
            return self._acquire(blocking, timeout)  # raises: locks are not reentrant
        if self._unsettled is not None:  # our own ghost would hold us up for its TTL
            try:
                self.settle()
            except MaxConnectionsError:  # nothing sent: settled at the next acquire
                pass
        self._new_acquisition()
        try:
            gotten = self._acquire(blocking, timeout)
        except BaseException:
            # A full pool is not among these (``_acquire`` waits it out): something may
            # have been sent, and may take the lock yet
            self._unsettled = self._uuid
            self._leave_queue()
            raise
        if not gotten:
            self._leave_queue()
        return gotten

    def _new_acquisition(self) -> None:
        self._uuid = new_token()  # one identity for every attempt of this acquisition
        #: a queue call of this acquisition may have been sent (giving up must leave)
        self._maybe_queued = False

    def _sending(self, call: Callable[[], Any]) -> Any:
        """``call()`` (a queue call), noting that it may have queued us, unless the pool
        was full: then nothing was sent."""
        try:
            reply = call()
        except MaxConnectionsError:
            raise  # nothing was sent
        except BaseException:
            self._maybe_queued = True  # sent, and its reply lost or cut short
            raise
        self._maybe_queued = True
        return reply

    def settle(self) -> bool:
        """After an ``acquire`` that raised with Redis's reply lost (a server paused
        past the client's timeout): let go of the lock if that acquisition took it after
        all (Redis ran the command when it woke; nobody held it, for a whole TTL), or
        leave the queue it may have joined. After a ``release`` that raised so: let go
        of the lock if Redis did not run the release. True if it had the lock; False
        otherwise (nothing was taken, nothing is unsettled, or this handle holds the
        lock now). Raises the client's error while Redis does not answer: call it again
        later (a web app's reset lock, taken as Redis froze, held off every later reset
        for its 90 s TTL; an HTTP audit). The handle's next ``acquire`` settles first.

        Settled is what Redis has run by the time it answers: a command that a cut link
        still holds in a retransmit queue may arrive after it, and then holds the lock
        for its TTL all the same."""
        uuid = self._unsettled
        if uuid is None or self._token is not None:
            return False
        done = self._queue_release(uuid)
        if self._unsettled == uuid:  # not another acquisition's, failed since
            self._unsettled = None
        return done in (RELEASED, HANDED_ON)

    def _queue_args(self, ring: str = "0") -> list[Any]:
        return ["acquire", self._uuid, self.ttl_ms, self.lease_ms, ring]

    def _queue_try(self) -> Any:
        """Join the queue (or renew our lease), taking the lock if it is our turn."""
        return self._sending(lambda: self._queue_script(keys=self.queue_keys,
                                                        args=self._queue_args()))

    def join_block_claim(self, block_s: float, *, join: bool) -> Any:
        """(Join,) BLPOP our wake list and claim: one round trip; the claim's reply."""
        return self._sending(lambda: self._join_block_claim(block_s, join=join))

    def _join_block_claim(self, block_s: float, *, join: bool) -> Any:
        pool = getattr(self.client, "connection_pool", None)
        if pool is None:  # a cluster client
            return self._join_block_claim_apart(block_s, join=join)
        silent = join and pool not in _reply_refused
        commands = self.block_claim_commands(block_s, join=join, silent=silent)
        wake, reply = round_trip(self.client, commands,
                                 replies=len(commands) - 2 if silent else len(commands))[-2:]
        if silent and _client_refused(wake):
            # Every command answered; read were CLIENT's refusal and the join's reply,
            # which is the answer (the connection is dropped with the rest).
            try:
                _reply_refused.add(pool)
            except TypeError:  # a pool that cannot be weakly referenced: refused again
                pass
            wake = None
        if isinstance(reply, NoScriptError):  # Redis restarted or flushed its scripts
            scripts.forget_loaded(self.client)  # the join, skipped, failed the same way
            reply = self._queue_try()
        for answer in (wake, reply):
            if isinstance(answer, Exception):
                raise answer
        return reply

    def _join_block_claim_apart(self, block_s: float, *, join: bool) -> Any:
        """``join_block_claim`` in separate calls, for a client with no connection to
        pipeline them on. The join takes a free lock itself: then nothing is left to
        wait for, and no ring is left on our list. We stay queued when the wait ends,
        as in one round trip: the next call renews our place, or giving up leaves."""
        if join:
            reply = self._queue_try()
            if reply[0] == 1:
                return reply
        self.client.blpop([self.signal_key], timeout=blpop_timeout(block_s))
        return self._queue_try()

    def block_claim_commands(self, block_s: float, *, join: bool,
                             silent: bool = True) -> list[tuple[Any, ...]]:
        """``join_block_claim``'s commands; they answer twice (the join answers nothing,
        unless not ``silent``: then three times)."""
        sha, keys = self._queue_script.sha, self.queue_keys
        commands: list[tuple[Any, ...]] = []
        if join:
            # A NOSCRIPT join would block in vain: loaded again after any NOSCRIPT.
            scripts.loaded(self.client, "fair")
            # No reply for the join: the claim's reply says it all (module docstring).
            if silent:
                commands.append(("CLIENT", "REPLY", "SKIP"))
            commands.append(("EVALSHA", sha, len(keys), *keys, *self._queue_args("1")))
        return commands + [("BLPOP", self.signal_key, blpop_timeout(block_s)),
                           ("EVALSHA", sha, len(keys), *keys, *self._queue_args())]

    def _on_acquired(self, token: str) -> None:
        super()._on_acquired(self._uuid)  # the value in Redis is the acquisition's uuid

    def _queue_release(self, uuid: str) -> Any:
        """``fair.lua``'s release for ``uuid``: a holder releases, a waiter leaves."""
        return self._queue_script(keys=self.queue_keys,
                                  args=["release", uuid, self.ttl_ms, self.lease_ms])

    def _release(self, token: str) -> None:
        try:
            done = self._queue_release(token)
        except BaseException:
            # Sent, its reply lost (a paused Redis): Redis may run it when it wakes, or
            # refuse it then (NOSCRIPT: a ``token`` handle's first release sends a script
            # never loaded), and the lock stays ours for its TTL. Or not sent at all (a
            # full pool past ``patiently``'s wait): ours for sure. Kept for ``settle()``
            # and the next ``acquire`` (a lockcore audit: 20 s for nobody, 3 of 3 times).
            self._unsettled = token
            raise
        if self._unsettled == token:  # a full pool's try, then one that went through
            self._unsettled = None
        if done not in (RELEASED, HANDED_ON):
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        # Handed on: others are queued, so our next try could only fail.
        self.queue_first = done == HANDED_ON and self.waiter.name == "notify"

    def _extend(self, token: str, ttl_ms: int) -> None:
        if self._extend_script(keys=[self.key], args=[token, ttl_ms]) != scripts.OK:
            raise LockNotOwned("cannot extend: the lock is no longer ours", self.name)

    def _leave_queue(self) -> None:
        """Giving up: leave the queue, or pass the lock on if it was handed to us meanwhile.
        Nothing to leave if no queue call was ever sent (a full pool at every try): it
        waited up to 5 s for a connection first, so ``acquire(timeout=0.5)`` said False
        after 2.8 s (a lockcore audit)."""
        if not self._maybe_queued:
            return
        try:
            patiently(lambda: self._queue_release(self._uuid))  # a full pool: wait for one
        except Exception as exc:  # our lease runs out anyway
            logger.warning("%s lock %r: could not leave the queue: %s", self.strategy,
                           self.name, exc)


def _client_refused(answer: Any) -> bool:
    """Whether ``answer`` is Redis refusing this user the ``CLIENT`` command: an ACL's
    ``-client``, or a server that renamed it away (``rename-command CLIENT ""``, common
    hardening advice: "unknown command 'CLIENT'" went unrecognised, and a quarter of a
    busy ``token`` sale's buyers heard 503; a Redis audit)."""
    if not isinstance(answer, ResponseError):
        return False
    text = str(answer).lower()
    return "client" in text and (isinstance(answer, NoPermissionError)
                                 or text.startswith("unknown command"))
