"""redlock: a majority of N independent Redis nodes. Safe only with its timing caveats.

**Guarantee.** While no node loses its data and clocks run at about the same rate, at
most one holder has the lock on a majority at a time, so one node (or a failover that
drops an unreplicated key, seed 004) cannot grant it twice. Fencing tokens never go
backwards while every node of the last majority keeps its counter: a new majority
may share a single node with the last, and if that one restarted empty the new token
may be lower (the timeline below; ``fence_at_least`` raises the counters again).

**Algorithm** (seed 004, antirez's RedLock).

1. Note the time; send ``SET key token NX PX ttl`` (+ ``INCR`` of the node's fence
   counter, one script) to all N nodes at once: written to every socket, then every
   reply read, under one short deadline (``redlock_nodes.on_every_node``).
2. Acquired iff a majority (N//2+1) said yes and ``validity = ttl - elapsed - drift``
   (drift = 1% of ttl + 2 ms) is still positive. Otherwise release on every node that
   did not answer a clear "no" (a timeout may hide a yes) and retry after a random
   delay, so two clients that split the votes do not keep colliding.
3. Fencing: each "yes" returns that node's incremented counter; the token is their max.
   When the counters differ, a second round raises every node we hold to that token.
   Any later majority shares a node with ours, whose counter is now >= our token, so
   its INCR, hence the later token, is strictly greater. Without it, a majority of
   lagging counters would hand out a smaller token. When every "yes" returned the same
   counter (the usual case) each node is already there: the round is skipped.
4. Release: compare-and-delete on every node, whatever happened during acquire.

A node whose pool had no free connection was sent nothing: it is asked again (for up
to ``RELEASE_PATIENCE_S`` on release, ``node_timeout_ms`` on acquire, what is left of
the validity on extend), never counted as a "no" (``redlock_nodes.until_sent``).

**Where the timing assumptions break** (so fencing tokens are needed anyway)::

    A: acquires on 3/5, validity 9.9 s;  A pauses 12 s (GC, swap, SIGSTOP)
    -- keys expire on all nodes --
    B: acquires on 3/5, writes
    A: resumes, still "holds" in its own mind, writes  <- only a fencing check stops it

Validity is measured on the client's monotonic clock, expiry on each server's clock:
a server clock that jumps forward (NTP step) expires a key early. A node that restarts
*without persistence* forgets our key: A holds {1,2,3}, node 3 restarts empty, B gets
{3,4,5}; node 3 forgot its fence counter too, so B's token need not exceed A's. Fix:
keep a crashed node down longer than the max TTL ("delayed restarts").

**Options.** ``node_timeout_ms`` (default 200) bounds the replies. ``wait``: ``poll``
and ``notify`` both mean a jittered ``poll_ms``, ``backoff`` the exponential backoff.

**When to use it.** When one Redis (even with replicas) must not grant a lock twice on
failover and you can afford N nodes; pair it with fencing for correctness.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import (
    AuthenticationError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from .. import scripts
from ..base import DistributedLock, check_redis_client
from ..errors import LockError, LockNotOwned
from ..poolfull import RELEASE_PATIENCE_S, MaxConnectionsError
from ..waiting import SIGNAL_TTL_MS, BackoffWaiter, positive_ms
from .redlock_nodes import (
    JitterWaiter,
    check_independent,
    drift_ms,
    quorum,
    until_sent,
    validity_ms,
)


class RedLock(DistributedLock):
    needs_redis = False
    strategy = "redlock"
    safe = True
    origin = "seed 004"
    summary = "majority of N independent Redis nodes, validity time, fencing via counter max"
    signals_on_release = True  # no single list to BLPOP on: waiters retry after a delay

    def __init__(self, clients: Any, name: str, *, node_timeout_ms: int = 200,
                 **options: Any) -> None:
        if not isinstance(clients, (list, tuple)):
            raise TypeError("redlock needs a list of independent redis clients, "
                            f"not {type(clients).__name__}")
        if not clients:  # "needs a list" said to a list (a lockcore audit)
            raise ValueError("redlock needs at least one redis client (five independent "
                             "nodes is the usual), not an empty list")
        for client in clients:
            check_redis_client(client, "redlock (each node)")
        check_independent(clients)
        super().__init__(list(clients), name, **options)
        if self.ttl_ms is None:
            raise ValueError("redlock needs a ttl_ms: validity is measured against it")
        if validity_ms(self.ttl_ms, 0) <= 0:  # 1-2 ms: never acquirable
            raise ValueError(f"ttl_ms={self.ttl_ms} is within the clock-drift allowance "
                             f"({drift_ms(self.ttl_ms):g} ms): no hold could ever be valid")
        positive_ms("node_timeout_ms", node_timeout_ms)  # 0 or nan: never acquirable
        if not isinstance(self.waiter, BackoffWaiter):
            self.waiter = JitterWaiter(options.get("poll_ms", 50))
        self.clients: list[Any] = list(clients)
        self.quorum = quorum(len(self.clients))
        self.node_timeout = node_timeout_ms / 1000
        self.fence_key = f"{self.key}:fence"
        #: ms the current hold could be trusted for, as of the moment it was acquired
        self.validity_ms: float = 0.0
        #: nodes that did not answer the last try to acquire (down, paused, too slow):
        #: with more than ``len(clients) - quorum`` of them no try can win, however free
        self.unanswered = 0
        #: the error of the last try, when nodes answering with one left no majority
        self._refusal: ResponseError | AuthenticationError | None = None
        self._valid_until = 0.0
        for client in self.clients:  # register once here: the fan-out sends their sha
            for script in ("token_acquire", "redlock_fence", "token_release", "token_extend"):
                scripts.script(client, script)

    def _call(self, script: str, keys: list[str], args: list[Any], patience_s: float,
              clients: list[Any] | None = None) -> list[Any]:
        """``script`` on every node (or ``clients``); a node whose pool stays full
        is asked again for up to ``patience_s`` (``until_sent``)."""
        sha = scripts.script(self.clients[0], script).sha  # the same source on every node
        return until_sent(
            self.clients if clients is None else clients,
            ("EVALSHA", sha, len(keys), *keys, *args),
            lambda client: scripts.script(client, script)(keys=keys, args=args),
            self.node_timeout, patience_s)

    def _patience_while_valid(self) -> float:
        """How long an extend or a check may wait for a connection: while the hold lasts."""
        return min(RELEASE_PATIENCE_S, max(self.remaining_validity_ms(), 0) / 1000)

    def _try_acquire(self, token: str) -> bool:
        start = self.clock.monotonic()
        answers = self._call("token_acquire", [self.key, self.fence_key], [token, self.ttl_ms],
                             self.node_timeout)
        self.unanswered = sum(isinstance(a, BaseException) for a in answers)
        granted = [(client, int(a[1])) for client, a in zip(self.clients, answers, strict=True)
                   if not isinstance(a, BaseException) and a[0]]
        counters = [counter for _client, counter in granted]
        if len(counters) >= self.quorum:
            fence = max(counters)
            raised = len(counters)  # all equal: every node we hold is already at ``fence``
            if min(counters) != fence:
                # only where we hold the lock (elsewhere the script does nothing): asking
                # every node again made a frozen one that the first round had left no
                # time to mark cost a whole node timeout of its own, 2 in all
                replies = self._call("redlock_fence", [self.key, self.fence_key],
                                     [token, fence], self.node_timeout,
                                     [client for client, _counter in granted])
                raised = sum(r == scripts.OK for r in replies)
            if raised >= self.quorum:
                assert self.ttl_ms is not None
                validity = validity_ms(self.ttl_ms, (self.clock.monotonic() - start) * 1000)
                if validity > 0:
                    self.fencing_token, self.validity_ms = fence, validity
                    self._valid_until = start + validity / 1000
                    return True
        refused = [isinstance(a, list) and not a[0] for a in answers]
        pttls = [int(a[1]) for a, no in zip(answers, refused, strict=True) if no]
        self.holder_ttl_ms = max(pttls) if pttls else None
        maybe_ours = [c for c, a, no in zip(self.clients, answers, refused, strict=True)
                      if not no and not isinstance(a, MaxConnectionsError)]
        if maybe_ours:  # a clear "no" set nothing, nor did a call never sent (a full pool)
            self._call("token_release", [self.key, self.signal_key], [token, SIGNAL_TTL_MS],
                       self.node_timeout, maybe_ours)
        refusals = [a for a in answers if isinstance(a, (ResponseError, AuthenticationError))]
        # Nodes that answer with an error left no majority that could say yes: a setting
        # (a database index out of range, a wrong password, an ACL) is raised at once; a
        # refusal that passes (BUSY, OOM, READONLY, ...) is waited out, and raised if the
        # last try of a timed ``acquire`` still ends so. It was False at every try,
        # LockTimeout from ``with``, the cause in a DEBUG log only (a lockcore audit).
        self._refusal = None
        if len(refusals) > len(self.clients) - self.quorum:
            lasting = [a for a in refusals if not _passes(a)]
            if len(lasting) > len(self.clients) - self.quorum:
                raise lasting[0]  # no majority even once the others pass
            self._refusal = next(a for a in refusals if _passes(a))
        return False

    def _acquire(self, blocking: bool, timeout: float | None) -> bool:
        """As ``DistributedLock._acquire`` (run while this thread holds the handle);
        but if the last try found a majority's nodes refusing, that error is raised."""
        self._refusal = None  # each failed try sets it afresh
        gotten = super()._acquire(blocking, timeout)
        refusal, self._refusal = self._refusal, None
        if not gotten and refusal is not None:
            raise refusal
        return gotten

    def _release(self, token: str) -> None:
        answers = self._call("token_release", [self.key, self.signal_key],
                             [token, SIGNAL_TTL_MS], RELEASE_PATIENCE_S)
        freed = sum(a in (1, 2) for a in answers)  # token_release.lua: 2 = released too
        if freed < self.quorum:
            unsent = sum(isinstance(a, MaxConnectionsError) for a in answers)
            why = (f"{unsent} had no free connection for {RELEASE_PATIENCE_S:g} s (their "
                   "keys expire with the ttl)" if unsent else
                   "the lock had expired or been taken on a majority")
            raise LockNotOwned(f"released on only {freed} of {len(self.clients)} nodes: "
                               f"{why}", self.name)

    def _extend(self, token: str, ttl_ms: int) -> None:
        start = self.clock.monotonic()
        answers = self._call("token_extend", [self.key], [token, ttl_ms],
                             self._patience_while_valid())
        validity = validity_ms(ttl_ms, (self.clock.monotonic() - start) * 1000)
        if sum(a == scripts.OK for a in answers) < self.quorum or validity <= 0:
            raise LockNotOwned("cannot extend on a majority: the lock is no longer ours",
                               self.name)
        self.validity_ms, self._valid_until = validity, start + validity / 1000

    def _fence_at_least(self, issued: int) -> None:
        """On a majority at least: any later majority shares a node with it, whose
        ``INCR`` then exceeds ``issued``, and the new token is the majority's max."""
        replies = self._call("fence_at_least", [self.fence_key], [issued], RELEASE_PATIENCE_S)
        raised = sum(not isinstance(r, BaseException) for r in replies)
        if raised < self.quorum:
            raise LockError(f"raised the fencing counter on only {raised} of "
                            f"{len(self.clients)} nodes, fewer than a majority", self.name)

    def remaining_validity_ms(self) -> float:
        """Ms left before the lock may have expired on a majority (<= 0: assume it has)."""
        return (self._valid_until - self.clock.monotonic()) * 1000 if self._token else 0.0

    def _is_held(self, token: str) -> bool:
        values = until_sent(self.clients, ("GET", self.key), lambda client: client.get(self.key),
                            self.node_timeout, self._patience_while_valid())
        mine = sum(v in (token, token.encode()) for v in values if isinstance(v, (str, bytes)))
        return mine >= self.quorum and self.remaining_validity_ms() > 0

    def locked(self) -> bool:
        """Whether some holder has the key on a majority of the nodes."""
        answers = until_sent(self.clients, ("EXISTS", self.key),
                             lambda client: client.exists(self.key), self.node_timeout,
                             self.node_timeout)
        return bool(sum(a == 1 for a in answers) >= self.quorum)


#: the leading words of Redis's refusals that pass by themselves (a script running, a
#: full memory, a failover, a cluster re-sharding): waited out like contention
_PASSING = frozenset({"BUSY", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS",
                      "CLUSTERDOWN"})


def _passes(refusal: BaseException) -> bool:
    """Whether a node's refusal may pass by itself (then it is waited out)."""
    if isinstance(refusal, (ReadOnlyError, OutOfMemoryError, TryAgainError)):
        return True
    return str(refusal).split(" ", 1)[0] in _PASSING
