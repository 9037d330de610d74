"""One row per strategy: what the audit, Locust and the arrival log say, and the verdict.

The showdown's question is "did a lock marked safe ever oversell or lose an order?", so
the audit endpoint (the database's and Redis's own account) decides correctness, while
Locust's CSVs give speed and the arrival log gives fairness and time to sell out.
*Lost* orders are ones a buyer was told succeeded (201) that the shop has no order for,
compared buyer by buyer (``GET /api/admin/sales/<sku>/buyers``); *unconfirmed* ones
the shop made that no buyer was told of.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

OK, TAUGHT, FAIL, ERROR, BASELINE = "ok", "unsafe, as taught", "FAIL", "ERROR", "baseline"
#: a sale with stock and buyers where nobody bought anything: every purchase failed (a
#: lock server down, say); exact, but no strategy showed anything
NOTHING_SOLD = "NOTHING SOLD"
#: sustained baselines: ``noop`` is POST /api/noop through the purchase's client code (the
#: ratio's denominator); ``noop-get`` is the old bare GET, kept visible beside it
NOOP_MODES = ("noop", "noop-get")


def phase_label(strategy: str, mode: str, round_no: int) -> str:
    """A phase's name in progress lines, tables, charts and raw files: the strategy, and
    from the second round on, its round (``atomic #2``)."""
    if round_no > 1 and mode not in NOOP_MODES:
        return f"{strategy} #{round_no}"
    return strategy


@dataclass
class StrategyResult:
    strategy: str
    safe: bool
    mode: str = "flash"
    users: int = 0
    stock: int = 0
    sold: int = 0
    oversold: int = 0
    lost: int = 0
    #: orders in the audit that no buyer of this run was told about (a backlog, a lost 201)
    unconfirmed: int = 0
    duplicates: int = 0
    #: buyers whose attempt was still waiting at the cap (``"cut_off"``) and whom the
    #: audit found with an order: the shop made it after the phase stopped listening
    #: (among ``unconfirmed``; fairness counts them as served)
    served_after_cap: int = 0
    #: the audit's word; None: no audit (a phase that broke, an ERROR row, said "consistent
    #: NO" of a sale nobody had audited: a showdown audit)
    consistent: bool | None = None
    rps: float = 0.0
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    sell_out_s: float | None = None
    fairness: float | None = None
    redis_per_purchase: float | None = None
    purchases_per_s: float | None = None
    failures: int = 0
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    throughput: list[tuple[float, float]] = field(default_factory=list)
    error: str | None = None
    #: sustained ``--rounds``: the round this phase ran in (1, 2, ...); a POST baseline
    #: has the round it closes (0: the one that opens the run). 0 everywhere: no rounds
    round_no: int = 0

    @property
    def label(self) -> str:
        return phase_label(self.strategy, self.mode, self.round_no)

    @property
    def verdict(self) -> str:
        if self.error:
            return ERROR
        if self.mode in NOOP_MODES:
            return BASELINE  # no sale: nothing to audit
        if self.sold == 0 and self.stock > 0 and self.users > 0:
            return NOTHING_SOLD  # was "ok": a dead ZooKeeper made a green run
        wrong = self.oversold > 0 or self.lost > 0 or self.duplicates > 0 or not self.consistent
        if not wrong:
            return OK
        return FAIL if self.safe else TAUGHT

    @property
    def rate(self) -> float | None:
        """What a sustained ratio compares: purchases/s, the POST baseline's good answers/s,
        or the bare GET baseline's requests/s (it logs no answers)."""
        return self.rps if self.mode == "noop-get" else self.purchases_per_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def failed(results: list[StrategyResult]) -> list[StrategyResult]:
    """Results that make the showdown exit non-zero: a safe lock wrong, or a broken run."""
    return [r for r in results
            if r.verdict == NOTHING_SOLD or r.verdict in (FAIL, ERROR) and (r.safe or r.error)]


def unsold_notes(results: list[StrategyResult]) -> list[str]:
    """A flash sale that stayed exact but did not sell what its buyers asked for, with
    buyers turned away busy (a lock server or Redis down mid-sale, a lock timeout too
    short): its verdict is ``ok`` (nothing wrong was sold), and the table alone read as
    a clean run. Not a failure; said under the table. So are purchases with no answer
    (the buyers gave up) and orders no buyer heard of: a showdown audit saw 51 of 60
    purchases time out on the buyers' side, two of them ordered, and the row said "ok"."""
    notes = []
    for r in results:
        if r.mode != "flash" or r.error or r.verdict == NOTHING_SOLD:
            continue
        unsold, busy = min(r.stock, r.users) - r.sold, r.outcomes.get("busy", 0)
        if unsold > 0 and busy > 0:
            notes.append(f"note: {r.label} left {unsold} of {r.stock} units unsold while "
                         f"{busy} answers were 503 busy (a lock or Redis down mid-sale, "
                         f"or a lock timeout too short): exact, but no sell-out")
        waiting = r.outcomes.get("cut_off", 0)
        if waiting:  # they were in no count: "0 purchase attempts had no answer, and 4
            # orders were made that no buyer was told about" (a showdown audit)
            notes.append(f"note: {r.label}: {waiting} purchase attempts were still waiting "
                         f"at the cap, and the shop made {r.served_after_cap} of those "
                         "orders after it (fairness counts those buyers as served"
                         + ("; sell-out is -: no answer timed the last unit)"
                            if r.sell_out_s is None else ")"))
        errors, untold = r.outcomes.get("error", 0), r.unconfirmed - r.served_after_cap
        if errors or untold:
            # the shop's orders are what the table counts; the buyers may not have heard
            notes.append(f"note: {r.label}: {errors} purchase attempts had no answer or an "
                         f"undocumented one, and {untold} orders were made that no "
                         "buyer was told about (see its Locust log in raw/)")
    return notes


def exact_unsafe_note(results: list[StrategyResult]) -> list[str]:
    """Why an unsafe strategy's row can read ``ok``: it broke nothing in this run. A
    plain spike does not break the ones whose failure needs a crash, a pause past the
    TTL or a clock (setnx, setnx-expire, getset): the labs show those; ``local`` needs
    two worker processes, ``naive`` enough buyers at once (a review). Without a word
    under the table, "safe NO" beside "ok" read as a contradiction (a demo audit)."""
    exact = [r.label for r in results
             if r.mode == "flash" and not r.safe and r.verdict == OK]
    if not exact:
        return []
    return [f"note: {', '.join(exact)}: unsafe, yet exact in this run: this spike did not "
            "break them (local needs two worker processes, naive enough buyers at once; "
            "setnx, setnx-expire and getset a crash, a pause past the TTL or a clock: "
            "`seckill scenario --list` has the labs that break them)"]


def table_notes(results: list[StrategyResult]) -> list[str]:
    """What is said under the comparison table, in the terminal and on the report's
    page alike: ``unsold_notes``, then ``exact_unsafe_note``."""
    return unsold_notes(results) + exact_unsafe_note(results)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "NO"


COLUMNS = ["strategy", "safe", "sold", "oversold", "lost/dup", "consistent", "req/s",
           "p50 ms", "p95 ms", "p99 ms", "sell-out s", "fairness", "redis/purchase", "verdict"]
SUSTAINED_COLUMNS = ["strategy", "safe", "orders", "purchases/s", "req/s", "% POST no-op",
                     "% GET no-op", "p50 ms", "p95 ms", "p99 ms", "consistent",
                     "redis/purchase", "verdict"]


def _flash_cells(r: StrategyResult) -> list[str]:
    return [r.strategy, _yes(r.safe), str(r.sold), str(r.oversold),
            f"{r.lost}/{r.duplicates}", _yes(r.consistent), _num(r.rps),
            _num(r.p50), _num(r.p95), _num(r.p99), _num(r.sell_out_s, 2),
            _num(r.fairness, 2), _num(r.redis_per_purchase, 1), r.verdict]


def baseline_rates(results: list[StrategyResult]) -> tuple[float | None, float | None]:
    """The rates of the POST and the GET no-op baselines of a sustained run, if any.

    A mode measured more than once (the POST baseline runs first and last, so that a
    machine whose speed drifts during the run moves both sides of the ratio) gives
    the mean of its phases."""
    found: dict[str, list[float]] = {}
    for r in results:
        if r.mode in NOOP_MODES and not r.error and r.rate is not None:
            found.setdefault(r.mode, []).append(r.rate)
    post, get = found.get("noop"), found.get("noop-get")
    return (sum(post) / len(post) if post else None, sum(get) / len(get) if get else None)


def post_baseline(results: list[StrategyResult], r: StrategyResult) -> float | None:
    """The POST no-op rate that ``r``'s share is of. A strategy's phase in a sustained
    run: the mean of the nearest good POST baselines before and after it in run order
    (``results`` is in the order the phases ran), so a machine whose speed drifts over
    a long run moves both sides of each ratio: with ``--rounds`` the baselines that
    close the rounds either side of it, with ``--paired`` the ones right beside it.
    Otherwise (a baseline, or ``r`` not in ``results``): the mean of every POST
    baseline."""
    at = next((i for i, x in enumerate(results) if x is r), None)
    if r.mode not in NOOP_MODES and at is not None:
        good = [(i, x.rate) for i, x in enumerate(results)
                if x.mode == "noop" and not x.error and x.rate is not None]
        around = [rate for i, rate in good if i < at][-1:] + \
            [rate for i, rate in good if i > at][:1]
        if around:
            return sum(around) / len(around)
    return baseline_rates(results)[0]


def round_shares(results: list[StrategyResult]) -> dict[str, list[float]]:
    """Each strategy's purchases/s as a share of the POST no-op (percent), round by
    round, for the strategies of a sustained run with rounds."""
    shares: dict[str, list[float]] = {}
    for r in results:
        if r.mode == "sustained" and r.round_no > 0 and not r.error and r.rate is not None:
            post = post_baseline(results, r)
            if post:
                shares.setdefault(r.strategy, []).append(100 * r.rate / post)
    return shares


def format_rounds(results: list[StrategyResult]) -> str:
    """One line per strategy measured in two or more rounds: its median share of the
    POST no-op, then each round's (empty without rounds)."""
    lines = []
    for strategy, shares in round_shares(results).items():
        if len(shares) > 1:
            each = ", ".join(f"{share:.0f}%" for share in shares)
            lines.append(f"{strategy}: median {statistics.median(shares):.0f}% of the POST "
                         f"no-op over {len(shares)} rounds ({each})")
    return "\n".join(lines)


def _share(rate: float | None, of: float | None) -> str:
    return "-" if rate is None or not of else f"{100 * rate / of:.0f}%"


def _sustained_cells(r: StrategyResult, post: float | None, get: float | None) -> list[str]:
    shares = [_share(r.rate, post), _share(r.rate, get)]
    if r.mode in NOOP_MODES:
        return [r.label, "-", "-", _num(r.purchases_per_s), _num(r.rps), *shares,
                _num(r.p50), _num(r.p95), _num(r.p99), "-", "-", r.verdict]
    return [r.label, _yes(r.safe), str(r.sold), _num(r.purchases_per_s), _num(r.rps),
            *shares, _num(r.p50), _num(r.p95), _num(r.p99), _yes(r.consistent),
            _num(r.redis_per_purchase, 1), r.verdict]


def table_rows(results: list[StrategyResult]) -> tuple[list[str], list[list[str]]]:
    """Header and cells, flash or sustained depending on the results' mode."""
    if any(r.mode != "flash" for r in results):
        get = baseline_rates(results)[1]
        return SUSTAINED_COLUMNS, [_sustained_cells(r, post_baseline(results, r), get)
                                   for r in results]
    return COLUMNS, [_flash_cells(r) for r in results]


def format_table(results: list[StrategyResult]) -> str:
    """The comparison as fixed-width text, one line per strategy."""
    header, rows = table_rows(results)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
             for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
