"""The metric interface.

A metric is a callable over one frozen :class:`~tracescore.record.RagRecord` that returns a
:class:`~tracescore.score.Score` (or several, for metrics with sub-scores such as ROUGE), or an
awaitable of those. Configured metrics are small classes: ``__init__`` takes the options,
``__call__`` does the work. The scoring worker, not the metric, handles timing, exceptions
(turned into error scores with the reason) and missing inputs (skipped with the reason).

Metrics run on the scoring worker, never on the app's request path. A local metric's
``__call__`` runs in a worker thread and may block on CPU; a judge metric's ``__call__`` returns
an awaitable and must not block the event loop.

What ``__call__`` returns is checked (:func:`check_output`; every subclass's ``__call__`` is
wrapped when the class is defined): Scores named by the metric's own :meth:`Metric.names` only.
Anything else — a bare number, None, a Score named for another metric — becomes an error score
for each of the metric's names, with the reason, instead of a row under a foreign name (and
none under its own) or a value nobody labelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar, Literal, Union

from ..record import RagRecord
from ..score import Score, label_for

MetricOutput = Union[Score, Sequence[Score]]
Kind = Literal["local", "judge"]


class Metric:
    """Base class for configured metrics. Subclasses set the class attributes and ``__call__``.

    Class attributes:
      name: snake_case, used in the API, the database, span attributes and the CLI.
      version: bump when the formula changes; part of the job idempotency key.
      requires: record inputs the metric needs (``query``, ``contexts``, ``answer``,
        ``ground_truths``); a record lacking one is skipped with a reason, not scored 0.
        A record whose answer stream the client cut off (``complete=False``) lacks a complete
        answer: metrics requiring ``answer`` are skipped ("answer cut off"), the others score
        it (:meth:`~tracescore.record.RagRecord.missing`; docs/metrics.md).
      uses: inputs the metric reads when present but can do without; when one arrives later
        (a reference through ``add_ground_truth``) the record is scored again.
      kind: ``"local"`` (pure computation) or ``"judge"`` (calls an LLM judge).
      score_names: the names of the scores it emits (default: ``(name,)``).
      higher_is_better: direction used for pass/fail labels and "worst records" in reports;
        None for a metric with no better direction (e.g. "did the app refuse?").
      value_range: (low, high) of the values it emits, when its scale is bounded (e.g.
        ``(0.0, 1.0)``); None (default): not declared. Human labels of its scores must lie
        inside it (:func:`tracescore.labels.label_value`).
      binary: the metric only ever emits 0 or 1 (a yes/no check); reports show the share of
        1s ("rate", "n yes / n") instead of percentiles. Instances may override it.
      description: one line for ``--help``, docs and the report.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    requires: ClassVar[frozenset[str]] = frozenset()
    uses: ClassVar[frozenset[str]] = frozenset()
    kind: ClassVar[Kind] = "local"
    higher_is_better: ClassVar[bool | None] = True
    description: ClassVar[str] = ""
    score_names: ClassVar[tuple[str, ...]] = ()
    #: A costly metric's own default sample rate (used unless ``sample_rates`` names it).
    default_sample_rate: ClassVar[float | None] = None
    #: (low, high) of the values emitted, or None (not declared): see the class docstring.
    value_range: ClassVar[tuple[float, float] | None] = None
    #: A pure local metric that takes well under a millisecond on a record of up to this
    #: many characters (answer, references, and the query/contexts when it reads them) may
    #: be scored by the background writer as it stores the record (docs/metrics.md,
    #: "Scores on write"); 0: always by the scoring worker. Declared in the module that
    #: defines the metric's ``__call__``.
    on_write_chars: ClassVar[int] = 0

    #: pass/fail threshold; instances may override it through ``__init__``.
    threshold: float | None = 0.5
    #: values are only 0 or 1 (see the class docstring); instances may override it.
    binary: bool = False
    #: Top-level packages :meth:`prepare` imports (``("rouge_score", "nltk")``): the modules
    #: of a failed attempt are forgotten before the next one (:mod:`.ready`).
    libraries: ClassVar[tuple[str, ...]] = ()

    def prepare(self) -> None:
        """Import and build what ``__call__`` needs (libraries, tokenizers, tables).

        Called once per instance before its first call, under one process-wide lock
        (:func:`tracescore.metrics.ready.ensure_ready`), so no two threads import at once; a
        ``prepare`` that raises is tried again (``ATTEMPTS`` times, then at the next record),
        never remembered as failed. Default: nothing to prepare."""

    def names(self) -> tuple[str, ...]:
        return self.score_names or (self.name,)

    def result(
        self,
        value: float,
        explanation: str | None = None,
        *,
        name: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> Score:
        """Build an ok :class:`Score` labelled against this metric's threshold."""
        return Score(
            name=name or self.name,
            value=float(value),
            label=label_for(float(value), self.threshold, self.higher_is_better is not False),
            explanation=explanation,
            metric=self.name,
            metric_version=self.version,
            details=details or {},
        )

    def __call__(self, record: RagRecord) -> MetricOutput | Awaitable[MetricOutput]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"


def check_output(metric: Metric, out: Any) -> Any:
    """``out`` when it is a Score or a non-empty list of Scores named by ``metric.names()``
    (and not attributed to another metric); else one error score per name of ``metric``
    saying what was wrong. A bare number is not a Score: ``self.result(value, explanation)``
    makes one (with its label against the threshold)."""
    names = metric.names()
    items = [out] if isinstance(out, Score) else out if isinstance(out, (list, tuple)) \
        else None
    reason: str | None = None
    if items is None:
        reason = (f"metric {metric.name!r} returned {_what(out)}, expected a Score "
                  "(return self.result(value, explanation))")
    elif not items:
        reason = f"metric {metric.name!r} returned no score"
    else:
        for s in items:
            if not isinstance(s, Score):
                reason = (f"metric {metric.name!r} returned {_what(s)} in its list, "
                          "expected a Score")
            elif s.name not in names or s.metric not in (None, metric.name):
                foreign = s.name if s.name not in names else s.metric
                reason = (f"metric {metric.name!r} returned a score named {foreign!r}; it "
                          f"emits only {', '.join(map(repr, names))} (declare more in "
                          "score_names)")
            if reason:
                break
    if reason is None:
        return out
    return [Score.failed(n, reason, metric=metric.name, metric_version=metric.version)
            for n in names]


def _what(x: Any) -> str:
    text = repr(x)
    return f"{type(x).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


