"""A record offered to the writer unbuilt (issue 33, "the request path"): the app's thread
decides, the writer builds (:meth:`Tracescore.offer_unbuilt`, :meth:`Tracescore.submit` with
``finish``; the buffer and writer are :mod:`.queue`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._internal.errors import record_internal_error
from ._internal.losses import Losses
from ._internal.validate import hot_reason
from .record import RagRecord
from .sampling import Decision

__all__ = ["LazyRecord"]


class LazyRecord:
    """A record offered without being built: an unsampled request's
    (:meth:`Tracescore.offer_unbuilt`; stored like a record alone, its decision made again
    from its trace id, :class:`~tracescore.store.batch.Pairs`), or a sampled one's whole
    record (:meth:`Tracescore.submit` with ``finish``: ``partial`` is what its decision and
    span hold were made from, never stored). The writer builds it where it takes it from the
    buffer."""

    __slots__ = ("ts", "build", "full", "decision", "partial")

    def __init__(self, ts: Any, build: Callable[[bool], RagRecord], full: bool,
                 decision: Decision | None = None, partial: RagRecord | None = None) -> None:
        self.ts = ts
        self.build = build
        self.full = full
        self.decision = decision
        self.partial = partial

    def resolve(self, losses: Losses) -> Any:
        """The record (a pair with its decision, for a sampled one), prepared (redaction) and
        checked; None when it cannot be built or is not a record to store (counted by
        reason, as :meth:`Tracescore.submit` counts)."""
        try:
            record = self.ts.prepare(self.build(self.full))
        except Exception as exc:
            record_internal_error("queue.build_record", exc)
            losses.add("record_build_failed", 1, f"{type(exc).__name__}: {exc}")
            if self.partial is not None:  # no scores will come: the span is not held
                self.ts.recount_hold(self.partial, None, self.decision)
            return None
        bad = hot_reason(record)
        if bad is not None:
            losses.add(bad, 1, f"{record!r:.200}")
            return None
        if self.decision is None:
            return record
        if self.partial is not None:
            self.ts.recount_hold(self.partial, record, self.decision)
        return (record, self.decision)
