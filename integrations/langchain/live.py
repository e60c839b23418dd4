"""The handler's run map as code beside the callbacks sees it.

A vector-store search (:mod:`.vectorstores`) and another framework asking for its owner
(:mod:`.emit`) find the live tracescore run they are inside from LangChain's own running
config: its callback manager's handlers and parent run id. They ask :class:`LiveRuns` — the
base of the callback handler — and call only LangChain's public callback methods on it, never
the handler's private ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from .runs import _Run

#: The retriever run the calling context is inside (set at its start, in the context that
#: runs its ``_get_relevant_documents``): a vector-store search there is the retriever's own.
active_retriever: ContextVar[UUID | None] = ContextVar("tracescore_lc_retriever", default=None)


class LiveRuns(BaseCallbackHandler):
    """A callback handler that keeps a run map: run id (its integer) → live :class:`_Run`."""

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[Any, _Run] = {}

    def live_run(self, run_id: UUID | None) -> _Run | None:
        return self._runs.get(getattr(run_id, "int", run_id)) if run_id is not None else None


def live_handlers(callbacks: Any) -> Iterator[LiveRuns]:
    """The tracescore handlers among a callback manager's handlers."""
    for handler in getattr(callbacks, "handlers", ()):
        if isinstance(handler, LiveRuns):
            yield handler
