"""Evaluating monitors: each monitor's statistic, its anytime-valid verdict, its state.

One :class:`Evaluator` per database at a time (the lease in :mod:`.state`): ``tracescore
check`` (once), ``tracescore monitor`` / ``worker --monitors`` / ``init(monitors=...)`` (on a
schedule, :mod:`.runner`). An evaluation of a monitor:

1. **The window.** Time is cut into tumbling windows of the monitor's ``window``, anchored at
   the monitor's first evaluation t0: the first window is [t0 − window, t0 + window) (a first
   check sees the last window's history), then [t0 + (k−1)·window, t0 + k·window). Each new
   window starts a new sequential test with its share of α
   (:func:`.confseq.window_alpha_log`), so the probability of *any* false alert over the
   monitor's life stays ≤ α however often it is checked. A window with too few records to see
   the monitor's ``detect`` drop goes on into the next (:mod:`.sight`; at most 7 days); a
   window without a baseline keeps the test and its place in the schedule.
2. **The observations** are read incrementally, in order: the scores stored since the last
   evaluation (``(created_at, score_id)`` after the saved position, a few seconds behind now
   so a transaction still committing is not skipped), filtered by the monitor's segments.
   Each is turned into a number in [0, 1]: the score (clamped), a yes/no value, a "fail"
   label, or for a percentile ``pQ below t`` the indicator ``x < t`` (``pQ < t`` exactly when
   more than a share q of the values lie below t).
3. **The verdict** (``rule="anytime"``, the default): :class:`.confseq.ThresholdMonitor` or
   :class:`.confseq.BaselineMonitor` — ALERT when the window's confidence sequence lies wholly
   beyond the threshold (or the baseline's bound); WARNING when only the point estimate does,
   or when it crosses the monitor's ``warning`` level; NO_DATA with fewer than ``min_n``
   observations (the previous window's verdict is carried meanwhile). ``rule="fixed"`` is the
   peers' rule — the window's mean against the threshold, no interval — kept for comparison
   and documented as firing on noise. Pipeline counts (dropped records, backlog age, judge
   cost) are plain thresholds on the figure.
4. **The state**, with hysteresis: a worse state is taken at once; a better one only after
   ``hysteresis`` evaluations in a row agree. A change is stored with its history and its
   notifications in one transaction, only while this evaluator holds the lease
   (:func:`.state.save_evaluation`); a standing ALERT is sent again after ``renotify``.
   Changes into or out of WARNING that do not touch ALERT reach the channels only with
   ``notify_on = ["alert", "warning"]`` (:func:`is_news`).

Reads go through a read connection (the query layer's SQL); writes through a store. Blocking
I/O; never on the app's request path. Not thread-safe: one thread owns an Evaluator.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats import CarriesEstimate, Estimate
from ..store import monitor_state as S
from .config import Monitor, MonitorSet
from .measure import GRACE_S, _Context, _measure, _Result  # noqa: F401 (GRACE_S: re-exported)

log = logging.getLogger("tracescore")

__all__ = ["Evaluation", "Evaluator", "is_news", "worse"]

RANK = {"OK": 0, "NO_DATA": 1, "WARNING": 2, "ALERT": 3}


def worse(a: str, b: str) -> bool:
    """Whether state ``a`` is worse than ``b`` (ALERT > WARNING > NO_DATA > OK)."""
    return RANK.get(a, 0) > RANK.get(b, 0)


@dataclass(frozen=True, slots=True)
class Evaluation(CarriesEstimate):
    """One monitor's evaluation: the stored state after hysteresis and what was seen now
    (``estimate``; its value, lo, hi, n and method read through as attributes)."""

    monitor: str
    state: str
    previous: str | None
    #: this evaluation's own verdict (before hysteresis)
    raw: str
    estimate: Estimate
    summary: str
    changed: bool
    saved: bool
    worst: tuple[str, ...] = ()
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "state": self.state, "previous": self.previous,
                "raw": self.raw, "value": self.value, "lo": self.lo, "hi": self.hi,
                "n": self.n, "summary": self.summary, "method": self.method,
                "changed": self.changed, "saved": self.saved, "worst": list(self.worst),
                "error": self.error, "detail": self.detail}


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Evaluator:
    """Evaluates a :class:`MonitorSet` against the database ``db``.

    ``run_once()`` takes (or renews) the evaluator lease; without it the evaluation still runs
    but stores nothing and notifies nobody (``saved=False``): another evaluator owns the
    database's monitors. Opens its connections lazily on the calling thread.
    """

    def __init__(self, db: str, monitors: MonitorSet, *, owner: str | None = None,
                 otel_logger: Any = None, lease_ttl_s: float = 180.0, db_label: str = "",
                 clock: Any = time.time) -> None:
        self.db = str(db)
        self.monitors = monitors
        self.owner = owner or _owner()
        self.otel_logger = otel_logger
        self.lease_ttl_s = lease_ttl_s
        from ..store import redact_url

        self.db_label = db_label or redact_url(self.db)
        self.clock = clock
        self._store: Any = None
        self._reader: Any = None
        self.last: list[Evaluation] = []

    # -- connections ------------------------------------------------------------------------
    def _open(self) -> tuple[Any, Any]:
        if self._store is None:
            from ..store import open_store
            from ..store.compat import connect_reader

            self._store = open_store(self.db)
            S.ensure_tables(self._store)
            self._reader = connect_reader(self.db)
        return self._store, self._reader

    def close(self) -> None:
        for c in (self._reader, self._store):
            if c is not None:
                try:
                    c.close()
                except Exception:  # closing a broken connection: nothing left to do
                    pass
        self._store = self._reader = None

    def release(self) -> None:
        """Give the lease back (a stopping evaluator), so another takes over at once."""
        if self._store is not None:
            try:
                S.release_lease(self._store, S.DEFAULT_LEASE, self.owner)
            except Exception as exc:  # the database went away: the lease expires by itself
                log.debug("tracescore: could not release the monitor lease: %s", exc)

    # -- evaluation ---------------------------------------------------------------------------
    def run_once(self, now: float | None = None, *, save: bool = True,
                 only: Sequence[str] | None = None) -> list[Evaluation]:
        """Evaluate every monitor (or those named in ``only``) once; store and notify if this
        evaluator holds the lease and ``save``. Blocking."""
        store, reader = self._open()
        now = self.clock() if now is None else now
        held = save and S.acquire_lease(store, S.DEFAULT_LEASE, self.owner, self.lease_ttl_s)
        stored = S.load_states(store)
        from ..read.metric_info import MetricInfo
        from ..read.query import SegmentIndex

        ctx = _Context(reader, SegmentIndex(reader), MetricInfo(reader), now)
        out = []
        for m in self.monitors:
            if only is not None and m.name not in only:
                continue
            out.append(self._evaluate(store, ctx, m, stored.get(m.name), held))
        if hasattr(reader, "commit"):
            try:  # end the read transaction so the next run sees new rows
                reader.commit()
            except Exception:
                pass
        self.last = out
        return out

    def _evaluate(self, store: Any, ctx: _Context, m: Monitor, prior: S.StateRow | None,
                  held: bool) -> Evaluation:
        try:
            result = _measure(ctx, m, prior)
        except Exception as exc:  # a broken monitor must not stop the others
            log.warning("tracescore: monitor %s could not be evaluated: %s", m.name, exc)
            result = _Result("NO_DATA", Estimate.missing("-"), f"could not evaluate: {exc}",
                             prior.test_state if prior else None, error=str(exc))
        raw = _apply_no_data(m, result.state)
        state, pending, streak = _hysteresis(m, prior, raw)
        previous = prior.state if prior else None
        changed = previous != state
        renotify = (not changed and state == "ALERT" and m.renotify_s is not None
                    and prior is not None
                    and (prior.notified_at or prior.since) + m.renotify_s <= ctx.now)
        detail = {"summary": result.summary, "method": result.method, "raw": raw,
                  "worst": list(result.worst), **result.detail}
        if result.error:
            detail["error"] = result.error
        saved = False
        if held:
            from . import notify as N

            event = N.AlertEvent(
                monitor=m.name, state=state, previous=previous, score=m.score,
                statistic=m.statistic, window_s=m.window_s, estimate=result.estimate,
                condition=_condition(m, result), verdict=result.summary,
                command=f"tracescore check --monitor {m.name}", db=self.db_label,
                at=ctx.now, where=dict(m.where), worst_trace_ids=result.worst)
            news = changed and is_news(m, previous, state)
            items = N.outbox_items(event, self.monitors.channels_for(m)) \
                if (news or renotify) else None
            saved = S.save_evaluation(
                store, m.name, owner=self.owner, state=state,
                estimate=result.estimate, detail=detail,
                test_state=result.test_state, streak=streak, pending=pending, notify=items,
                at=ctx.now, renotify=bool(renotify))
            if saved and changed:
                N.emit_state_change(self.otel_logger, event)
        return Evaluation(m.name, state, previous, raw, result.estimate, result.summary,
                          changed, saved,
                          tuple(result.worst), result.error, detail)


def is_news(m: Monitor, previous: str | None, state: str) -> bool:
    """Whether a change from ``previous`` to ``state`` goes to ``m``'s channels. A first
    state is news only when it is bad; later every change is (a recovery included), except
    changes into or out of WARNING that do not touch ALERT, unless ``notify_on`` includes
    "warning": a WARNING is the point estimate alone, and on a healthy stream noise moves it
    across the level many times a day. (They are stored, shown by ``check`` and logged.)"""
    bad = ("ALERT", "WARNING") if "warning" in m.notify_on else ("ALERT",)
    if previous is None:
        return state in bad
    if previous == state:
        return False
    if "warning" not in m.notify_on and "WARNING" in (previous, state) \
            and "ALERT" not in (previous, state):
        return False
    return True


def _apply_no_data(m: Monitor, state: str) -> str:
    if state != "NO_DATA":
        return state
    return {"ok": "OK", "alert": "ALERT"}.get(m.no_data, "NO_DATA")


def _hysteresis(m: Monitor, prior: S.StateRow | None, raw: str
                ) -> tuple[str, str | None, int]:
    """(state, pending, streak): worse states at once, better ones after ``hysteresis``
    evaluations in a row."""
    if prior is None or worse(raw, prior.state):
        return raw, None, 0
    if raw == prior.state:
        return raw, None, 0
    streak = prior.streak + 1 if prior.pending == raw else 1
    if streak >= m.hysteresis:
        return raw, None, 0
    return prior.state, raw, streak


def _condition(m: Monitor, r: _Result) -> str:
    return r.detail.get("condition") or (
        f"{m.statistic} {m.direction or ''} {m.threshold}" if m.threshold is not None
        else f"regressed against {m.baseline}")
