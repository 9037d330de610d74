"""lockcore: distributed lock strategies for Redis and ZooKeeper, the safe and the unsafe.

>>> lock = lockcore.create("token", redis_client, "stock:sku-1", ttl_ms=10_000)
>>> if lock.acquire(blocking=True, timeout=2.0):
...     try:
...         ...                          # lock.fencing_token
...     finally:
...         lock.release()               # LockNotOwned if it expired meanwhile

``lockcore.strategies()`` lists every strategy with whether it is safe and the seed
article it comes from. Each strategy module's docstring is a lesson.
"""

# Import the strategies *package* before binding the strategies() *function*: importing
# a subpackage for the first time sets ``lockcore.strategies`` to it, which would
# otherwise shadow the function the first time a lock is created.
from . import strategies as _strategies_package  # noqa: F401
from .base import DistributedLock
from .clock import Clock, SystemClock
from .errors import FencingTokenRejected, LockError, LockLost, LockNotOwned, LockTimeout
from .registry import StrategyInfo, create, names, strategies
from .watchdog import Watchdog

__all__ = [
    "Clock",
    "DistributedLock",
    "FencingTokenRejected",
    "LockError",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "StrategyInfo",
    "SystemClock",
    "Watchdog",
    "create",
    "names",
    "strategies",
]
