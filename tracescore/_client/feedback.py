"""What arrives after a run (:class:`Feedback`, a part :class:`tracescore.client.Tracescore`
holds; its documented methods delegate here and carry these docstrings): ground truths, user
feedback and human labels, by trace id or LangChain run id. Each call checks its input and
queues the update for the writer; none blocks the request path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from .._internal.validate import (
    check_id,
)
from ..metrics.base import Metric
from ..queue import FeedbackUpdate, GroundTruthUpdate, RecordQueue
from ..runs import RunIds


class Feedback:
    """Ground truths, feedback and labels of a traced run. Explicit inputs: the client's
    ``run_ids`` (app run id → trace id), ``queue`` (the updates go to its writer),
    ``metrics`` (the scales of labels), ``capture_content`` and ``redact``."""

    def __init__(self, run_ids: RunIds, queue: RecordQueue, metrics: Sequence[Metric], *,
                 capture_content: bool, redact: Callable[[str], str] | None) -> None:
        self.run_ids = run_ids
        self.queue = queue
        self.metrics = metrics
        self.capture_content = capture_content
        self.redact = redact

    def trace_id_of(self, run_id: str | UUID) -> str | None:
        """The trace id of the root run with this LangChain run id (``config["run_id"]``), if
        it is among the process's most recent 10,000 root runs."""
        return self.run_ids.resolve(run_id)

    def trace_id(self, trace_id: str | UUID) -> str:
        """A 32-hex trace id, or an app run id (UUID) mapped to its trace id."""
        if isinstance(trace_id, UUID) or (isinstance(trace_id, str) and len(trace_id) == 36):
            found = self.run_ids.resolve(trace_id)
            if found is None:
                raise ValueError(f"unknown run id {str(trace_id)!r}: no recent root run had it "
                                 "(pass the run's 32-hex trace id instead)")
            return found
        if isinstance(trace_id, str):
            found = self.run_ids.resolve(trace_id)  # a run id written as 32 hex digits
            if found is not None:
                return found
        return check_id(trace_id, 32, "trace_id (or a run id, a UUID)")

    def add_ground_truth(self, trace_id: str | UUID, ground_truths: Sequence[str]) -> None:
        """Attach reference answers to a trace's records; schedules the reference metrics.

        ``trace_id``: the 32-hex trace id (``ts.run()``'s ``scope.trace_id``), or the run id
        the app gave the run (``config={"run_id": uuid}``). Non-blocking: the update is
        applied by the writer, after records already queued; a root span still held for its
        scores waits for the jobs this schedules too.
        """
        trace_id = self.trace_id(trace_id)
        if isinstance(ground_truths, str) or not all(isinstance(g, str) for g in ground_truths):
            raise TypeError("ground_truths must be a sequence of str")
        if not self.capture_content:
            return
        gts = tuple(self.redact(g) if self.redact else g for g in ground_truths)
        self.queue.put(GroundTruthUpdate(trace_id.lower(), gts), record=False)

    def add_feedback(
        self,
        trace_id: str | UUID,
        value: float | bool | str | None = None,
        *,
        label: str | None = None,
        name: str = "user",
        comment: str | None = None,
    ) -> None:
        """Record a user's verdict on a trace (thumbs up/down, a score in [0, 1], a label).

        ``value``: ``True``/``"up"``/``"good"`` → 1.0, ``False``/``"down"``/``"bad"`` → 0.0, or
        a number in [0, 1]. Negative feedback (value < 0.5) forces sampling: every configured
        metric scores that trace's records even if the sampler skipped them. Stored in the
        ``feedback`` table; ``tracescore calibrate`` compares judge metrics with it.
        Non-blocking (applied by the writer).
        """
        import time

        trace_id = self.trace_id(trace_id)
        if comment is not None and not isinstance(comment, str):
            raise TypeError(f"comment must be a str or None, got {type(comment).__name__}")
        v: float | None
        if value is None:
            v = None
        elif isinstance(value, bool):
            v = 1.0 if value else 0.0
        elif isinstance(value, str):
            words = {"up": 1.0, "good": 1.0, "yes": 1.0, "thumbs_up": 1.0, "positive": 1.0,
                     "down": 0.0, "bad": 0.0, "no": 0.0, "thumbs_down": 0.0, "negative": 0.0}
            if value.lower() not in words:
                raise ValueError(f"feedback value {value!r}: use a number in [0, 1], a bool, "
                                 f"or one of {sorted(words)}")
            v = words[value.lower()]
        elif isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0:
            v = float(value)
        else:
            raise ValueError(f"feedback value must be in [0, 1], got {value!r}")
        if v is None and label is None:
            raise ValueError("feedback needs a value or a label")
        if not isinstance(name, str) or not name:
            raise ValueError("feedback name must be a non-empty str")
        if comment is not None:  # the user's own words: redacted, or not kept at all
            comment = (None if not self.capture_content
                       else self.redact(comment) if self.redact is not None else comment)
        self.queue.put(FeedbackUpdate(trace_id.lower(), name, v, label, comment, time.time()),
                       record=False)

    def add_label(self, trace_id: str | UUID, score_name: str, value: Any,
                  annotator: str | None = None, comment: str | None = None) -> None:
        """Record a person's label of score ``score_name`` on a trace (docs/trust.md).

        ``value`` in the score's own scale: True/False, 1/0 or ``"yes"``/``"no"`` for a yes/no
        metric, else a finite number (inside the metric's ``value_range`` if it declares
        one). Bound to the metric version of the trace's stored score of that name. A new
        label by the same ``annotator`` replaces their earlier one. Bad input (a score no
        configured or registered metric emits, a non-finite or wrong-typed value) raises
        here; the write itself is queued for the background writer, like
        :meth:`add_feedback` (never blocks). ``comment`` is redacted, or dropped with
        ``capture_content=False``.
        """
        import time

        from ..labels import LabelUpdate, check_text, label_value, scale_for

        trace_id = self.trace_id(trace_id)
        from ..sessions.metrics import session_score_names

        # (the session scores this process's sessions can have: labels on them too)
        sessions = session_score_names({n: m.higher_is_better for m in self.metrics
                                        for n in m.names()})
        v = label_value(value, scale_for(score_name, self.metrics,
                                         declared={k: (k, False) for k in sessions}))
        annotator = check_text(annotator, "annotator")
        comment = check_text(comment, "comment")
        if comment is not None:  # the annotator's own words: redacted, or not kept at all
            comment = (None if not self.capture_content
                       else self.redact(comment) if self.redact is not None else comment)
        self.queue.put(LabelUpdate(trace_id.lower(), score_name, v, None, comment, time.time(),
                                   annotator or ""), record=False)
