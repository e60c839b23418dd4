"""SQuAD-style token F1 and exact match of the answer against the ground truths."""

from __future__ import annotations

from collections import Counter

from ..record import ANSWER, GROUND_TRUTHS, RagRecord
from ..score import Score
from .base import Metric
from .text import answer_tokens


def token_prf(prediction: list[str], reference: list[str]) -> tuple[float, float, float]:
    """SQuAD token precision, recall and F1 (multiset overlap).

    If either side has no tokens, all three are 1.0 when both are empty and 0.0 otherwise
    (the SQuAD v2 convention).
    """
    if not prediction or not reference:
        same = float(prediction == reference)
        return same, same, same
    common = sum((Counter(prediction) & Counter(reference)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    p = common / len(prediction)
    r = common / len(reference)
    return p, r, 2 * p * r / (p + r)


def _which(n: int, best: int) -> str:
    return "1 reference" if n == 1 else f"best of {n} references (#{best + 1})"


class TokenF1(Metric):
    """Token-level F1 between the normalised answer and the best-matching ground truth.

    The F1 of saga-llm-evaluation's ``HallucinationScore`` and of SQuAD: both texts are
    normalised (lower-case, punctuation and English articles removed, whitespace collapsed),
    split into tokens, and F1 is computed on the multiset overlap. The value is the maximum
    over ground truths (SQuAD's ``metric_max_over_ground_truths``).

    Options:
      threshold: pass/fail threshold (default 0.5).

    Pure CPU; thread-safe.
    """

    name = "token_f1"
    value_range = (0.0, 1.0)
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 8_000  # scores on write up to this size (docs/metrics.md)
    description = "SQuAD token F1 of the normalised answer vs the best ground truth."

    def __init__(self, *, threshold: float | None = 0.5) -> None:
        self.threshold = threshold

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("token_f1 needs an answer")
        pred = answer_tokens(record.answer)
        results = [token_prf(pred, answer_tokens(gt)) for gt in record.ground_truths]
        best = max(range(len(results)), key=lambda i: (results[i][2], -i))
        p, r, f1 = results[best]
        return self.result(
            f1,
            f"{_which(len(results), best)}: F1={f1:.2f} (P={p:.2f} R={r:.2f})",
            details={
                "precision": p,
                "recall": r,
                "reference_index": best,
                "references": len(results),
                "answer_tokens": len(pred),
            },
        )


class ExactMatch(Metric):
    """1 if the normalised answer equals a normalised ground truth, else 0.

    SQuAD exact match (the normalisation of :class:`TokenF1`), maximum over ground truths.
    A long answer that merely contains the reference scores 0; see ``rgb_accuracy`` for
    containment.

    Options:
      threshold: pass/fail threshold (default 1.0: pass only on a match).

    Pure CPU; thread-safe.
    """

    name = "exact_match"
    value_range = (0.0, 1.0)
    binary = True
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 8_000  # scores on write up to this size (docs/metrics.md)
    description = "1 if the SQuAD-normalised answer equals a normalised ground truth."

    def __init__(self, *, threshold: float | None = 1.0) -> None:
        self.threshold = threshold

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("exact_match needs an answer")
        # Token lists, not strings, so spacing inside CJK text does not matter.
        pred = answer_tokens(record.answer)
        n = len(record.ground_truths)
        match = next(
            (i for i, gt in enumerate(record.ground_truths) if answer_tokens(gt) == pred),
            None,
        )
        if match is None:
            refs = "the reference" if n == 1 else f"any of {n} references"
            explanation = f"normalised answer differs from {refs}"
        else:
            explanation = f"normalised answer equals reference #{match + 1} of {n}"
        return self.result(
            0.0 if match is None else 1.0,
            explanation,
            details={"reference_index": match, "references": n},
        )
