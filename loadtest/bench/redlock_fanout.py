"""Prototype: lockcore's RedLock without the thread pool, and without a no-op fence round.

Benchmarked as ``x-redlock-fanout`` and ``x-redlock-fast`` (``--experimental``) to test
the advice in docs/performance.md before anyone changes ``lockcore/strategies``:

* ``FanoutRedLock`` sends each step's EVALSHA to all nodes first and then reads the
  replies, so the five waits overlap as in the pool, with no thread hand-offs. A node
  that errs (or answers NOSCRIPT and fails again after a load) counts as a "no".
  Unlike lockcore's ``on_every_node`` it has no per-node deadline beyond the clients'
  own socket timeouts: a prototype for measuring, not for a lab with paused nodes.
* ``FastRedLock`` also skips the fencing round when every "yes" returned the same
  counter: each node we hold is then already at the token, so the round would raise
  nothing, and validity time still bounds how long we trust the hold.
"""

from __future__ import annotations

from typing import Any

from lockcore import scripts
from lockcore.strategies.redlock import RedLock
from lockcore.strategies.redlock_nodes import validity_ms
from lockcore.waiting import SIGNAL_TTL_MS


class FanoutRedLock(RedLock):
    def _call(self, script: str, keys: list[str], args: list[Any]) -> list[Any]:
        sent: list[tuple[Any, Any, Any]] = []
        for client in self.clients:
            code = scripts.script(client, script)
            conn = client.connection_pool.get_connection()
            try:
                conn.send_command("EVALSHA", code.sha, len(keys), *keys, *args)
            except Exception as exc:  # a node down: a "no", like a timeout in the pool
                client.connection_pool.release(conn)
                sent.append((client, None, exc))
                continue
            sent.append((client, conn, code))
        answers: list[Any] = []
        for client, conn, code in sent:
            if conn is None:
                answers.append(code)
                continue
            try:
                answers.append(conn.read_response())
            except Exception as exc:
                answers.append(exc)
            finally:
                client.connection_pool.release(conn)
        for node, answer in enumerate(answers):  # NOSCRIPT after a restart: load, retry
            if isinstance(answer, Exception) and "NOSCRIPT" in str(answer):
                try:
                    answers[node] = scripts.script(sent[node][0], script)(keys=keys, args=args)
                except Exception as exc:
                    answers[node] = exc
        return answers


class FastRedLock(FanoutRedLock):
    def _try_acquire(self, token: str) -> bool:
        start = self.clock.monotonic()
        answers = self._call("token_acquire", [self.key, self.fence_key], [token, self.ttl_ms])
        counters = [int(a[1]) for a in answers if not isinstance(a, BaseException) and a[0]]
        if len(counters) >= self.quorum:
            fence = max(counters)
            if min(counters) == fence:  # all already there: the second round is a no-op
                raised = self.quorum
            else:
                answers_2 = self._call("redlock_fence", [self.key, self.fence_key],
                                       [token, fence])
                raised = sum(r == scripts.OK for r in answers_2)
            if raised >= self.quorum:
                assert self.ttl_ms is not None
                validity = validity_ms(self.ttl_ms, (self.clock.monotonic() - start) * 1000)
                if validity > 0:
                    self.fencing_token, self.validity_ms = fence, validity
                    self._valid_until = start + validity / 1000
                    return True
        pttls = [int(a[1]) for a in answers if not isinstance(a, BaseException) and not a[0]]
        self.holder_ttl_ms = max(pttls) if pttls else None
        self._call("token_release", [self.key, self.signal_key], [token, SIGNAL_TTL_MS])
        return False
