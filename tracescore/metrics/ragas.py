"""Ragas metrics: the embedding metrics, and Ragas-flavoured names for the judge metrics.

Formulas follow Ragas' definitions (``explodinggradients/ragas``, ``src/ragas/metrics``);
where tracescore differs (an edge case scored as an error instead of NaN or a silent 0, one
judge call instead of N, several references) docs/metrics.md says so under each metric.
Judge work goes through shared, cached steps (:mod:`tracescore.judge.steps` for statements and
verdicts, :mod:`tracescore.judge.ragas_steps` for questions, entities and sentences); vectors
come from the embedder bound at ``tracescore.init(embedder=...)`` and are cached by content.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, ClassVar

from ..embeddings import Embedder
from ..judge import ragas_steps as RS
from ..judge import steps as S
from ..judge.session import JudgeSession, Usage
from ..record import ANSWER, CONTEXTS, GROUND_TRUTHS, QUERY, RagRecord
from ..score import Score
from .base import Metric
from .judged import ContextPrecision, ContextRecall, Faithfulness, JudgeMetric
from .text import split_sentences


class _UsesEmbedder:
    """Mixin: the metric needs vectors; ``tracescore.init(embedder=...)`` binds the embedder."""

    name: ClassVar[str]
    needs_embedder: bool = True
    embedder: Embedder | None = None

    def bind_embedder(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def _embedder(self) -> Embedder:
        if self.embedder is None:
            raise RuntimeError(f"metric {self.name!r} needs an embedding model: pass embedder="
                               "'local' or 'openai:MODEL' to tracescore.init")
        return self.embedder


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity: the dot product of the L2-normalised vectors."""
    if len(a) != len(b):
        raise ValueError(f"vectors of different lengths ({len(a)} and {len(b)})")
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(x * x for x in b))
    if na == 0.0 or nb == 0.0:
        raise ValueError("cannot take the cosine of a zero vector")
    return math.fsum(x * y for x, y in zip(a, b)) / (na * nb)


def statement_f1(tp: int, fp: int, fn: int) -> float:
    """Ragas' (and Valor's) statement F1: TP / (TP + ½(FP + FN)); 0 when TP = 0."""
    return tp / (tp + 0.5 * (fp + fn)) if tp > 0 else 0.0


# -- answer_similarity -----------------------------------------------------------------------
class AnswerSimilarity(_UsesEmbedder, Metric):
    """Cosine similarity of the answer's and a reference's embeddings; max over references.
    With ``binary=True`` the value is 1 when the cosine reaches ``threshold``, else 0 (Ragas'
    ``threshold``)."""

    name = "answer_similarity"
    value_range = (-1.0, 1.0)
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    description = "Cosine similarity of answer and reference embeddings (Ragas); best reference"

    def __init__(self, *, threshold: float | None = 0.5, binary: bool = False) -> None:
        if binary and threshold is None:
            raise ValueError("binary=True needs a threshold")
        self.threshold = threshold
        self.binary = binary

    async def __call__(self, record: RagRecord) -> Score:
        emb = self._embedder()
        answer = record.answer or ""
        vecs = await emb.embed([answer, *record.ground_truths])
        sims = [cosine(vecs[0], v) for v in vecs[1:]]
        best = max(range(len(sims)), key=lambda j: sims[j])
        sim = sims[best]
        expl = f"reference #{best + 1}: cosine {sim:.3f}"
        value = sim
        if self.binary:
            assert self.threshold is not None
            value = 1.0 if sim >= self.threshold else 0.0
            expl += f" {'≥' if value else '<'} {self.threshold:g} → {value:g}"
        if len(sims) > 1:
            expl = f"best of {len(sims)} references, {expl}"
        return self.result(value, expl, details={"cosines": sims, "embedding_model": emb.model})


