"""Updates to a record that arrive after it: ground truths and a user's feedback or label.

Plain values, queued beside records (:class:`tracescore.queue.RecordQueue`) and written by the
queue's writer; the labels module (:mod:`tracescore.labels`) extends :class:`FeedbackUpdate`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FeedbackUpdate", "GroundTruthUpdate"]


@dataclass(frozen=True, slots=True)
class GroundTruthUpdate:
    trace_id: str
    ground_truths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FeedbackUpdate:
    """A user's verdict on a trace: ``value`` in [0, 1] (thumbs up = 1) and/or a label."""

    trace_id: str
    name: str
    value: float | None
    label: str | None
    comment: str | None
    created_at: float
