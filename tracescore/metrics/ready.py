"""A metric's libraries, imported once, under one lock, before any concurrent use.

Local metrics import their libraries at their first call (nltk's package ``__init__`` alone
loads scipy.stats; an app that only captures never pays for it). The scoring worker runs local
metrics on several pool threads, and the writer thread scores cheap ones on write: their first
calls used to import nltk and rouge-score from several threads at once. Python's per-module
import locks break a cross-thread cycle by handing one thread a half-initialised module, so
under load the first imports failed (``cannot import name 'RougeScorer' from partially
initialized module``), and a library module that caught such an ``ImportError`` stayed
crippled for the life of the process (issue 31: every ROUGE score of the process lost).

So a metric with libraries declares a :meth:`~tracescore.metrics.base.Metric.prepare` that
imports (and builds) what it needs, and every caller goes through :func:`call_ready`:

- the first call of each metric instance runs ``prepare`` under one process-wide lock
  (:data:`IMPORT_LOCK`, shared by every import tracescore makes lazily, so two metrics that
  share nltk never import it at once); later calls cost one attribute read;
- a ``prepare`` that fails is tried again at once (``ATTEMPTS`` in all), after the modules of
  the metric's ``libraries`` that the failed attempt left in ``sys.modules`` are forgotten, so
  the next attempt imports them afresh; still failing, it raises (the record gets an error score
  with the reason) and is tried again at the next call: a failed import is never remembered.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..record import RagRecord
    from .base import Metric

log = logging.getLogger("tracescore")

#: Every lazy import of a metric library in tracescore happens while holding this lock.
IMPORT_LOCK = threading.RLock()
#: attempts of one ``prepare`` per call before the call fails
ATTEMPTS = 3
_READY_ATTR = "_tracescore_ready"


def is_ready(metric: Metric) -> bool:
    return bool(getattr(metric, _READY_ATTR, False))


def ensure_ready(metric: Metric) -> None:
    """Run ``metric.prepare()`` once (any thread; blocks while another thread prepares a
    metric). Raises the last attempt's exception when all ``ATTEMPTS`` fail."""
    if getattr(metric, _READY_ATTR, False):
        return
    with IMPORT_LOCK:
        if getattr(metric, _READY_ATTR, False):
            return
        libraries = tuple(getattr(metric, "libraries", ()) or ())
        last: Exception | None = None
        for attempt in range(1, ATTEMPTS + 1):
            before = set(sys.modules)
            try:
                metric.prepare()
            except Exception as exc:
                last = exc
                forgotten = _forget_new_modules(before, libraries)
                log.warning("tracescore: metric %r could not load its libraries (attempt %d "
                            "of %d%s): %s: %s", metric.name, attempt, ATTEMPTS,
                            f"; {forgotten} half-imported modules forgotten" if forgotten
                            else "", type(exc).__name__, exc)
                continue
            _mark_ready(metric)
            return
        assert last is not None
        raise last


def call_ready(metric: Metric, record: RagRecord) -> Any:
    """``metric(record)`` after :func:`ensure_ready` (what the worker and the writer call)."""
    if not getattr(metric, _READY_ATTR, False):
        ensure_ready(metric)
    return metric(record)


def _mark_ready(metric: Metric) -> None:
    try:
        object.__setattr__(metric, _READY_ATTR, True)
    except Exception:  # (a metric with __slots__ or a frozen one: prepared again each call,
        pass           # still under the lock, which is cheap once its imports are done)


def _forget_new_modules(before: set[str], libraries: tuple[str, ...]) -> int:
    """Drop from ``sys.modules`` the modules of ``libraries`` (top-level package names) that
    were not there ``before``: what a failed import attempt left half-done. Modules of other
    packages are left alone (another thread of the app may have imported them meanwhile)."""
    if not libraries:
        return 0
    gone = 0
    for name in [n for n in list(sys.modules) if n not in before]:
        if name.partition(".")[0] in libraries:
            sys.modules.pop(name, None)
            gone += 1
    return gone
