"""Vector-store searches made inside a run: ``vector_store.query(VectorStoreQuery(...))`` and
``aquery`` on any ``BasePydanticVectorStore`` subclass become RETRIEVER spans and retrieval
steps (documents on the span, contexts and candidates in the record).

LlamaIndex's dispatcher does not instrument vector stores, so :func:`install` wraps the
``query``/``aquery`` that each subclass defines (the ones imported now, and — through
pydantic's ``__pydantic_init_subclass__`` hook — every subclass defined later); :func:`uninstall`
puts the originals back. The wrapper costs one attribute read and one ``ContextVar`` read when
no capture is active or the call is outside a run.

No double counting: a search made by a retriever (``VectorIndexRetriever._retrieve`` →
``vector_store.query``) is that retriever's, which reports the same hits; a subclass's
``query`` calling its parent's is one search.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from tracescore import attributes as A

from .._spans import NO_SPAN, _materialize_all, _PendingSpan
from ._model import RETRIEVE, STEP_RETRIEVE, Node, Run, Step, funnel, stream_parent, suppressed
from .events import step_name
from .extract import query_text

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from tracescore.client import Tracescore

__all__ = ["SearchMixin", "SearchTarget", "install", "result_ids", "result_nodes", "uninstall"]


class SearchTarget(Protocol):
    """Where wrapped searches report (the capture, through :class:`SearchMixin`)."""

    def search_start(self, store: Any, query: Any, parent_id: str | None,
                     method: str) -> Node | None: ...

    def search_end(self, search: Node, result: Any, err: BaseException | None) -> None: ...


_METHODS = ("query", "aquery")
_capture: SearchTarget | None = None
_originals: dict[tuple[type, str], Any] = {}
#: BasePydanticVectorStore's own ``__pydantic_init_subclass__`` before install (None: none).
_hook_saved: tuple[Any] | None = None
_lock = threading.Lock()
#: Set while a wrapped search runs: a nested wrapped ``query`` (a subclass calling its
#: parent's) is part of it.
_in_search: ContextVar[bool] = ContextVar("tracescore_llama_search", default=False)


def result_nodes(result: Any) -> list[Any] | None:
    """A ``VectorStoreQueryResult`` as ``NodeWithScore``s (None when the store returned ids
    only: a store that keeps no text, whose nodes the retriever reads from the docstore)."""
    nodes = getattr(result, "nodes", None)
    if not nodes:
        return None if nodes is None else []
    sims = getattr(result, "similarities", None) or []
    return [NodeWithScore(node=n, score=sims[i] if i < len(sims) else None)
            for i, n in enumerate(nodes)]


def result_ids(result: Any) -> list[tuple[str, float | None]]:
    """(id, score) of each hit of a ``VectorStoreQueryResult`` that holds ids only."""
    ids = getattr(result, "ids", None) or []
    sims = getattr(result, "similarities", None) or []
    return [(str(i), float(sims[k]) if k < len(sims) else None) for k, i in enumerate(ids)]


def _start(store: Any, query: Any, method: str) -> tuple[SearchTarget, Node] | None:
    cap = _capture
    if cap is None or _in_search.get() or suppressed():
        return None
    parent = active_span_id.get()
    try:
        got = cap.search_start(store, query, parent, method)
    except Exception as exc:
        funnel("llama_index.search_start", exc)
        return None
    return None if got is None else (cap, got)


def _end(started: tuple[SearchTarget, Node], result: Any,
         err: BaseException | None) -> None:
    cap, search = started
    try:
        cap.search_end(search, result, err)
    except Exception as exc:
        funnel("llama_index.search_end", exc)


def _wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def query(self: Any, query: Any, **kwargs: Any) -> Any:
        started = _start(self, query, "query")
        if started is None:
            return orig(self, query, **kwargs)
        token = _in_search.set(True)
        try:
            result = orig(self, query, **kwargs)
        except BaseException as exc:
            _end(started, None, exc)
            raise
        finally:
            _in_search.reset(token)
        _end(started, result, None)
        return result

    query.__tracescore_wrapped__ = orig  # type: ignore[attr-defined]
    return query


def _awrap(orig: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(orig)
    async def aquery(self: Any, query: Any, **kwargs: Any) -> Any:
        started = _start(self, query, "aquery")
        if started is None:
            return await orig(self, query, **kwargs)
        token = _in_search.set(True)
        try:
            result = await orig(self, query, **kwargs)
        except BaseException as exc:
            _end(started, None, exc)
            raise
        finally:
            _in_search.reset(token)
        _end(started, result, None)
        return result

    aquery.__tracescore_wrapped__ = orig  # type: ignore[attr-defined]
    return aquery


def _patch(cls: type) -> None:
    for name in _METHODS:
        fn = cls.__dict__.get(name)
        if fn is None or hasattr(fn, "__tracescore_wrapped__") \
                or getattr(fn, "__isabstractmethod__", False):
            continue
        _originals[(cls, name)] = fn
        setattr(cls, name, _awrap(fn) if name == "aquery" else _wrap(fn))


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _on_subclass(cls: type, /, **kwargs: Any) -> None:
    own = _hook_saved[0] if _hook_saved is not None else None
    if own is not None:
        own.__func__(cls, **kwargs)
    else:
        super(BasePydanticVectorStore, cls).__pydantic_init_subclass__(**kwargs)  # type: ignore[misc]
    with _lock:
        if _capture is not None:
            _patch(cls)


def _set_hook(hook: Any) -> None:
    setattr(BasePydanticVectorStore, "__pydantic_init_subclass__", hook)  # noqa: B010


def install(capture: SearchTarget) -> None:
    """Route vector-store searches to ``capture`` (replacing any previous one)."""
    global _capture, _hook_saved
    with _lock:
        _capture = capture
        for cls in _subclasses(BasePydanticVectorStore):
            _patch(cls)
        if _hook_saved is None:
            _hook_saved = (BasePydanticVectorStore.__dict__.get("__pydantic_init_subclass__"),)
            _set_hook(classmethod(_on_subclass))


def uninstall(capture: SearchTarget) -> None:
    """Put the original methods back (if ``capture`` is still the one searches go to)."""
    global _capture, _hook_saved
    with _lock:
        if _capture is not capture:
            return
        _capture = None
        for (cls, name), fn in _originals.items():
            setattr(cls, name, fn)
        _originals.clear()
        if _hook_saved is not None:
            own = _hook_saved[0]
            if own is not None:
                _set_hook(own)
            else:
                delattr(BasePydanticVectorStore, "__pydantic_init_subclass__")
            _hook_saved = None


class SearchMixin:
    """Search spans and steps of :class:`~.capture.LlamaIndexCapture`."""

    ts: Tracescore
    tracer: Tracer
    _lock: threading.Lock
    _nodes: dict[str, Node]

    def _set_input(self, node: Node, value: Any) -> None:
        raise NotImplementedError

    def _note(self, run: Run, kind: str, name: str, nodes: list[Any],
              inputs: list[Any] | None = None, within: str | None = None) -> None:
        raise NotImplementedError

    def _set_documents(self, node: Node, nodes: Sequence[Any]) -> None:
        raise NotImplementedError

    def _end_span(self, node: Node, result: Any, err: BaseException | None, now: int) -> None:
        raise NotImplementedError

    def search_start(self, store: Any, query: Any, parent_id: str | None,
                     method: str) -> Node | None:
        """A search starting under LlamaIndex span ``parent_id``: its span and step, or None
        when it is outside a run or inside a retriever (whose hits are the same)."""
        parent = self._nodes.get(parent_id) if parent_id is not None else None
        if parent is None:
            parent = stream_parent.get()
            if parent is None:
                return None
        run = parent.run
        target = parent.target if parent.target is not None else parent
        if run.done or target.kind == RETRIEVE or target.within_retriever() is not None:
            return None
        cls = type(store).__name__
        attrs: dict[str, Any] = {A.SPAN_KIND: A.KIND_RETRIEVER, A.RETRIEVER_NAME: cls}
        name = f"{cls}.{method}"
        pending: Any = (_PendingSpan(name, target.span, attrs, time.time_ns()) if run.spans
                        else NO_SPAN)
        search = Node(name, run, pending, RETRIEVE, id(store), name, parent=target)
        q = query_text(query)
        if q is not None:
            self._set_input(search, q)
        with self._lock:
            if run.done:
                return None
            if q is not None:
                run.retrieval_queries.append(q)
            if pending is not NO_SPAN:
                run.pending.append(pending)
        return search

    def search_end(self, search: Node, result: Any, err: BaseException | None) -> None:
        if err is None:
            nodes = result_nodes(result)
            if nodes is not None:
                self._note(search.run, STEP_RETRIEVE, step_name(search), nodes)
                self._set_documents(search, nodes)
            else:
                hits = result_ids(result)
                with self._lock:
                    search.run.steps.append(Step(search.run.next_seq(), STEP_RETRIEVE,
                                                 step_name(search), [], ids=hits))
                span = search.span
                assert span is not None
                span.set_attribute(A.RETRIEVAL_DOCUMENT_COUNT, len(hits))
                for i, (doc_id, score) in enumerate(hits[:A.MAX_SPAN_DOCUMENTS]):
                    span.set_attribute(A.retrieval_document(i, A.DOCUMENT_ID), doc_id)
                    if score is not None:
                        span.set_attribute(A.retrieval_document(i, A.DOCUMENT_SCORE), float(score))
        self._end_span(search, None, err, time.time_ns())
        if search.run.done and isinstance(search.span, _PendingSpan):  # the run ended first
            self.ts.defer(partial(_materialize_all, self.tracer, [search.span]))
