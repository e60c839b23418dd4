"""Issue 35: the store by role. StoreAPI is the union of the role protocols of store/roles.py,
both backends implement every role's methods with the role's parameters, and the monitors'
state SQL lives in the store (monitor/state.py is the store's monitor-state module)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tracescore.store import roles
from tracescore.store.base import StoreAPI
from tracescore.store.postgres import PostgresStore
from tracescore.store.sqlite import Store

ROLES = (roles.RecordsJobs, roles.Scores, roles.JudgeCaches, roles.Labels, roles.Space)


def _members(proto: Any) -> set[str]:
    """The methods a protocol declares itself (not those of its bases)."""
    return {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}


def _declared(proto: Any) -> set[str]:
    out: set[str] = set()
    for cls in proto.__mro__:
        if cls is object or cls.__name__ in ("Protocol", "Generic"):
            continue
        out |= _members(cls)
    return out


def test_store_api_is_the_union_of_the_roles() -> None:
    union = set().union(*(_declared(r) for r in ROLES))
    assert _declared(StoreAPI) == union
    assert len(union) == 44  # the interface did not change, only its parts
    # each method is in one role (Connection's shared three aside)
    shared = _members(roles.Connection)
    seen: dict[str, str] = {}
    for r in ROLES:
        for name in _members(r):
            assert name not in seen, f"{name} in {seen.get(name)} and {r.__name__}"
            seen[name] = r.__name__
    assert shared == {"transaction", "close", "unavailable"}


@pytest.mark.parametrize("backend", [Store, PostgresStore])
@pytest.mark.parametrize("role", [*ROLES, roles.MonitorStateRole], ids=lambda r: r.__name__)
def test_each_backend_implements_each_role(backend: Any, role: Any) -> None:
    for name in sorted(_declared(role)):
        impl = getattr(backend, name, None)
        assert impl is not None, f"{backend.__name__} lacks {role.__name__}.{name}"
        if isinstance(impl, property) or not callable(impl):
            continue
        want = [p for p in inspect.signature(getattr(role, name)).parameters if p != "self"]
        have = list(inspect.signature(impl).parameters)
        assert all(p in have for p in want), (backend.__name__, name, want, have)


def test_monitor_state_is_the_stores_role() -> None:
    from tracescore.monitor import state
    from tracescore.store import monitor_state

    assert state is monitor_state
    assert monitor_state.save_evaluation.__module__ == "tracescore.store.monitor_state"
