"""What a record already tells about a judge metric's verdict, before the judge is asked: the
features of the judge budget's proxy (:mod:`.combine`), cheapest first.

- :func:`past_verdict`: the judge's own verdict when every step the metric needs is in the
  judge's cache already (an exact repeat of the content the steps judge: the same answer and
  contexts, for instance, whatever the question). The metric runs with
  :meth:`tracescore.judge.session.JudgeSession.cache_only`: a step that is not cached stops it
  (no call, no waiting for another job's call). The verdict is then exactly the score the
  judge would give, and judging the record costs nothing.
- :func:`local_features`: lexical scores computed here in microseconds (pure Python): the
  answer's token F1 and ROUGE-L F against the best ground truth, the share of the answer's
  tokens found in the contexts.
- :func:`embedding_features`: with an embedder (``init(embedder=...)``): cosine similarity of
  the answer with its best context, with its best ground truth, and with the question. One
  ``embed`` call for the record's texts; the vectors are cached by content hash
  (:class:`tracescore.embeddings.CachedEmbedder`), so a refit reads them again for free.
  :func:`embed_record` also gives the record's vectors for the neighbour features
  (:mod:`.neighbours`: the judge's verdicts on similar records).

Every function runs on the scoring worker's loop and never raises: a feature that cannot be
computed is missing (and :func:`embedding_features` counts the failure).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._internal.vectors import cosine_or_zero
from ..metrics.base import Metric
from ..metrics.overlap import token_prf
from ..metrics.text import answer_tokens
from ..record import RagRecord

__all__ = ["EMBED_TIMEOUT_S", "MAX_TEXTS", "embed_record", "embedding_features",
           "local_features", "past_verdict", "unit"]

#: contexts and ground truths embedded per record at most (the first ones)
MAX_TEXTS = 8
#: an embedding call that takes longer leaves the record without embedding features
EMBED_TIMEOUT_S = 10.0


def unit(metric: Metric, value: float) -> float:
    """A score of ``metric`` on [0, 1] (by its ``value_range``; clamped)."""
    lo, hi = getattr(metric, "value_range", None) or (0.0, 1.0)
    if lo is None or hi is None or not hi > lo:
        lo, hi = 0.0, 1.0
    return min(1.0, max(0.0, (float(value) - lo) / (hi - lo)))


async def past_verdict(metric: Metric, record: RagRecord) -> float | None:
    """The metric's first score from the judge's cache alone, on [0, 1] (:func:`unit`); None
    when a step is not cached, the metric is not a judge metric bound to a session, or its
    score is not ok."""
    session = getattr(metric, "session", None)
    evaluate = getattr(metric, "evaluate", None)
    if session is None or evaluate is None or not hasattr(session, "cache_only"):
        return None
    from ..judge.session import NotCached, Usage

    try:
        with session.cache_only():
            out = await evaluate(record, session, Usage())
    except NotCached:
        return None
    except Exception:  # the metric's own failure shows when it is judged, not here
        return None
    scores = out if isinstance(out, list) else [out]
    name = metric.names()[0]
    for s in scores:
        if s.name == name and s.status == "ok" and s.value is not None \
                and math.isfinite(float(s.value)):
            return unit(metric, float(s.value))
    return None


def _rouge_l(a: Sequence[str], b: Sequence[str]) -> float:
    """ROUGE-L F1 of two token lists (longest common subsequence; O(len·len), cut at 400)."""
    a, b = list(a[:400]), list(b[:400])
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def local_features(record: RagRecord) -> dict[str, float]:
    """The lexical features the record's inputs allow (module docstring)."""
    out: dict[str, float] = {}
    answer = answer_tokens(record.answer or "")
    if record.ground_truths:
        gts = [answer_tokens(gt) for gt in record.ground_truths]
        out["gt_f1"] = max(token_prf(answer, gt)[2] for gt in gts)
        out["gt_rouge_l"] = max(_rouge_l(answer, gt) for gt in gts)
    if record.contexts and answer:
        ctx: set[str] = set()
        for c in record.contexts:
            ctx.update(answer_tokens(c.text or ""))
        out["ctx_support"] = sum(1 for t in answer if t in ctx) / len(answer)
    return out


async def embedding_features(record: RagRecord, embedder: Any,
                             errors: dict[str, int] | None = None,
                             timeout_s: float = EMBED_TIMEOUT_S) -> dict[str, float]:
    """Cosine similarities of the answer with its best context, best ground truth and the
    question (those the record has); empty without an embedder or an answer, or when the
    embedder fails (counted in ``errors["embedding"]``)."""
    return (await embed_record(record, embedder, errors, timeout_s))[0]


async def embed_record(record: RagRecord, embedder: Any,
                       errors: dict[str, int] | None = None,
                       timeout_s: float = EMBED_TIMEOUT_S
                       ) -> tuple[dict[str, float], dict[str, Any]]:
    """(:func:`embedding_features`, the record's vectors for the neighbour features by their
    name, :mod:`.neighbours`), from one ``embed`` call."""
    from .neighbours import unit_vector

    if embedder is None or not record.answer:
        return {}, {}
    contexts = [c.text for c in record.contexts[:MAX_TEXTS] if c.text]
    gts = [g for g in record.ground_truths[:MAX_TEXTS] if g]
    query = record.query or ""
    if not (contexts or gts or query):
        return {}, {}
    texts = [record.answer, *contexts, *gts, *([query] if query else [])]
    try:
        vecs = await asyncio.wait_for(embedder.embed(texts), timeout_s)
    except Exception:  # (a timeout included) the record goes without these features
        if errors is not None:
            errors["embedding"] = errors.get("embedding", 0) + 1
        return {}, {}
    a = vecs[0]
    out: dict[str, float] = {}
    views: dict[str, Any] = {}
    at = 1
    if contexts:
        ctx = vecs[at:at + len(contexts)]
        out["emb_answer_contexts"] = max(cosine_or_zero(a, v) for v in ctx)
        views["nn_answer_contexts"] = unit_vector(a, unit_vector(*ctx))
        at += len(contexts)
    if gts:
        out["emb_answer_gt"] = max(cosine_or_zero(a, v) for v in vecs[at:at + len(gts)])
        at += len(gts)
    if query:
        out["emb_query_answer"] = cosine_or_zero(a, vecs[at])
        views["nn_question_answer"] = unit_vector(vecs[at], a)
    return out, {k: v for k, v in views.items() if v is not None}


def merged(*parts: Mapping[str, float]) -> dict[str, float]:
    """The features of ``parts``, the finite ones only."""
    return {k: float(v) for p in parts for k, v in p.items() if math.isfinite(float(v))}
