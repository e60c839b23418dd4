"""Scores on write (:class:`ScoresOnWrite`, a part the scoring worker holds): the background
writer scores a sampled record's cheap local metrics itself, as it stores the record, in the
same transaction (:meth:`~tracescore.store.sqlite.Store.write_batch` ``scored=``).

Why: for a metric that takes tens of microseconds, the worker's round trip — a lease
transaction, the record read back and decoded, a pool thread, a completion transaction — cost
the process ten times the metric itself (issue 19: ~500 µs of the scorer loop per sampled
LangChain request, the largest part of tracescore's CPU beside the app). The writer holds the
record already and writes a transaction anyway.

What may be scored on write, so that the writer — which the app's buffer waits on — stays
fast and the worker's guarantees hold for everything else:

- a plain local metric whose class opts in with ``on_write_chars`` (declared on the class that
  defines its ``__call__``: a subclass or a patched method elsewhere does not inherit the
  opt-in), that has run once in this process (its first call imports its libraries), while the
  record's text the metric reads is at most ``on_write_chars`` characters (the cost of the
  built-in ones grows with it, ROUGE's with its square);
- while the worker is alive, the writer keeps up (no backlog beyond one batch) and this batch
  has spent less than ``on_write_budget_s`` on metrics.

A metric call slower than ``on_write_slow_s`` takes that metric off the writer for the life of
the process (the worker scores it again, with its timeout). A metric that raises gets an error
score with the reason, as in the worker. Anything else — judge metrics, coroutines, other
local metrics, a busy writer — goes to the worker as a job, as before. The job row is stored
``done`` after one run, so the database, the reports and exactly-once read the same either
way; after the commit the scores go to the exporter and the span attacher as the worker's do.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context

from .._internal.errors import record_internal_error
from ..judge.base import RetryLater
from ..metrics.base import Metric
from ..metrics.ready import call_ready
from ..record import CONTEXTS, QUERY, RagRecord
from ..score import Score
from ..store import NewJob
from .calls import MetricAborted, _aborted

log = logging.getLogger("tracescore")


class ScoresOnWrite:
    """The writer thread's scorer of cheap local jobs (the queue's
    :class:`~tracescore.write_port.OnWriteScorer`), held by the scoring worker.

    Explicit inputs: ``metrics`` (by name); ``warm``, the names of the metrics that have run
    once in this process (shared with the worker, which fills it); ``convert(metric, result)``
    turns a call's ``(ok, out, ms)`` into clean scores as the worker does (may raise
    ``RetryLater``); ``done(record_id, scores, refs)`` does the worker's bookkeeping of a
    stored job (failing metrics, exporter, span attacher); ``live()``: the worker is alive and
    not stopping; ``attached``: scores go to a span attacher (their ``delivery`` waits for it).
    """

    def __init__(self, metrics: Mapping[str, Metric], *, warm: set[str],
                 convert: Callable[[Metric, tuple[bool, Any, float]], list[Score]],
                 done: Callable[[str, Sequence[Score], Sequence[Any]], None],
                 live: Callable[[], bool], attached: bool) -> None:
        self.metrics = metrics
        self.warm = warm
        self.convert = convert
        self.done = done
        self.live = live
        self.attached = attached
        #: False: every job goes to the worker (the writer scores nothing)
        self.enabled = True
        #: a batch's metrics scored on write stop after this long (the rest become jobs)
        self.budget_s = 0.01
        #: a metric call this slow takes the metric off the writer for good
        self.slow_s = 0.05
        self.scored = 0
        self.errors = 0
        #: metric name -> its character limit on write (0: never), decided once
        self._chars: dict[str, int] = {}
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child (the worker's after-fork): the lock may have been held."""
        self._lock = threading.Lock()

    @property
    def delivery(self) -> str | None:
        """The ``delivery`` of scores stored on write (as the worker's completions)."""
        return None if self.attached else "none"

    def open(self) -> bool:
        """Whether the writer may score anything now (the worker is alive and not stopping)."""
        return self.enabled and self.live()

    def _limit(self, name: str) -> int:
        limit = self._chars.get(name)
        if limit is None:
            limit = _declared_limit(self.metrics.get(name))
            self._chars[name] = limit
        return limit if name in self.warm else 0

    def score_now(self, record: RagRecord, job: NewJob) -> list[Score] | None:
        """``job``'s scores, computed here (writer thread), or None: it goes to the worker."""
        limit = self._limit(job.metric)
        if limit <= 0:
            return None
        metric = self.metrics[job.metric]
        if _text_size(metric, record, limit) > limit:
            return None
        token = otel_context.attach(  # (as on the worker: nothing a metric calls is traced)
            otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
        t0 = time.perf_counter()
        try:
            try:
                out: Any = call_ready(metric, record)
                ok = True
            except Exception as exc:
                out, ok = exc, False
            except BaseException as exc:  # noqa: BLE001 - SystemExit and co. from the metric
                out, ok = MetricAborted(_aborted(exc)), False
        finally:
            otel_context.detach(token)
        ms = (time.perf_counter() - t0) * 1000
        if ms > self.slow_s * 1000:
            self._chars[job.metric] = 0
            log.info("tracescore: metric %r took %.0f ms on the writer; the worker scores it "
                     "from now on", job.metric, ms)
        try:  # (the worker's own conversion: normalised, or an error score with the reason)
            return self.convert(metric, (ok, out, ms))
        except RetryLater:
            return None  # the worker defers it
        except Exception as exc:  # ours, or the app's redact: the worker tries it as a job
            record_internal_error("worker.score_on_write", exc)
            return None

    def stored(self, record_id: str, scores: Sequence[Score],
               refs: Sequence[tuple[int, Score]]) -> None:
        """A job scored on write is stored (``refs``): counted, and handed to the worker's
        bookkeeping (exporter, span attacher), as the worker's own jobs are."""
        with self._lock:
            self.scored += 1
            self.errors += sum(1 for s in scores if s.status == "error")
        self.done(record_id, scores, refs)


def _declared_limit(metric: Metric | None) -> int:
    """``on_write_chars`` of a plain local metric whose class, its ``__call__`` and the
    declaration of ``on_write_chars`` all come from one module, else 0 (a subclass or a
    patched method elsewhere is not known to be cheap)."""
    if metric is None or metric.kind != "local":
        return 0
    cls = type(metric)
    owner = next((b for b in cls.__mro__ if "on_write_chars" in b.__dict__), None)
    limit = getattr(cls, "on_write_chars", 0)
    call = next((b.__dict__["__call__"] for b in cls.__mro__ if "__call__" in b.__dict__), None)
    if owner is None or type(limit) is not int or limit <= 0 \
            or inspect.iscoroutinefunction(call) \
            or not cls.__module__ == owner.__module__ == getattr(call, "__module__", None):
        return 0
    return limit


def _text_size(metric: Metric, record: RagRecord, limit: int) -> int:
    """The characters of ``record`` that ``metric`` reads (stops counting past ``limit``)."""
    n = len(record.answer or "")
    for g in record.ground_truths:
        n += len(g)
    reads = metric.requires | metric.uses
    if QUERY in reads:
        n += len(record.query or "")
    if CONTEXTS in reads:
        for c in record.contexts:
            n += len(c.text)
            if n > limit:
                break
    return n
