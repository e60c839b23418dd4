"""Human labels at the public API: what scale a score's label is in, the checks a label gets
before anything is queued or stored, and the writer-queue item that carries it.

A label is a person's verdict on one score of one record, in the score's own scale: 1/0 for a
yes/no metric (``Metric.binary``), else a finite number (inside the metric's ``value_range``
when it declares one — the built-in metrics do; a custom metric known only from the database's
``metrics`` table has no declared range there, so only finiteness is checked). It is given by
record id (``TRACE-SPAN``, as ``tracescore show`` prints) or by trace id (then it is about the
trace's newest record at labelling time) and bound to the metric version of that record's
stored score of that name (see :mod:`tracescore.store.labels`).

One rule for every way in (the API, ``tracescore label --import`` JSONL and CSV): a yes/no
label is a bool (numpy's too), an integer 0/1, the text ``yes``/``no``/``y``/``n`` or a number
text ``1``/``0``; a numeric label is any real number that is not a bool (int, float, numpy
scalars: ``numbers.Real``) or a text holding one (``"0.4"``, as CSV has only text).

- :meth:`tracescore.client.Tracescore.add_label` — in an app: checks, then queues a
  :class:`LabelUpdate` for the background writer (never blocks the request path).
- :func:`add_label` (``tracescore.add_label``) — in a script, a notebook or the CLI: checks,
  then writes to the database at once (blocking).
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .updates import FeedbackUpdate

__all__ = ["LabelUpdate", "Scale", "add_label", "check_text", "label_target", "label_value",
           "scale_for"]

#: words a yes/no label may be given as (case-insensitive)
YES_NO = {"yes": 1.0, "y": 1.0, "no": 0.0, "n": 0.0}


@dataclass(frozen=True, slots=True)
class LabelUpdate(FeedbackUpdate):
    """A human label on the writer queue: it rides the queue as feedback does (ordered after
    the records queued before it, kept in memory while the database is unavailable).
    ``name`` is the labelled score's name; ``label`` is unused (None)."""

    annotator: str = ""
    source: str = "manual"
    #: the record labelled; None: the trace's newest record when the writer stores it
    record_id: str | None = None

    def apply(self, store: Any) -> None:
        """Write it (the writer thread)."""
        store.add_label(self.trace_id, self.name, self.value, annotator=self.annotator,
                        comment=self.comment, source=self.source, created_at=self.created_at,
                        record_id=self.record_id)


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


def _is_bool(value: Any) -> bool:
    """A Python or numpy bool (numpy not imported: recognised by its type)."""
    t = type(value)
    return isinstance(value, bool) or (t.__module__ == "numpy" and t.__name__ in ("bool_",
                                                                                    "bool"))


def _number_text(value: str) -> float | None:
    try:
        return float(value.strip())
    except ValueError:
        return None


def label_value(value: Any, scale: Scale) -> float:
    """``value`` as stored (1.0/0.0 for yes/no, else the number); TypeError/ValueError with
    what is accepted (the rule: module docstring)."""
    if scale.binary:
        said = (f"{scale.name!r} is a yes/no score: label it True/False, 1/0 or 'yes'/'no', "
                f"got {value!r:.40}")
        if _is_bool(value):
            return 1.0 if value else 0.0
        v: float | None
        if isinstance(value, str):
            v = YES_NO.get(value.strip().lower())
            if v is None:
                v = _number_text(value)
        elif isinstance(value, numbers.Real):
            v = float(value)
        else:
            raise TypeError(f"{said} ({type(value).__name__})")
        if v not in (0.0, 1.0):
            raise ValueError(said)
        return float(v)
    if isinstance(value, str):
        v = _number_text(value)
        if v is None:
            raise ValueError(f"{scale.name!r} is a numeric score: label it with "
                             f"{scale.describe()}, got {value!r:.40}")
    elif _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{scale.name!r} is a numeric score: label it with {scale.describe()},"
                        f" got {type(value).__name__} {value!r:.40}")
    else:
        v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"a label must be a finite number, got {value!r:.40}")
    if (scale.low is not None and v < scale.low) or (scale.high is not None and v > scale.high):
        raise ValueError(f"{scale.name!r} takes {scale.describe()}, got {value!r:.40}")
    return v


def label_target(ident: Any) -> tuple[str, str | None]:
    """(trace id, record id or None) of what a label is about: a trace id (32 hex) or a
    record id ``TRACE-SPAN`` (32 hex, '-', 16 hex; as ``tracescore show`` prints it)."""
    from ._internal.validate import check_id

    if isinstance(ident, str) and "-" in ident:
        trace, _, span = ident.partition("-")
        try:
            trace, span = check_id(trace, 32, "trace_id"), check_id(span, 16, "span_id")
        except ValueError:
            raise ValueError(f"a label's target is a trace id (32 hex characters) or a record "
                             f"id TRACE-SPAN (32 + 16 hex characters), got {ident!r:.80}"
                             ) from None
        return trace, f"{trace}-{span}"
    return check_id(ident, 32, "trace_id"), None


def check_text(value: Any, what: str) -> str | None:
    """``value`` if it is a str or None; else TypeError."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be a str or None, got {type(value).__name__}")
    return value


def declared_scales(store: Any) -> dict[str, tuple[str, bool]]:
    """Score name → (metric, yes/no) from the ``metrics`` table (what configured processes
    declared: a custom metric unknown to this process)."""
    import json

    from .store.labels import metric_scales

    out: dict[str, tuple[str, bool]] = {}
    for metric, names, binary in metric_scales(store):
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
    """Store a human label of score ``score_name`` on a record in ``db`` (default
    ``$TRACESCORE_DB``, else ``tracescore.db``), at once. Blocking: for scripts, notebooks
    and labelling tools — in a running app use ``ts.add_label`` (queued, never blocks).

    ``trace_id``: a record id ``TRACE-SPAN`` (the record labelled), or a trace id (its newest
    record). ``value`` is in the score's own scale (module docstring: the rule). A new label
    by the same ``annotator`` on the same record replaces their earlier one. Raises
    TypeError/ValueError on a bad id, score name or value, FileNotFoundError when the SQLite
    file ``db`` does not exist (no empty database is made).
    """
    from .store import open_store

    trace, record_id = label_target(trace_id)
    check_text(annotator, "annotator")
    check_text(comment, "comment")
    target = db if db is not None else os.environ.get("TRACESCORE_DB") or "tracescore.db"
    if "://" not in str(target) and not os.path.exists(target):
        raise FileNotFoundError(f"database not found: {os.fspath(target)} (labels go into the "
                                "database holding the scored records)")
    store = open_store(target)
    try:
        v = label_value(value, scale_for(score_name, (), declared_scales(store)))
        store.add_label(trace, score_name, v, annotator=annotator, comment=comment,
                        source=source, created_at=time.time(), record_id=record_id)
    finally:
        store.close()
