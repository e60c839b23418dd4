"""The cheap proxy of a judge metric: a number in [0, 1] every candidate record gets before
the judge is asked, computed from the record alone (pure Python, microseconds).

- with ground truths: the SQuAD token F1 of the answer against the best one
  (:func:`tracescore.metrics.overlap.token_prf`, as the ``token_f1`` metric);
- else, with contexts: the share of the answer's tokens found in the contexts (how much of
  the answer the retrieved text supports, word by word);
- else: 0.5 (no information; the error model learns that bin's error like any other).

The proxy need not be calibrated or even good: the estimate fits a line from it to the
judge's score and falls back to the judged records' weighted mean when it is useless
(:mod:`tracescore.stats.active`); selection learns its error per bin
(:mod:`.policy`). Embedding similarities and the judge's past verdicts on similar records are
not used yet.
"""

from __future__ import annotations

from collections import Counter

from ..metrics.overlap import token_prf
from ..metrics.text import answer_tokens
from ..record import RagRecord

__all__ = ["overlap_proxy"]


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