# -- ragas_answer_relevancy ------------------------------------------------------------------
class RagasAnswerRelevancy(_UsesEmbedder, JudgeMetric):
    """Mean cosine between the query and N questions the judge generates from the answer,
    times 0 when the generations say the answer is noncommittal."""

    name = "ragas_answer_relevancy"
    value_range = (-1.0, 1.0)  # a cosine in it
    requires = frozenset({QUERY, ANSWER})
    description = ("Mean cosine of the query with questions generated from the answer; 0 if "
                   "noncommittal (Ragas)")

    def __init__(self, *, strictness: int = 3, noncommittal: str = "all",
                 threshold: float | None = 0.5) -> None:
        if not isinstance(strictness, int) or isinstance(strictness, bool) or \
                not 1 <= strictness <= 10:
            raise ValueError("strictness (questions generated per answer) must be 1..10")
        if noncommittal not in ("all", "any"):
            raise ValueError("noncommittal must be 'all' (score 0 when every generation flags "
                             "the answer) or 'any' (Ragas: when one does)")
        self.strictness = strictness
        self.noncommittal = noncommittal
        self.threshold = threshold

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        emb = self._embedder()
        gens = await RS.generate_questions(session, record, self.strictness, usage)
        questions = [g.question for g in gens if g.question]
        flags = [g.noncommittal for g in gens]
        if not questions:
            return Score.failed(
                self.name, f"the judge generated {len(gens)} empty questions from the answer "
                "(Ragas: NaN)", metric=self.name, metric_version=self.version,
                details={"noncommittal": flags})
        vecs = await emb.embed([record.query or "", *questions])
        sims = [cosine(vecs[0], v) for v in vecs[1:]]
        mean = math.fsum(sims) / len(sims)
        zero = all(flags) if self.noncommittal == "all" else any(flags)
        details: dict[str, Any] = {"generated_questions": questions, "noncommittal": flags,
                                   "cosines": sims, "mean_cosine": mean,
                                   "embedding_model": emb.model}
        if zero:
            how = "every generation" if self.noncommittal == "all" else \
                f"{sum(flags)} of {len(flags)} generations"
            return self.result(0.0, f"noncommittal answer ({how} flags it) → 0 "
                               f"(mean cosine {mean:.3f})", details=details)
        return self.result(mean, f"mean cosine of the query with {len(sims)} questions "
                           f"generated from the answer: {mean:.3f}", details=details)


# -- ragas_answer_correctness ----------------------------------------------------------------
class RagasAnswerCorrectness(_UsesEmbedder, JudgeMetric):
    """Weighted average of statement F1 and answer similarity (Ragas); max over references."""

    name = "ragas_answer_correctness"
    value_range = (-1.0, 1.0)  # a cosine in it
    requires = frozenset({QUERY, ANSWER, GROUND_TRUTHS})
    description = ("0.75 × statement F1 + 0.25 × embedding similarity to the reference (Ragas);"
                   " best reference")

    def __init__(self, *, weights: Sequence[float] = (0.75, 0.25),
                 threshold: float | None = 0.5) -> None:
        w = tuple(weights)
        if len(w) != 2:
            raise ValueError("weights must be two numbers: (statement F1, similarity)")
        if any(not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x)
               or x < 0 for x in w):
            raise ValueError("weights must be finite numbers >= 0")
        if w[0] == 0 and w[1] == 0:
            raise ValueError("at least one weight must be > 0")
        self.weights = (float(w[0]), float(w[1]))
        self.threshold = threshold
        # F1 alone needs no vectors (Ragas skips the similarity when its weight is 0).
        self.needs_embedder = self.weights[1] != 0

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        w_f1, w_sim = self.weights
        m = len(record.ground_truths)
        sims = [0.0] * m
        emb_model = None
        if w_sim != 0:
            emb = self._embedder()
            vecs = await emb.embed([record.answer or "", *record.ground_truths])
            sims = [cosine(vecs[0], v) for v in vecs[1:]]
            emb_model = emb.model
        ex = await S.extract(session, record, usage)
        sv = await S.statement_verdicts(session, record, ex, usage)
        parts = []
        for j in range(m):
            if not ex.answer_statements and not ex.reference_statements[j]:
                tp = fp = fn = 0
                f1 = 1.0  # Ragas: no statements on either side counts as agreement
            else:
                tp = sum(1 for row in sv.in_reference if row[j])
                fp = len(sv.in_reference) - tp
                fn = sum(1 for c in sv.covered[j] if not c)
                f1 = statement_f1(tp, fp, fn)
            score = (w_f1 * f1 + w_sim * sims[j]) / (w_f1 + w_sim)
            parts.append({"tp": tp, "fp": fp, "fn": fn, "f1": f1, "similarity": sims[j],
                          "score": score})
        b = max(range(m), key=lambda j: parts[j]["score"])
        p = parts[b]
        expl = (f"reference #{b + 1}: {w_f1:g}×F1 {p['f1']:.2f} (TP={p['tp']} FP={p['fp']} "
                f"FN={p['fn']}) + {w_sim:g}×similarity {p['similarity']:.2f}"
                + (f", over {w_f1 + w_sim:g}" if w_f1 + w_sim != 1 else "")
                + f" = {p['score']:.3f}")
        details: dict[str, Any] = {"per_reference": parts, "weights": list(self.weights)}
        if emb_model:
            details["embedding_model"] = emb_model
        return self.result(p["score"], expl, details=details)


# -- context_entity_recall -------------------------------------------------------------------
_ARTICLE_RE = re.compile(r"^(the|a|an)\s+")
_EDGE_PUNCT = " \t\"'“”‘’`.,;:!?()[]{}"


def normalize_entity(entity: str) -> str:
    """Case, Unicode form, spacing, surrounding quotes/punctuation and a leading article do not
    make two mentions different entities ("The Eiffel Tower." = "eiffel tower")."""
    e = unicodedata.normalize("NFKC", entity).casefold()
    e = " ".join(e.split()).strip(_EDGE_PUNCT)
    return _ARTICLE_RE.sub("", e).strip(_EDGE_PUNCT)


