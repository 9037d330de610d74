"""The locustfile's own command-line options (``--seckill-*``, or ``SECKILL_*`` env vars).

Locust passes custom options from the master to its workers, so a distributed run is
configured in one place. The showdown sets them on the ``locust`` command line.
"""

from __future__ import annotations

from typing import Any

from .cliargs import at_least

#: shown in Locust's web UI form (the rest are the showdown's plumbing)
IN_WEB_UI = ("seckill_sku", "seckill_mode", "seckill_stock", "seckill_busy_retries",
             "seckill_noop_path")


def add_seckill_options(parser: Any) -> None:
    """Locust's ``init_command_line_parser`` hook: our options, each with an env var."""
    group = parser.add_argument_group("seckill flash sale")
    group.add_argument("--seckill-sku", env_var="SECKILL_SKU", default="sku-1")
    group.add_argument("--seckill-mode", env_var="SECKILL_MODE", default="flash",
                       choices=["flash", "sustained", "noop", "noop-get"])
    group.add_argument("--seckill-stock", env_var="SECKILL_STOCK", type=int, default=0,
                       help="units on sale; an order past it is a failure (0: don't check)")
    group.add_argument("--seckill-start-at", env_var="SECKILL_START_AT", type=float, default=0,
                       help="epoch seconds to release buyers (0: when spawning completes)")
    group.add_argument("--seckill-busy-retries", env_var="SECKILL_BUSY_RETRIES",
                       type=at_least(0),  # -5 was taken: no buyer bought (a Locust audit)
                       default=1, help="retries after 503 busy (Retry-After, capped at 1 s)")
    group.add_argument("--seckill-arrivals", env_var="SECKILL_ARRIVALS", default="",
                       help="append one JSON line per purchase attempt to this file")
    # Locust writes its --csv files every second and not again as it quits: a run's
    # last second was missing from them (a 4 s sustained phase counted 4,200 of its
    # 5,434 requests; a showdown audit)
    group.add_argument("--seckill-final-stats", env_var="SECKILL_FINAL_STATS", default="",
                       help="write the final stats here (JSON) as Locust quits")
    # the no-op modes' endpoint; /healthz was the default, which a plain run in
    # `noop` mode POSTed to (405, every request a failure) and which reads Redis and
    # the database, no baseline at all
    group.add_argument("--seckill-noop-path", env_var="SECKILL_NOOP_PATH", default="/api/noop",
                       help="the no-op modes' endpoint (default /api/noop)")
    # Locust's own ``add_argument`` marks an option for its web UI; a group's does not:
    # the form had none of ours, and a naive run there checked no stock (a Locust audit)
    for action in parser._actions:
        if action.dest in IN_WEB_UI:
            action.include_in_web_ui = True
            action.is_secret = action.is_required = action.is_multiple = False
