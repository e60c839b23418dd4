"""ROUGE-N / ROUGE-L / ROUGE-Lsum of the answer against the ground truths (rouge-score)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from .._internal import light_import
from ..record import ANSWER, GROUND_TRUTHS, RagRecord
from ..score import Score
from .base import Metric
from .ready import IMPORT_LOCK, ensure_ready
from .text import split_sentences, truncate_words, words

#: rouge-score type → our snake_case score name.
_SCORE_NAMES = {"rougeL": "rouge_l", "rougeLsum": "rouge_lsum"}
DEFAULT_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def _canonical_type(rouge_type: str) -> str:
    """Accept rouge-score spellings (``rougeL``) and ours (``rouge_l``)."""
    for upstream, ours in _SCORE_NAMES.items():
        if rouge_type in (upstream, ours):
            return upstream
    if len(rouge_type) == 6 and rouge_type.startswith("rouge") and rouge_type[5] in "123456789":
        return rouge_type
    raise ValueError(
        f"unknown ROUGE type {rouge_type!r}; expected rouge1..rouge9, rougeL or rougeLsum"
    )


class _Tokenizer:
    """rouge-score tokenizer protocol (``tokenize(text) -> list[str]``) over :func:`words`."""

    def __init__(self, use_stemmer: bool) -> None:
        self._stem = use_stemmer

    def tokenize(self, text: str) -> list[str]:
        return words(text, stem=self._stem)


class Rouge(Metric):
    """ROUGE F-measure of the answer against each ground truth, best reference per type.

    One score per configured type: ``rouge1``, ``rouge2`` (n-gram overlap), ``rouge_l``
    (longest common subsequence) and ``rouge_lsum`` (summary-level LCS over sentences, which
    rouge-score takes to be separated by newlines). As in Valor, each type's value is the
    F-measure of the reference with the highest F-measure (rouge-score ``score_multi``), with
    no stemming by default.

    Options:
      rouge_types: any of ``rouge1``..``rouge9``, ``rougeL``/``rouge_l``,
        ``rougeLsum``/``rouge_lsum`` (default: rouge1, rouge2, rougeL, rougeLsum).
      use_stemmer: Porter-stem words longer than 3 characters (default False, as Valor).
      split_sentences: for ``rouge_lsum``, split texts into sentences first (default False:
        only existing line breaks separate sentences, as in Valor/HF ``evaluate``).
      max_words: LCS is quadratic, so each text is cut after this many words; the score then
        says so in its explanation and ``details["truncated"]`` (default 1000).
      threshold: pass/fail threshold on each F-measure (default 0.5).

    Pure CPU; thread-safe.
    """

    name = "rouge"
    value_range = (0.0, 1.0)
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 600  # scores on write up to this size (docs/metrics.md)
    description = "ROUGE-1/2/L/Lsum F-measure of the answer vs the best ground truth."
    score_names: ClassVar[tuple[str, ...]] = ("rouge1", "rouge2", "rouge_l", "rouge_lsum")

    def __init__(
        self,
        rouge_types: Iterable[str] = DEFAULT_TYPES,
        *,
        use_stemmer: bool = False,
        split_sentences: bool = False,
        max_words: int = 1000,
        threshold: float | None = 0.5,
    ) -> None:
        if isinstance(rouge_types, str):
            rouge_types = [rouge_types]
        types = list(dict.fromkeys(_canonical_type(t) for t in rouge_types))
        if not types:
            raise ValueError("rouge_types must name at least one ROUGE type")
        if max_words <= 0:
            raise ValueError(f"max_words must be positive, got {max_words}")
        self.rouge_types = tuple(types)
        self.use_stemmer = use_stemmer
        self.split_sentences = split_sentences
        self.max_words = max_words
        self.threshold = threshold
        self._scorer_obj: Any = None  # rouge-score's RougeScorer, made at the first score

    libraries: ClassVar[tuple[str, ...]] = ("rouge_score", "nltk", "absl")

    def prepare(self) -> None:
        # rouge-score is imported here, not at start-up: rouge_score.tokenizers imports nltk,
        # whose package __init__ loads scipy.stats (and scikit-learn, pandas when installed).
        # Called under the import lock before the first score (metrics/ready.py): two threads
        # importing nltk at once can each see the other's half-initialised modules.
        with IMPORT_LOCK:
            RougeScorer = light_import.module("rouge_score.rouge_scorer").RougeScorer

            scorer = RougeScorer(list(self.rouge_types), tokenizer=_Tokenizer(self.use_stemmer))
            scorer.score("tracing scores", "tracing scores")  # (a stemmer's import happens here)
            if self.split_sentences:
                split_sentences("Punkt. Loaded.")
            self._scorer_obj = scorer

    @property
    def _scorer(self) -> Any:
        scorer = self._scorer_obj
        if scorer is None:  # (called directly, not through the worker)
            ensure_ready(self)
            scorer = self._scorer_obj
        return scorer

    def names(self) -> tuple[str, ...]:
        return tuple(_SCORE_NAMES.get(t, t) for t in self.rouge_types)

    def _prepare(self, text: str) -> tuple[str, bool]:
        text, truncated = truncate_words(text, self.max_words)
        if self.split_sentences:
            text = "\n".join(split_sentences(text))
        return text, truncated

    def __call__(self, record: RagRecord) -> list[Score]:
        if record.answer is None:
            raise ValueError("rouge needs an answer")
        answer, truncated = self._prepare(record.answer)
        refs = [self._prepare(gt) for gt in record.ground_truths]
        truncated = truncated or any(t for _, t in refs)
        per_ref = [self._scorer.score(ref, answer) for ref, _ in refs]
        n = len(per_ref)
        scores = []
        for rouge_type, score_name in zip(self.rouge_types, self.names(), strict=True):
            fmeasures = [r[rouge_type].fmeasure for r in per_ref]
            best = fmeasures.index(max(fmeasures))  # first reference wins ties, as rouge-score
            s = per_ref[best][rouge_type]
            which = "1 reference" if n == 1 else f"best of {n} references (#{best + 1})"
            note = f"; texts cut at {self.max_words} words" if truncated else ""
            scores.append(
                self.result(
                    s.fmeasure,
                    f"{which}: F={s.fmeasure:.2f} (P={s.precision:.2f} R={s.recall:.2f}){note}",
                    name=score_name,
                    details={
                        "precision": s.precision,
                        "recall": s.recall,
                        "fmeasure": s.fmeasure,
                        "rouge_type": rouge_type,
                        "reference_index": best,
                        "references": n,
                        "truncated": truncated,
                    },
                )
            )
        return scores