class ContextEntityRecall(JudgeMetric):
    """|entities of the reference ∩ entities of the contexts| / |entities of the reference|."""

    name = "context_entity_recall"
    value_range = (0.0, 1.0)
    requires = frozenset({CONTEXTS, GROUND_TRUTHS})
    description = "Share of the reference's entities found in the contexts (Ragas)"

    def __init__(self, *, threshold: float | None = 0.5) -> None:
        self.threshold = threshold

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        texts = {f"reference_{j}": gt for j, gt in enumerate(record.ground_truths)}
        texts.update({f"context_{i}": c.text for i, c in enumerate(record.contexts)})
        ents = await RS.entities(session, texts, usage, record_id=record.record_id)
        in_contexts = {normalize_entity(e) for i in range(len(record.contexts))
                       for e in ents[f"context_{i}"]} - {""}
        parts: list[dict[str, Any]] = []
        for j in range(len(record.ground_truths)):
            wanted: dict[str, str] = {}
            for e in ents[f"reference_{j}"]:
                wanted.setdefault(normalize_entity(e), e)
            wanted.pop("", None)
            found = [orig for key, orig in wanted.items() if key in in_contexts]
            missing = [orig for key, orig in wanted.items() if key not in in_contexts]
            parts.append({"entities": list(wanted.values()), "found": found, "missing": missing,
                          "recall": len(found) / len(wanted) if wanted else None})
        scored = [j for j, p in enumerate(parts) if p["recall"] is not None]
        if not scored:
            return Score.failed(self.name, "the references have no entities to recall "
                                "(Ragas: 0)", metric=self.name, metric_version=self.version,
                                details={"per_reference": parts})
        b = max(scored, key=lambda j: parts[j]["recall"])
        p = parts[b]
        expl = (f"reference #{b + 1}: {len(p['found'])} of {len(p['entities'])} entities in the "
                "contexts")
        if p["missing"]:
            expl += "; missing: " + " | ".join(e[:60] for e in p["missing"][:5])
        return self.result(p["recall"], expl, details={
            "per_reference": parts, "context_entities": len(in_contexts)})


# -- ragas_context_relevancy -----------------------------------------------------------------
class RagasContextRelevancy(JudgeMetric):
    """Sentences of the contexts needed to answer the query / all sentences of the contexts."""

    name = "ragas_context_relevancy"
    value_range = (0.0, 1.0)
    requires = frozenset({QUERY, CONTEXTS})
    description = "Share of context sentences needed to answer the query (Ragas, sentence level)"

    def __init__(self, *, threshold: float | None = 0.5) -> None:
        self.threshold = threshold

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        per_context = [split_sentences(c.text) for c in record.contexts]
        sentences = [s for sents in per_context for s in sents]
        if not sentences:
            return Score.failed(self.name, "the contexts have no sentences (Ragas: 0)",
                                metric=self.name, metric_version=self.version)
        verdicts = await RS.sentence_verdicts(session, record, sentences, usage)
        counts, k = [], 0
        for sents in per_context:
            counts.append([sum(verdicts[k:k + len(sents)]), len(sents)])
            k += len(sents)
        n_rel = sum(verdicts)
        return self.result(n_rel / len(sentences),
                           f"{n_rel} of {len(sentences)} context sentences needed to answer "
                           f"the query", details={"relevant_per_context": counts})


# -- Ragas-flavoured names for the shared-step metrics ---------------------------------------
class RagasFaithfulness(Faithfulness):
    """Supported claims / claims, as ``faithfulness``; but an answer without claims is an error
    score (Ragas: NaN), not 1."""

    name = "ragas_faithfulness"
    description = "Share of answer claims supported by the contexts (Ragas; no claims → error)"

    def no_claims(self) -> Score:
        return Score.failed(self.name, "the answer makes no claims (Ragas: NaN)",
                            metric=self.name, metric_version=self.version)


class RagasContextPrecision(ContextPrecision):
    """``context_precision`` with Ragas' denominator: Σ_k precision@k·v_k / (Σ_k v_k + 1e-10)."""

    name = "ragas_context_precision"
    description = "Rank-weighted precision of useful contexts, Ragas' 1e-10 denominator"

    def __init__(self, *, threshold: float | None = 0.5) -> None:
        super().__init__(flavour="ragas", threshold=threshold)


class RagasContextRecall(ContextRecall):
    """Reference statements attributable to the contexts / reference statements (Ragas; the
    formula is ``context_recall``'s)."""

    name = "ragas_context_recall"
    description = "Share of reference statements attributable to the contexts (Ragas)"


RAGAS_METRICS: tuple[type[Metric], ...] = (
    RagasFaithfulness, RagasContextPrecision, RagasContextRecall, RagasAnswerRelevancy,
    AnswerSimilarity, RagasAnswerCorrectness, ContextEntityRecall, RagasContextRelevancy,
)
