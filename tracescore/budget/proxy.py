"""The cheap proxy of a judge metric: a number in [0, 1] every candidate record gets before
the judge is asked, from what the record already has (issue 33). :class:`ProxyModel` picks,
cheapest first:

1. ``cache``: the judge's own verdict, when every step the metric needs is in the judge's
   cache (:func:`.features.past_verdict`: an exact repeat of the judged content). Judging
   such a record costs no call, so it is judged for free (π = 1, no unit of the budget: the
   estimate takes its score as it is).
2. ``fit``: a weighted least-squares combination of the record's features
   (:mod:`.features`: lexical scores against the ground truths and the contexts; with an
   embedder, cosine similarities of the answer with its contexts, ground truths and question)
   fitted to the judge's scores of the last judged records (:mod:`.combine`), refitted every
   ``refit_s``; used only for a feature set where it predicts the judge better than the
   overlap proxy (leave-one-out), once :data:`.combine.MIN_FIT` records were judged. With
   an embedder, the judge's verdicts on the most similar of those judged records
   (:mod:`.neighbours`) are features too, used only where they beat the fit without them.
3. ``overlap``: :func:`overlap_proxy` (pure Python, microseconds):

   - with ground truths: the SQuAD token F1 of the answer against the best one
     (:func:`tracescore.metrics.overlap.token_prf`, as the ``token_f1`` metric);
   - else, with contexts: the share of the answer's tokens found in the contexts (how much of
     the answer the retrieved text supports, word by word);
   - else: 0.5 (no information; the error model learns that bin's error like any other).

The proxy need not be calibrated or even good: the estimate fits a line from it to the
judge's score and falls back to the judged records' weighted mean when it is useless
(:mod:`tracescore.stats.active`); selection learns its error per bin (:mod:`.policy`). What
keeps the estimate valid is that the proxy and π of a record depend only on what was known
before its decision (earlier judged records, the cache, the record itself), and are stored
with it (``judge_decisions``). Local metric *scores* of the record are not read from the
store (they may not be there yet when the decision is made): the lexical features are
computed here, by the same formulas.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from .._internal.errors import record_internal_error
from ..metrics.base import Metric
from ..metrics.overlap import token_prf
from ..metrics.text import answer_tokens
from ..record import RagRecord
from ..store import judge_proxy as JP
from . import features as F
from .combine import Combined, fit_groups
from .neighbours import Index

__all__ = ["KINDS", "Proxy", "ProxyModel", "overlap_proxy"]

#: the kinds of proxy, cheapest first (module docstring)
KINDS = ("cache", "fit", "overlap")
#: days of judged records the combination learns from (as the error model)
LEARN_DAYS = 7.0


def overlap_proxy(record: RagRecord) -> float:
    answer = answer_tokens(record.answer or "")
    if record.ground_truths:
        return max(token_prf(answer, answer_tokens(gt))[2] for gt in record.ground_truths)
    if record.contexts and answer:
        ctx: Counter[str] = Counter()
        for c in record.contexts:
            ctx.update(set(answer_tokens(c.text or "")))
        return sum(1 for t in answer if t in ctx) / len(answer)
    return 0.5


@dataclass(frozen=True, slots=True)
class Proxy:
    """A record's proxy value in [0, 1] and its kind (:data:`KINDS`)."""

    value: float
    kind: str


