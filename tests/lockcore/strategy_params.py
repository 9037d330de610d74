"""Registry entries as pytest params.

Every strategy module is written: one that will not import (a broken import, a missing
dependency) fails its tests. (While the catalogue was being built, a missing module
skipped them: a strategy deleted by mistake would have skipped, not failed.)
"""

from __future__ import annotations

from lockcore import registry
from lockcore.base import DistributedLock


def lock_class(name: str) -> type[DistributedLock]:
    return registry.lock_class(name)


ALL = registry.names()
SAFE = [name for name in ALL if lock_class(name).safe]
