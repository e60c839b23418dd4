"""Tie a run to its later ground truth and feedback.

Two ways, both cheap on the request path:

- :meth:`Tracescore.run <tracescore.client.Tracescore.run>` is a context manager: runs captured
  inside it take its ground truths, metadata, session and user, and the scope it yields tells
  the trace id of the run(s) made inside (``scope.trace_id``). It is a ``ContextVar``, so
  concurrent requests (threads, asyncio tasks) each see their own scope.
- The run id an app sets on a LangChain run (``config={"run_id": uuid}``) is accepted by
  ``add_ground_truth`` / ``add_feedback`` in place of the trace id: the handler notes
  run id → trace id for the most recent :data:`MAX_RUN_IDS` root runs of the process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

#: Root runs whose run id → trace id the process remembers (oldest forgotten first).
MAX_RUN_IDS = 10_000
#: Trace ids one scope remembers (a scope wrapped around a long loop stays bounded).
MAX_SCOPE_TRACES = 1_000

_current: ContextVar[RunScope | None] = ContextVar("tracescore_run_scope", default=None)


class RunScope:
    """What ``ts.run()`` yields: what its runs carry, and the trace ids they got.

    ``trace_id`` is set as soon as a run *starts* inside the scope (the trace of the current
    run), and is the last run's afterwards. Thread-safe for reading.
    """

    __slots__ = ("ground_truths", "metadata", "session_id", "user_id", "trace_ids")

    def __init__(self, ground_truths: tuple[str, ...], metadata: Mapping[str, Any],
                 session_id: str | None, user_id: str | None) -> None:
        self.ground_truths = ground_truths
        self.metadata = dict(metadata)
        self.session_id = session_id
        self.user_id = user_id
        self.trace_ids: deque[str] = deque(maxlen=MAX_SCOPE_TRACES)

    @property
    def trace_id(self) -> str | None:
        """The 32-hex trace id of the latest run captured in this scope (None before one)."""
        return self.trace_ids[-1] if self.trace_ids else None

    def __repr__(self) -> str:
        return f"RunScope(trace_id={self.trace_id!r}, runs={len(self.trace_ids)})"


def current_scope() -> RunScope | None:
    """The innermost ``ts.run()`` scope of the calling context, if any (hot path: one get)."""
    return _current.get()


def enter_scope(scope: RunScope) -> Any:
    return _current.set(scope)


def exit_scope(token: Any) -> None:
    _current.reset(token)


def ground_truths_from(md: Mapping[str, Any]) -> tuple[str, ...]:
    """Ground truths passed up front in a run's metadata (``ground_truth(s)`` keys)."""
    one = md.get("ground_truth")
    if isinstance(one, str):
        return (one,)
    many = md.get("ground_truths")
    if isinstance(many, str):
        return (many,)
    if isinstance(many, Sequence):
        return tuple(g for g in many if isinstance(g, str))
    return ()


class RunIds:
    """A bounded, thread-safe map: an app's run id → the trace id of that root run."""

    def __init__(self, limit: int = MAX_RUN_IDS) -> None:
        self._map: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit

    def note(self, run_id: UUID | str, trace_id: str) -> None:
        key = _key(run_id)
        with self._lock:
            self._map[key] = trace_id
            if len(self._map) > self.limit:
                self._map.popitem(last=False)

    def resolve(self, run_id: UUID | str) -> str | None:
        key = _key(run_id)
        with self._lock:
            return self._map.get(key)


def _key(run_id: UUID | str) -> str:
    return run_id.hex if isinstance(run_id, UUID) else str(run_id).replace("-", "").lower()
