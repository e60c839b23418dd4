"""Sentence BLEU of the answer against all ground truths at once (nltk)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

from .._internal import light_import
from ..record import ANSWER, GROUND_TRUTHS, RagRecord
from ..score import Score
from .base import Metric
from .ready import IMPORT_LOCK, ensure_ready

# Valor's BLEU tokenizer (nltk RegexpTokenizer with this pattern): words, "$<digits>", and
# any other run of non-space characters except periods. Case is kept.
_VALOR_TOKEN_RE = re.compile(r"\w+|\$[\d]+|[^\s\.]+")
_SMOOTHINGS = tuple(f"method{i}" for i in range(8))


def bleu_tokens(text: str, *, lowercase: bool = False) -> list[str]:
    return _VALOR_TOKEN_RE.findall(text.lower() if lowercase else text)


def _no_smoothing(p_n: list[Fraction], *args: Any, **kwargs: Any) -> list[Any]:
    # nltk's method0 without its UserWarning (which nltk emits on every short answer; silencing
    # it with warnings.catch_warnings would not be thread-safe). Only reached when no weighted
    # order has zero matches, so the float_info.min stand-in only affects zero-weight orders.
    return [p if p.numerator != 0 else sys.float_info.min for p in p_n]


class Bleu(Metric):
    """Sentence BLEU of the answer with every ground truth as a reference (multi-reference).

    Follows Valor's text-generation BLEU: Valor's regex tokenizer (case-sensitive, periods
    dropped), ``nltk.translate.bleu_score.sentence_bleu`` with all ground truths as references,
    uniform BLEU-4 weights and no smoothing. Without smoothing BLEU is 0 whenever some weighted
    n-gram order has no match (any answer shorter than 4 tokens under BLEU-4); we report exactly
    0.0 there (nltk returns ~1e-77 and warns). Pick a smoothing to get graded scores for short
    answers.

    Options:
      weights: n-gram weights, default ``(0.25,) * 4`` (BLEU-4); ``(1.0,)`` is BLEU-1.
      smoothing: None (default, Valor) or an nltk ``SmoothingFunction`` method name,
        ``"method0"`` .. ``"method7"`` (``"method1"``: add 0.1 to zero counts).
      lowercase: lower-case both sides first (default False, Valor is case-sensitive).
      threshold: pass/fail threshold (default 0.5).

    Pure CPU; thread-safe.
    """

    name = "bleu"
    value_range = (0.0, 1.0)
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 4_000  # scores on write up to this size (docs/metrics.md)
    description = "Sentence BLEU of the answer against all ground truths (nltk, Valor tokens)."

    def __init__(
        self,
        weights: Sequence[float] = (0.25, 0.25, 0.25, 0.25),
        *,
        smoothing: str | None = None,
        lowercase: bool = False,
        threshold: float | None = 0.5,
    ) -> None:
        w = tuple(float(x) for x in weights)
        if not w or any(x < 0 for x in w) or sum(w) <= 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {weights!r}")
        if smoothing is not None and smoothing not in _SMOOTHINGS:
            raise ValueError(
                f"unknown smoothing {smoothing!r}; expected None or one of {', '.join(_SMOOTHINGS)}"
            )
        self.weights = w
        self.smoothing = smoothing
        self.lowercase = lowercase
        self.threshold = threshold
        self._smoothing_fn: Any = None  # resolved with nltk, at the first score
        self._nltk: tuple[Any, ...] | None = None  # nltk's functions, from prepare()

    libraries: ClassVar[tuple[str, ...]] = ("nltk",)

    def prepare(self) -> None:
        # nltk is imported here, not at start-up, and without its package __init__ (which loads
        # scipy, pandas and scikit-learn when they are installed, ~160 MB: light_import.py);
        # most production records carry no reference, so a process that never scores BLEU
        # never pays even for that. Called
        # under the import lock before the first score (metrics/ready.py).
        with IMPORT_LOCK:
            bleu = light_import.module("nltk.translate.bleu_score")
            SmoothingFunction, brevity_penalty, closest_ref_length, modified_precision, \
                sentence_bleu = (bleu.SmoothingFunction, bleu.brevity_penalty,
                                 bleu.closest_ref_length, bleu.modified_precision,
                                 bleu.sentence_bleu)

            self._smoothing_fn = (getattr(SmoothingFunction(), self.smoothing)
                                  if self.smoothing not in (None, "method0") else _no_smoothing)
            self._nltk = (brevity_penalty, closest_ref_length, modified_precision,
                          sentence_bleu)

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("bleu needs an answer")
        if self._nltk is None:  # (called directly, not through the worker)
            ensure_ready(self)
        brevity_penalty, closest_ref_length, modified_precision, sentence_bleu = (
            self._nltk or ())
        hyp = bleu_tokens(record.answer, lowercase=self.lowercase)
        refs = [bleu_tokens(gt, lowercase=self.lowercase) for gt in record.ground_truths]
        precisions = [modified_precision(refs, hyp, n) for n in range(1, len(self.weights) + 1)]
        ref_len = closest_ref_length(refs, len(hyp))
        bp = brevity_penalty(ref_len, len(hyp))
        unsmoothed_zero = self._smoothing_fn is _no_smoothing and any(
            w > 0 and p.numerator == 0 for w, p in zip(self.weights, precisions, strict=True)
        )
        if not hyp or unsmoothed_zero:
            value = 0.0
        else:
            value = float(
                sentence_bleu(
                    refs, hyp, weights=self.weights, smoothing_function=self._smoothing_fn
                )
            )
        n = len(refs)
        order = f"BLEU-{len(self.weights)}"
        p_text = "/".join(f"{float(p):.2f}" for p in precisions)
        explanation = (
            f"{order} vs {n} reference{'s' if n != 1 else ''}: {value:.2f} "
            f"(n-gram precisions {p_text}, brevity penalty {bp:.2f})"
        )
        if unsmoothed_zero and hyp:
            zero = next(
                i + 1
                for i, (w, p) in enumerate(zip(self.weights, precisions, strict=True))
                if w > 0 and p.numerator == 0
            )
            explanation += f"; no {zero}-gram matches and no smoothing"
        return self.result(
            value,
            explanation,
            details={
                "precisions": [float(p) for p in precisions],
                "brevity_penalty": bp,
                "answer_tokens": len(hyp),
                "reference_tokens": ref_len,
                "references": n,
                "weights": list(self.weights),
                "smoothing": self.smoothing,
            },
        )
