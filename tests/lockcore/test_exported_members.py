"""``lockcore.__all__`` is exactly the public API (httpx ``tests/test_exported_members.py``)."""

from __future__ import annotations

import types

import lockcore


def test_all_lists_exactly_the_public_names():
    public = {name for name, value in vars(lockcore).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert set(lockcore.__all__) == public


def test_all_is_sorted_and_has_no_duplicates():
    assert lockcore.__all__ == sorted(set(lockcore.__all__))


def test_strategies_stays_the_function_after_strategy_modules_are_imported():
    # Importing a subpackage binds lockcore.strategies to it; the function must win.
    import lockcore.strategies.token  # noqa: F401

    assert callable(lockcore.strategies)
    assert lockcore.strategies is lockcore.registry.strategies
