"""The record of ``Tracescore.log_record``: its arguments checked (clear errors at the API) and
bounded, the count of what it dropped (:class:`Drops`), and the redaction of nested metadata.
Any thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any

from .._internal.frozen import fast_constructor
from .._internal.ids import new_ids, new_span_id, new_trace_id
from .._internal.validate import (
    TRUNCATED_KEY,
    check_context,
    check_id,
    check_metadata,
)
from ..record import Context, RagRecord

log = logging.getLogger("tracescore")

#: :meth:`tracescore.client.Tracescore.log_record` keeps at most this many contexts (and ground truths), and
#: contexts of at most this many characters in all: the app thread's work stays bounded
#: whatever the input (each kept context is checked, and redacted with ``redact``). What is
#: beyond is dropped, counted in ``stats()["contexts_dropped"]``, and noted in the record's
#: metadata (``tracescore.contexts_dropped``, ``tracescore.truncated``).
MAX_LOG_CONTEXTS = 1_000
MAX_LOG_CONTEXT_CHARS = 2_000_000
#: the metadata key of a record whose contexts were cut: how many were dropped
CONTEXTS_DROPPED_KEY = "tracescore.contexts_dropped"


#: ``Context(text)`` (its ``__post_init__`` only clears a non-finite score: none here)
_new_context = fast_constructor(Context, ("text",), post_init=False)
_new_record = fast_constructor(RagRecord, (
    "trace_id", "span_id", "query", "answer", "contexts", "ground_truths", "metadata",
    "session_id", "user_id", "end_time_ns", "source"))


def _manual_record(query: Any, answer: Any, contexts: Any, ground_truths: Any, metadata: Any,
                   trace_id: Any, span_id: Any, session_id: Any = None, user_id: Any = None,
                   scope: Any = None) -> tuple[RagRecord, int]:
    """The record :meth:`Tracescore.log_record` describes and how many contexts and ground
    truths it dropped beyond the bounds; or a clear TypeError/ValueError.

    ``session_id``/``user_id``: the call's own (checked after everything else), else those of
    ``scope`` (the enclosing ``ts.run(...)``, if any); a record with a session is dated now
    (turns logged back to back keep their order).

    App thread, once per call: the common input — a list or tuple of plain ``str`` within
    the bounds — takes a fast path (one pass over the items, no per-item check call; the
    result is what :func:`_bounded` makes of it), and the record and its contexts are built
    with :func:`~tracescore._internal.frozen.fast_constructor`."""
    if query is not None and type(query) is not str and not isinstance(query, str):
        raise TypeError(f"query must be a str or None, got {type(query).__name__}")
    if answer is not None and type(answer) is not str and not isinstance(answer, str):
        raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
    tc, tg = type(contexts), type(ground_truths)
    if tc is not list and tc is not tuple:
        _check_sequence("contexts", contexts)
    if tg is not list and tg is not tuple:
        _check_sequence("ground_truths", ground_truths)
    strs = _plain_strs(contexts)
    if strs is not None:
        ctxs: tuple[Context, ...] = tuple(map(_new_context, strs))
        cut_ctxs = 0
    else:
        kept, cut_ctxs = _bounded(contexts, check_context)
        ctxs = tuple(kept)
    gts = _plain_strs(ground_truths)
    if gts is not None:
        cut_gts = 0
    else:
        kept, cut_gts = _bounded(ground_truths, _check_ground_truth)
        gts = tuple(kept)
    md = {} if metadata is None else check_metadata(metadata)
    if cut_ctxs or cut_gts:
        md[CONTEXTS_DROPPED_KEY] = cut_ctxs + cut_gts
        hit = md.get(TRUNCATED_KEY)
        md[TRUNCATED_KEY] = sorted({*(hit if isinstance(hit, list) else []),
                                    *(["contexts"] if cut_ctxs else []),
                                    *(["ground_truths"] if cut_gts else [])})
    if trace_id is None and span_id is None:
        tid, sid = new_ids()
    else:
        tid = new_trace_id() if trace_id is None else check_id(trace_id, 32, "trace_id")
        sid = new_span_id() if span_id is None else check_id(span_id, 16, "span_id")
    end_ns = None
    if session_id is not None or user_id is not None or scope is not None:
        for name, value in (("session_id", session_id), ("user_id", user_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        if scope is not None:
            session_id, user_id = session_id or scope.session_id, user_id or scope.user_id
        # a turn is dated when it was logged (not when the writer stored it): turns logged
        # back to back keep their order in the session
        session_id, user_id = session_id or None, user_id or None
        if session_id:
            end_ns = time.time_ns()
    return _new_record(tid, sid, query, answer, ctxs, gts, md, session_id, user_id, end_ns,
                       "manual"), cut_ctxs + cut_gts


def _check_sequence(name: str, seq: Any) -> None:
    if seq is None or isinstance(seq, (str, bytes, Mapping)) or not isinstance(seq, Iterable):
        got = "a single str" if isinstance(seq, str) else type(seq).__name__
        raise TypeError(f"{name} must be a sequence (list or tuple), not {got}")


def _plain_strs(seq: Any) -> tuple[str, ...] | None:
    """``seq`` as a tuple when it is a list or tuple of at most :data:`MAX_LOG_CONTEXTS`
    items, each a plain ``str``, of at most :data:`MAX_LOG_CONTEXT_CHARS` characters in all
    (nothing to check, nothing to drop: what :func:`_bounded` would keep); else None."""
    t = type(seq)
    if t is tuple:
        items = seq
    elif t is list:
        items = tuple(seq)  # (a snapshot: the caller's list may change on another thread)
    else:
        return None
    if len(items) > MAX_LOG_CONTEXTS:
        return None
    for x in items:
        if type(x) is not str:
            return None
    if sum(map(len, items)) > MAX_LOG_CONTEXT_CHARS:
        return None
    return items


def _check_ground_truth(g: Any, i: int) -> str:
    if not isinstance(g, str):
        raise TypeError(f"ground_truths[{i}] must be a str, got {type(g).__name__}")
    return g


def _text_of(item: Any) -> str:
    return item if isinstance(item, str) else str(getattr(item, "text", ""))


def _bounded(items: Iterable[Any], check: Callable[[Any, int], Any]) -> tuple[list[Any], int]:
    """The first items of ``items`` within :data:`MAX_LOG_CONTEXTS` and
    :data:`MAX_LOG_CONTEXT_CHARS`, each checked; and how many were left out (counted without
    being checked: a list's length, else by iterating, which is cheap per item)."""
    kept: list[Any] = []
    chars = 0
    it = iter(items)
    seen = 0
    for i, item in enumerate(it):
        seen = i + 1
        if i >= MAX_LOG_CONTEXTS:
            break
        checked = check(item, i)
        chars += len(_text_of(checked))
        if chars > MAX_LOG_CONTEXT_CHARS:
            break
        kept.append(checked)
    if isinstance(items, Sized):
        return kept, len(items) - len(kept)
    return kept, seen - len(kept) + sum(1 for _ in it)


def _error_type(error: str | None) -> str | None:
    """``"ValueError: the user's text"`` → ``"ValueError"`` (capture off)."""
    if not isinstance(error, str):
        return None
    head = error.split(":", 1)[0].strip()
    return head if head.replace(".", "").replace("_", "").isalnum() else "error"


def _redact_tree(value: Any, redact: Callable[[str], str] | None, depth: int) -> Any:
    if isinstance(value, str):
        return redact(value) if redact is not None else f"<redacted: {len(value)} chars>"
    if depth >= 32:
        return "<redacted>"
    if isinstance(value, Mapping):
        return {k: _redact_tree(v, redact, depth + 1) for k, v in list(value.items())}
    if isinstance(value, (list, tuple)):
        return [_redact_tree(v, redact, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _redact_tree(repr(value)[:200], redact, depth)


class Drops:
    """What ``log_record`` dropped beyond its bounds (:attr:`count`, for ``stats()``), logged
    at most once a minute (a loop of huge records logs once). Any thread."""

    def __init__(self) -> None:
        #: contexts and ground truths dropped so far
        self.count = 0
        self._lock = threading.Lock()
        self._logged_at = -1e9

    def note(self, dropped: int, record_id: str) -> None:
        with self._lock:
            self.count += dropped
            total = self.count
            now = time.monotonic()
            due = now - self._logged_at >= 60.0
            if due:
                self._logged_at = now
        if due:
            log.warning("tracescore log_record: %d contexts/ground truths beyond the bounds "
                        "(%d items, %d characters) were dropped from record %s (%d so far, "
                        "stats()['contexts_dropped'])", dropped, MAX_LOG_CONTEXTS,
                        MAX_LOG_CONTEXT_CHARS, record_id, total)
