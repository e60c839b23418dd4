"""The scoring worker's adaptive judge decisions (issue 33): for a judge metric with a budget,
whether this record goes to the judge.

For each leased job of such a metric (after the checks that need no judge: the record exists
and has the metric's inputs) :meth:`AdaptiveJudging.decide_async` computes the proxy
(:mod:`.proxy`: the judge's cached verdict, a learned combination of the record's features,
or the overlap proxy), then :meth:`AdaptiveJudging.decide` the record's π (:mod:`.policy`:
today's pacing rate × the learned error of the proxy in its bin, mixed with uniform) and the
record's fraction
u = SHA-256(record id + "/judge") (:func:`tracescore.sampling.trace_fraction`: reproducible,
independent of the sampling decision's u, and shared by every judge metric of the record so
their cached judge steps are shared too); the record is judged iff u < π and a unit of the
day's budget is left. The decision (proxy, π, judged) is stored in the same transaction as
the budget's counters (:func:`tracescore.store.judge_budget.decide`); a record not judged gets
a ``skipped`` score with :data:`NOT_SELECTED` as its reason. A record whose verdict is in the
judge's cache is judged for free (π = 1, reason ``cached``, no unit of the budget): its
judge call would be served from the cache.

Runs on the worker's loop thread with its store (blocking: one short transaction per
decision; the error model and the last hour's traffic are read again every ``refresh_s``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..metrics.base import Metric
from ..record import RagRecord
from ..sampling import trace_fraction
from ..score import Score
from ..store import judge_budget as JB
from .policy import DAY, FLOOR, LAMBDA, ErrorModel, Pacer, inclusion, proxy_bin
from .proxy import Proxy, ProxyModel, overlap_proxy

__all__ = ["NOT_SELECTED", "AdaptiveJudging", "Decision", "judge_fraction"]

#: the skip reason of a record the judge budget did not send to the judge
NOT_SELECTED = "not selected for the judge (judge budget, adaptive selection)"
BUDGET_SPENT = "not judged: the day's judge budget is spent"
#: how many days of judged records the error model learns from
LEARN_DAYS = 7.0


def judge_fraction(record_id: str) -> float:
    """The record's fraction for the judge decision (module docstring)."""
    return trace_fraction(f"{record_id}/judge")


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision (:class:`tracescore.store.judge_budget.Decided`'s fields) and the kind of
    proxy it used (:class:`.proxy.Proxy`; None for a decision made before)."""

    selected: bool
    pi: float
    proxy: float
    again: bool = False
    reason: str | None = None
    kind: str | None = None


class AdaptiveJudging:
    """Decisions for the judge metrics in ``budgets`` (judged records a day each).
    ``embedder``: the worker's embedder, for the proxy's embedding features (None: none);
    ``refit_s``: how often the proxy's combination is fitted again (:class:`.proxy.ProxyModel`)."""

    def __init__(self, budgets: Mapping[str, float], *, lam: float = LAMBDA,
                 floor: float = FLOOR, refresh_s: float = 60.0, embedder: Any = None,
                 refit_s: float = 600.0) -> None:
        self.budgets = dict(budgets)
        self.pacers = {m: Pacer(b) for m, b in self.budgets.items()}
        self.lam, self.floor, self.refresh_s = lam, floor, refresh_s
        self._models: dict[str, tuple[float, Any, float]] = {}
        self._traffic: dict[str, tuple[float, int, int | None]] = {}
        #: the proxy of each record (:mod:`.proxy`)
        self.proxies = ProxyModel(embedder, refit_s=refit_s)
        #: decisions made here: judged, not judged, budget spent; and by the kind of proxy
        #: they used (:class:`.proxy.Proxy`: the judge's cached verdict, the learned
        #: combination, the overlap proxy)
        self.counts = {"judged": 0, "not_selected": 0, "budget_spent": 0, "proxy_cache": 0,
                       "proxy_fit": 0, "proxy_overlap": 0}

    def __contains__(self, metric: str) -> bool:
        return metric in self.budgets

    def _errors(self, store: Any, metric: Metric, now: float) -> tuple[Any, float]:
        got = self._models.get(metric.name)
        if got is not None and now - got[0] < self.refresh_s:
            return got[1], got[2]
        import numpy as np

        model = ErrorModel()
        for b, seen, judged, *sums in JB.decision_sums(store, metric.name, metric.names()[0],
                                                        now - LEARN_DAYS * DAY):
            model.sums[int(b)] += np.array([seen, judged, *sums])
        err, mean = model.errors()
        self._models[metric.name] = (now, err, mean)
        return err, mean

    def _traffic_now(self, store: Any, metric: str, now: float) -> tuple[int, int | None]:
        got = self._traffic.get(metric)
        if got is not None and now - got[0] < min(self.refresh_s, 30.0):
            return got[1], got[2]
        recent = JB.recent_seen(store, metric, now, self.pacers[metric].recent_s)
        yesterday = JB.usage(store, metric, JB.day_of(now - DAY))[0] or None
        self._traffic[metric] = (now, recent, yesterday)
        return recent, yesterday

    async def decide_async(self, store: Any, metric: Metric, record_id: str,
                           record: RagRecord, now: float | None = None) -> Decision:
        """:meth:`decide` with the record's best proxy (:meth:`.proxy.ProxyModel.proxy`:
        the judge's cached verdict, the learned combination of its features, or the overlap
        proxy). Runs on the worker's loop; never raises but the store's errors."""
        now = time.time() if now is None else now
        p = await self.proxies.proxy(store, metric, record, now)
        return self.decide(store, metric, record_id, record, now, p)

    def decide(self, store: Any, metric: Metric, record_id: str, record: RagRecord,
               now: float | None = None, proxy: Proxy | None = None) -> Decision:
        """The decision on the record, with ``proxy`` (None: the overlap proxy). A proxy of
        kind ``cache`` (the judge's verdict is cached) judges the record for free: π = 1, no
        unit of the budget (:func:`tracescore.store.judge_budget.decide`)."""
        now = time.time() if now is None else now
        if proxy is None:
            proxy = Proxy(float(overlap_proxy(record)), "overlap")
        f = float(proxy.value)
        b = proxy_bin(f)
        err, mean_err = self._errors(store, metric, now)
        recent, yesterday = self._traffic_now(store, metric.name, now)
        u = judge_fraction(record_id)
        pacer = self.pacers[metric.name]

        def choose(spent: int, seen: int, started: float) -> tuple[float, bool]:
            r = pacer.rate(spent, seen, now, yesterday, recent, started)
            pi = float(inclusion([err[b]], mean_err, r, self.lam, self.floor)[0])
            return pi, u < pi

        d = JB.decide(store, metric.name, record_id, f, b, now, self.budgets[metric.name],
                      choose, record.trace_id, free=proxy.kind == "cache")
        if not d.again:
            key = ("judged" if d.selected else
                   "budget_spent" if d.reason == "budget spent" else "not_selected")
            self.counts[key] += 1
            self.counts[f"proxy_{proxy.kind}"] += 1
        return Decision(d.selected, d.pi, d.proxy, d.again, d.reason,
                        None if d.again else proxy.kind)

    @staticmethod
    def not_judged(metric: Metric, d: Decision | JB.Decided) -> list[Score]:
        reason = BUDGET_SPENT if d.reason == "budget spent" else NOT_SELECTED
        details: dict[str, Any] = {"judge_pi": d.pi, "judge_proxy": d.proxy}
        kind = getattr(d, "kind", None)
        if kind is not None:
            details["judge_proxy_kind"] = kind
        return [Score.skipped(n, reason, metric=metric.name, metric_version=metric.version,
                              details=details) for n in metric.names()]
