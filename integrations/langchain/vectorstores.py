"""Vector-store searches made inside a run, outside any retriever, as retrieval steps.

LangChain reports no callback for ``vector_store.similarity_search(...)`` called directly (the
LangChain 1.x two-step RAG tutorial does it in a ``@dynamic_prompt`` middleware). The search
methods of :class:`~langchain_core.vectorstores.VectorStore` and of every subclass (those that
exist when the first handler is made, and those defined later, through ``__init_subclass__``)
are wrapped once per process. A wrapped search:

- costs one context-variable read when no tracescore run is live in the calling context
  (LangChain's ``var_child_runnable_config``: the config of the step that is running);
- inside a live run, becomes a ``RETRIEVER`` step of that run (span, documents, contexts),
  reported straight to the tracescore handler — never to the app's other callbacks;
- inside a retriever (``VectorStoreRetriever`` wraps the same store) or inside another wrapped
  search (``similarity_search`` calling ``similarity_search_with_score``), is not counted again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any
from uuid import UUID, uuid4

from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.vectorstores import VectorStore

from .._record import SEARCH
from .live import LiveRuns, active_retriever, live_handlers

#: The search methods wrapped, and whether their result is (document, score) pairs.
SEARCH_METHODS = {
    "similarity_search": False,
    "similarity_search_with_score": True,
    "similarity_search_with_relevance_scores": True,
    "max_marginal_relevance_search": False,
}
ASYNC_METHODS = {f"a{name}": scored for name, scored in SEARCH_METHODS.items()}
_MARK = "__tracescore_search__"

#: True while a wrapped search runs: the searches it makes itself are its own.
_searching: ContextVar[bool] = ContextVar("tracescore_lc_searching", default=False)
_patched = False


def _target() -> tuple[LiveRuns, UUID] | None:
    """(handler, parent run id) when the caller runs inside a live tracescore run and outside
    any retriever or other search; else None (the hot no-op path)."""
    config = var_child_runnable_config.get()
    if not config or _searching.get():
        return None
    callbacks = config.get("callbacks")
    parent = getattr(callbacks, "parent_run_id", None)
    if parent is None:
        return None
    for handler in live_handlers(callbacks):
        if handler.live_run(parent):
            if handler.live_run(active_retriever.get()) is not None:
                return None  # a retriever's own search: the retriever reports its documents
            return handler, parent
    return None


def _start(target: tuple[LiveRuns, UUID], store: Any, name: str, args: Any, kwargs: Any) -> UUID:
    handler, parent = target
    query = args[0] if args else kwargs.get("query", "")
    run_id = uuid4()
    handler.on_retriever_start(None, query, run_id=run_id, parent_run_id=parent,
                               name=f"{type(store).__name__}.{name}", tracescore_search=SEARCH)
    return run_id


def _wrap_sync(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = _target()
        if target is None:
            return fn(self, *args, **kwargs)
        token = _searching.set(True)
        try:
            run_id = _start(target, self, name, args, kwargs)
            try:
                result = fn(self, *args, **kwargs)
            except BaseException as exc:
                target[0].on_retriever_error(exc, run_id=run_id)
                raise
            target[0].on_retriever_end(result, run_id=run_id, tracescore_search=SEARCH)
            return result
        finally:
            _searching.reset(token)

    setattr(search, _MARK, True)
    return search


def _wrap_async(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = _target()
        if target is None:
            return await fn(self, *args, **kwargs)
        token = _searching.set(True)
        try:
            run_id = _start(target, self, name, args, kwargs)
            try:
                result = await fn(self, *args, **kwargs)
            except BaseException as exc:
                target[0].on_retriever_error(exc, run_id=run_id)
                raise
            target[0].on_retriever_end(result, run_id=run_id, tracescore_search=SEARCH)
            return result
        finally:
            _searching.reset(token)

    setattr(search, _MARK, True)
    return search


def _patch_class(cls: type) -> None:
    """Wrap the search methods ``cls`` itself defines (inherited ones are wrapped where they
    are defined)."""
    for methods, wrap in ((SEARCH_METHODS, _wrap_sync), (ASYNC_METHODS, _wrap_async)):
        for name in methods:
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, _MARK, False):
                setattr(cls, name, wrap(fn, name))


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def patch_vector_stores() -> None:
    """Wrap every ``VectorStore`` class's search methods, now and for classes defined later
    (idempotent; once per process)."""
    global _patched
    if _patched:
        return
    _patched = True
    for cls in _subclasses(VectorStore):
        _patch_class(cls)
    original = VectorStore.__dict__.get("__init_subclass__")

    def init_subclass(cls: type, **kwargs: Any) -> None:
        if isinstance(original, classmethod):
            original.__func__(cls, **kwargs)
        else:
            super(VectorStore, cls).__init_subclass__(**kwargs)  # type: ignore[misc]
        _patch_class(cls)

    hook: Any = classmethod(init_subclass)  # type: ignore[arg-type]
    VectorStore.__init_subclass__ = hook  # type: ignore[method-assign]
