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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
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


@contextmanager
def run_scope(
    *,
    ground_truths: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
) -> Iterator[RunScope]:
    """Scope for the app's next run(s): what they carry, and their trace ids.

    ``with ts.run(ground_truths=["ref"]) as run: chain.invoke(q)`` — the record of every
    run captured in the block (LangChain, LangGraph, LlamaIndex) gets these ground truths,
    metadata, session and user; ``run.trace_id`` is the trace id of the run (the latest
    one, if several) for a later :meth:`add_ground_truth` or :meth:`add_feedback`. A
    ``ContextVar``: concurrent requests each see their own scope. Never blocks.
    """
    if isinstance(ground_truths, str) or not all(isinstance(g, str) for g in ground_truths):
        raise TypeError("ground_truths must be a sequence of str")
    for name, value in (("session_id", session_id), ("user_id", user_id)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
    scope = RunScope(tuple(ground_truths), metadata or {}, session_id, user_id)
    token = enter_scope(scope)
    try:
        yield scope
    finally:
        exit_scope(token)