class ProxyModel:
    """The proxies of one worker's budgeted judge metrics (module docstring). ``embedder``:
    the worker's (None: no embedding features); ``refit_s``: how often a metric's combination
    is fitted again; ``fit_limit``: the newest judged records a fit reads; ``memo``: records
    whose features are remembered (a refit reads the others from the store)."""

    def __init__(self, embedder: Any = None, *, refit_s: float = 600.0,
                 fit_limit: int = 500, memo: int = 4096) -> None:
        self.embedder = embedder
        self.refit_s, self.fit_limit, self.memo_size = refit_s, fit_limit, memo
        self._memo: OrderedDict[str, tuple[dict[str, float], float]] = OrderedDict()
        #: the last records' vectors for the neighbour features (:mod:`.neighbours`; float32,
        #: fewer than the features: a fit's records, the others read from the embedding
        #: cache again)
        self._views: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.views_size = max(1024, 2 * fit_limit)
        self._fits: dict[str, tuple[float, dict[tuple[str, ...], Combined], Index]] = {}
        self._fitting: set[str] = set()
        #: features that could not be computed (``embedding``) and proxies that fell back
        #: to the overlap proxy on an internal error (``internal``)
        self.errors: dict[str, int] = {}

    async def features(self, record: RagRecord) -> tuple[dict[str, float], float]:
        """(the record's features, its overlap proxy), remembered by record id."""
        got = self._memo.get(record.record_id)
        if got is not None:
            self._memo.move_to_end(record.record_id)
            return got
        failed = self.errors.get("embedding", 0)
        emb, views = await F.embed_record(record, self.embedder, self.errors)
        out = (F.merged(F.local_features(record), emb), float(overlap_proxy(record)))
        if self.errors.get("embedding", 0) == failed:  # (a failed embedding is tried again)
            self._memo[record.record_id] = out
            while len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
            self._remember_views(record.record_id, views)
        return out

    def _remember_views(self, record_id: str, views: dict[str, Any]) -> None:
        import numpy as np

        self._views[record_id] = {k: np.asarray(v, dtype=np.float32) for k, v in views.items()}
        while len(self._views) > self.views_size:
            self._views.popitem(last=False)

    def views(self, record_id: str) -> dict[str, Any]:
        """A remembered record's vectors for the neighbour features (empty if none)."""
        got = self._views.get(record_id)
        if got is None:
            return {}
        self._views.move_to_end(record_id)
        return got

    async def _views_again(self, record: RagRecord) -> dict[str, Any]:
        """A record's vectors read again (from the embedding cache, usually)."""
        failed = self.errors.get("embedding", 0)
        _, views = await F.embed_record(record, self.embedder, self.errors)
        if self.errors.get("embedding", 0) == failed:
            self._remember_views(record.record_id, views)
        return self.views(record.record_id)

    async def fits(self, store: Any, metric: Metric, now: float
                   ) -> tuple[dict[tuple[str, ...], Combined], Index]:
        """The metric's current combinations and the judged records they learned from (the
        neighbours of the records they serve), fitted again when ``refit_s`` old (one fit
        at a time per metric: decisions meanwhile use the previous one)."""
        got = self._fits.get(metric.name)
        if (got is not None and now - got[0] < self.refit_s) or metric.name in self._fitting:
            return (got[1], got[2]) if got is not None else ({}, Index())
        self._fitting.add(metric.name)
        fits, index = ({}, Index()) if got is None else (got[1], got[2])
        try:
            samples = JP.judged_samples(store, metric.name, metric.names()[0],
                                        now - LEARN_DAYS * 86400.0, self.fit_limit)
            need = [rid for rid, _, _ in samples if rid not in self._memo
                    or (self.embedder is not None and rid not in self._views)]
            records = store.load_records(need) if need else {}
            rows: list[tuple[dict[str, float], float, float, float]] = []
            judged: list[tuple[str, dict[str, Any], float]] = []
            for rid, pi, y in samples:
                rec = records.get(rid)
                if rid in self._memo:
                    feats, overlap = self._memo[rid]
                elif rec is not None:
                    feats, overlap = await self.features(rec)
                else:
                    continue
                views = self.views(rid)
                if not views and rec is not None and self.embedder is not None:
                    views = await self._views_again(rec)
                rows.append((feats, overlap, pi, F.unit(metric, y)))
                judged.append((rid, views, F.unit(metric, y)))
                await asyncio.sleep(0)  # (other jobs run between records)
            # the neighbours' verdicts of each training record, from those judged before it
            index = Index.build(judged[::-1])
            near = index.training()
            rows = [(F.merged(f, near.get(rid, {})), o, pi, y)
                    for (rid, _, _), (f, o, pi, y) in zip(judged, rows)]
            fits = fit_groups(rows)
        except Exception as exc:  # (the store): the previous fit stays until the next refit
            record_internal_error("budget.proxy.fit", exc)
            self.errors["fit"] = self.errors.get("fit", 0) + 1
        finally:
            self._fitting.discard(metric.name)
        self._fits[metric.name] = (now, fits, index)
        return fits, index

    async def proxy(self, store: Any, metric: Metric, record: RagRecord, now: float) -> Proxy:
        """The record's proxy for ``metric`` (module docstring). Never raises: an internal
        failure gives the overlap proxy (counted in ``errors["internal"]``)."""
        try:
            verdict = await F.past_verdict(metric, record)
            if verdict is not None:
                return Proxy(verdict, "cache")
            feats, overlap = await self.features(record)
            views = self.views(record.record_id)  # (before a refit may forget them)
            fits, index = await self.fits(store, metric, now)
            if not views and index.ids and any(k.startswith("emb_") for k in feats):
                views = await self._views_again(record)
            full = F.merged(feats, index.features(record.record_id, views))
            fit = fits.get(tuple(sorted(full))) or fits.get(tuple(sorted(feats)))
            if fit is not None:
                return Proxy(fit.predict(full), "fit")
            return Proxy(overlap, "overlap")
        except Exception as exc:
            record_internal_error("budget.proxy", exc)
            self.errors["internal"] = self.errors.get("internal", 0) + 1
            return Proxy(float(overlap_proxy(record)), "overlap")
