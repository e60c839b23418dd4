"""Human labels at the public API: what scale a score's label is in, the checks a label gets
before anything is queued or stored, and the writer-queue item that carries it.

A label is a person's verdict on one score of one trace, in the score's own scale: 1/0 for a
yes/no metric (``Metric.binary``), else a finite number (inside the metric's ``value_range``
when it declares one). It is bound to the metric version of the trace's stored score of that
name (looked up when the label is written, see :mod:`tracescore.store.labels`).

- :meth:`tracescore.client.Tracescore.add_label` — in an app: checks, then queues a
  :class:`LabelUpdate` for the background writer (never blocks the request path).
- :func:`add_label` (``tracescore.add_label``) — in a script, a notebook or the CLI: checks,
  then writes to the database at once (blocking).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .queue import FeedbackUpdate

__all__ = ["LabelUpdate", "Scale", "add_label", "check_text", "label_value", "scale_for"]

#: words a yes/no label may be given as (case-insensitive)
YES_NO = {"yes": 1.0, "y": 1.0, "no": 0.0, "n": 0.0}


@dataclass(frozen=True, slots=True)
class LabelUpdate(FeedbackUpdate):
    """A human label on the writer queue: it rides the queue as feedback does (ordered after
    the records queued before it, kept in memory while the database is unavailable).
    ``name`` is the labelled score's name; ``label`` is unused (None)."""

    annotator: str = ""
    source: str = "manual"

    def apply(self, store: Any) -> None:
        """Write it (the writer thread)."""
        store.add_label(self.trace_id, self.name, self.value, annotator=self.annotator,
                        comment=self.comment, source=self.source, created_at=self.created_at)


@dataclass(frozen=True, slots=True)
class Scale:
    """The scale of a score's labels."""

    name: str
    metric: str
    binary: bool
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        if self.binary:
            return "yes/no (True/False, 1/0, 'yes'/'no')"
        if self.low is not None and self.high is not None:
            return f"a number in [{self.low:g}, {self.high:g}]"
        return "a finite number"


def _of_metric(m: Any, name: str) -> Scale:
    rng = getattr(m, "value_range", None)
    low, high = (float(rng[0]), float(rng[1])) if rng is not None else (None, None)
    return Scale(name, str(m.name), bool(getattr(m, "binary", False)), low, high)


def scale_for(name: Any, metrics: Iterable[Any] = (),
              declared: Mapping[str, tuple[str, bool]] | None = None) -> Scale:
    """The scale of score ``name``: from the configured ``metrics`` first, then the metric
    registry, then ``declared`` (score name → (metric, yes/no), as the ``metrics`` table of the
    database records what other processes configured). Unknown everywhere → ValueError."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"score_name must be a non-empty str, got {name!r:.80}")
    metrics = list(metrics)
    for m in metrics:
        if name in m.names():
            return _of_metric(m, name)
    from .metrics import registry

    for key in [name, *(k for k in registry.available() if k != name)]:
        factory = registry._REGISTRY.get(key)
        if factory is None or name not in (getattr(factory, "score_names", ()) or (key,)):
            continue
        try:
            return _of_metric(registry.get(key), name)
        except Exception:  # a factory that needs options: its class still declares the rest
            return _of_metric(factory, name)
    if declared and name in declared:
        metric, binary = declared[name]
        return Scale(name, metric, binary)
    known = sorted({n for m in metrics for n in m.names()} | set(declared or ()))
    raise ValueError(f"unknown score name {name!r}: no configured or registered metric emits "
                     f"it (configured: {', '.join(known) or 'none'})")


def label_value(value: Any, scale: Scale) -> float:
    """``value`` as stored (1.0/0.0 for yes/no, else the number); TypeError/ValueError with
    what is accepted."""
    if scale.binary:
        if isinstance(value, bool):
            return 1.0 if value else 0.0
        if isinstance(value, str):
            v = YES_NO.get(value.strip().lower())
            if v is None:
                raise ValueError(f"{scale.name!r} is a yes/no score: label it True/False, 1/0 "
                                 f"or 'yes'/'no', got {value!r:.40}")
            return v
        if isinstance(value, (int, float)):
            if value in (0, 1):
                return float(value)
            raise ValueError(f"{scale.name!r} is a yes/no score: label it True/False, 1/0 or "
                             f"'yes'/'no', got {value!r}")
        raise TypeError(f"{scale.name!r} is a yes/no score: label it True/False, 1/0 or "
                        f"'yes'/'no', got {type(value).__name__}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{scale.name!r} is a numeric score: label it with {scale.describe()},"
                        f" got {type(value).__name__} {value!r:.40}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"a label must be a finite number, got {value!r}")
    if (scale.low is not None and v < scale.low) or (scale.high is not None and v > scale.high):
        raise ValueError(f"{scale.name!r} takes {scale.describe()}, got {value!r}")
    return v


def check_text(value: Any, what: str) -> str | None:
    """``value`` if it is a str or None; else TypeError."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be a str or None, got {type(value).__name__}")
    return value


def declared_scales(store: Any) -> dict[str, tuple[str, bool]]:
    """Score name → (metric, yes/no) from the ``metrics`` table (what configured processes
    declared: a custom metric unknown to this process)."""
    import json

    from .store.rollup import qmark

    out: dict[str, tuple[str, bool]] = {}
    for metric, names, binary in qmark(store).execute(
            "SELECT metric, score_names, is_binary FROM metrics").fetchall():
        try:
            score_names = json.loads(names or "[]") or [metric]
        except ValueError:
            score_names = [metric]
        for n in score_names:
            out[str(n)] = (str(metric), bool(binary))
    return out


def add_label(trace_id: str, score_name: str, value: Any, annotator: str | None = None,
              comment: str | None = None, *, db: str | os.PathLike[str] | None = None,
              source: str = "manual") -> None:
    """Store a human label of score ``score_name`` on trace ``trace_id`` in ``db`` (default
    ``$TRACESCORE_DB``, else ``tracescore.db``), at once. Blocking: for scripts, notebooks
    and labelling tools — in a running app use ``ts.add_label`` (queued, never blocks).

    ``value`` is in the score's own scale: True/False, 1/0 or ``"yes"``/``"no"`` for a yes/no
    metric, else a finite number. A new label by the same ``annotator`` replaces their
    earlier one. Raises TypeError/ValueError on a bad trace id, score name or value.
    """
    from ._internal.validate import check_id
    from .store import open_store

    trace_id = check_id(trace_id, 32, "trace_id")
    check_text(annotator, "annotator")
    check_text(comment, "comment")
    store = open_store(db if db is not None else
                       os.environ.get("TRACESCORE_DB") or "tracescore.db")
    try:
        v = label_value(value, scale_for(score_name, (), declared_scales(store)))
        store.add_label(trace_id, score_name, v, annotator=annotator, comment=comment,
                        source=source, created_at=time.time())
    finally:
        store.close()
