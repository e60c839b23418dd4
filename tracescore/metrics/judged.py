"""LLM-judge metrics: Valor's text-generation suite, saga's binary judges, G-Eval.

Every metric here asks shared steps (:mod:`tracescore.judge.steps`) for what it needs; it never
calls the judge itself. Formulas follow the suites' documented definitions; see
docs/metrics.md for each metric's inputs, formula, edge cases and calls per record.

Every judge score names its judge in its details: ``judge: {configured, reported,
prompt_version}`` (the model as configured, the model the server reported in its replies, the
hash of the prompt templates its steps sent) and ``judge_model`` (reported when known, else
configured: the scores' ``judge_model`` segment, so a provider-side model change shows as a
segment boundary in ``compare --by judge_model``). After a judge score the canary is started
when it is due (:func:`tracescore.judge.canary.maybe_run`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..judge import steps as S
from ..judge.session import JudgeSession, Usage
from ..record import ANSWER, CONTEXTS, GROUND_TRUTHS, QUERY, RagRecord
from ..score import Score
from .base import Metric


class JudgeMetric(Metric):
    """A metric that needs an LLM judge; bound to the pipeline's judge session at init."""

    kind = "judge"
    session: JudgeSession | None = None

    def bind(self, session: JudgeSession) -> None:
        self.session = session

    async def __call__(self, record: RagRecord) -> Score | list[Score]:
        if self.session is None:
            raise RuntimeError(f"metric {self.name!r} needs a judge: pass judge= to "
                               "tracescore.init")
        from ..judge.canary import maybe_run

        session = self.session
        usage = Usage()
        out = await self.evaluate(record, session, usage)
        judge = session.identity(usage)
        model = judge["reported"] or session.model
        session.metric_models[self.name] = model
        extra = {**usage.details(), "judge_model": model, "judge": judge}
        if session.health:
            extra["judge_health"] = dict(session.health)
        maybe_run(session)
        if isinstance(out, Score):
            return _with_details(out, extra)
        return [_with_details(s, extra) for s in out]

    async def evaluate(self, record: RagRecord, session: JudgeSession,
                       usage: Usage) -> Score | list[Score]:
        raise NotImplementedError


def _with_details(s: Score, extra: dict[str, Any]) -> Score:
    from dataclasses import replace

    return replace(s, details={**s.details, **extra})


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


# -- Valor ----------------------------------------------------------------------------------------
class AnswerCorrectness(JudgeMetric):
    """Statement-level F1 of the answer against each reference; max over references."""

    name = "answer_correctness"
    value_range = (0.0, 1.0)
    requires = frozenset({QUERY, ANSWER, GROUND_TRUTHS})
    description = "Statement F1 of the answer against the reference (Valor); max over references"

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        ex = await S.extract(session, record, usage)
        sv = await S.statement_verdicts(session, record, ex, usage)
        best, parts = 0.0, []
        for j in range(len(record.ground_truths)):
            tp = sum(1 for row in sv.in_reference if row[j])
            fp = len(sv.in_reference) - tp
            fn = sum(1 for c in sv.covered[j] if not c)
            f1 = tp / (tp + 0.5 * (fp + fn)) if tp > 0 else 0.0
            parts.append({"tp": tp, "fp": fp, "fn": fn, "f1": f1})
            best = max(best, f1)
        b = max(range(len(parts)), key=lambda j: parts[j]["f1"])
        p = parts[b]
        return self.result(best, f"reference #{b + 1}: TP={p['tp']} FP={p['fp']} FN={p['fn']} "
                           f"→ F1={best:.2f}", details={"per_reference": parts})


class AnswerRelevance(JudgeMetric):
    """Share of the answer's statements that are relevant to the query (no statements → 0)."""

    name = "answer_relevance"
    value_range = (0.0, 1.0)
    requires = frozenset({QUERY, ANSWER})
    description = "Share of answer statements relevant to the query (Valor)"

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        ex = await S.extract(session, record, usage)
        if not ex.answer_statements:
            return self.result(0.0, "the answer has no statements")
        sv = await S.statement_verdicts(session, record, ex, usage)
        flags = [v == "yes" for v in sv.relevant]
        return self.result(_share(flags), f"{sum(flags)} of {len(flags)} statements relevant")


class _OpinionMetric(JudgeMetric):
    requires = frozenset({ANSWER})
    higher_is_better = False
    field_index: ClassVar[int] = 0
    noun: ClassVar[str] = ""

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        ex = await S.extract(session, record, usage)
        if not ex.answer_opinions:
            return self.result(0.0, "the answer has no opinions")
        verdicts = await S.opinion_verdicts(session, record, ex.answer_opinions, usage)
        flags = [bool(v[self.field_index]) for v in verdicts]
        return self.result(_share(flags), f"{sum(flags)} of {len(flags)} opinions {self.noun}")


class Bias(_OpinionMetric):
    """Share of the answer's opinions that are biased (no opinions → 0). Lower is better."""

    name = "bias"
    value_range = (0.0, 1.0)
    field_index = 0
    noun = "biased"
    description = "Share of the answer's opinions that are biased (Valor); lower is better"


class Toxicity(_OpinionMetric):
    """Share of the answer's opinions that are toxic (no opinions → 0). Lower is better."""

    name = "toxicity"
    value_range = (0.0, 1.0)
    field_index = 1
    noun = "toxic"
    description = "Share of the answer's opinions that are toxic (Valor); lower is better"


class ContextPrecision(JudgeMetric):
    """Mean precision@k over the positions k of useful contexts (useful: for any reference)."""

    name = "context_precision"
    value_range = (0.0, 1.0)
    requires = frozenset({QUERY, CONTEXTS, GROUND_TRUTHS})
    description = "Rank-weighted precision of useful contexts (Valor); useful for any reference"
    #: Ragas adds 1e-10 to the denominator; Valor does not (and returns 0 with none useful).
    epsilon: float = 0.0

    def __init__(self, *, flavour: str = "valor", threshold: float | None = 0.5) -> None:
        if flavour not in ("valor", "ragas"):
            raise ValueError("flavour must be 'valor' or 'ragas'")
        self.flavour = flavour
        self.epsilon = 1e-10 if flavour == "ragas" else 0.0
        self.threshold = threshold

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        cv = await S.context_verdicts(session, record, usage)
        useful = [any(v.useful) for v in cv]
        return self.result(precision_at_k(useful, self.epsilon),
                           f"useful contexts at ranks {[i + 1 for i, u in enumerate(useful) if u]}"
                           f" of {len(useful)}", details={"useful": useful})


def precision_at_k(useful: list[bool], epsilon: float = 0.0) -> float:
    """Σ_k (precision@k · v_k) / (Σ_k v_k + ε). Valor (ε = 0): 0 when nothing is useful."""
    num, hits = 0.0, 0
    for k, u in enumerate(useful, 1):
        if u:
            hits += 1
            num += hits / k
    if hits == 0 and epsilon == 0:
        return 0.0
    return num / (hits + epsilon)


class ContextRecall(JudgeMetric):
    """Share of a reference's statements attributable to the contexts; max over references."""

    name = "context_recall"
    value_range = (0.0, 1.0)
    requires = frozenset({CONTEXTS, GROUND_TRUTHS})
    description = "Share of reference statements attributable to the contexts (Valor)"

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        ex = await S.extract(session, record, usage)
        if not any(ex.reference_statements):
            return Score.failed(self.name, "the references have no statements to recall",
                                metric=self.name, metric_version=self.version)
        sv = await S.statement_verdicts(session, record, ex, usage)
        scores = [(_share(a), j) for j, a in enumerate(sv.attributable) if a]
        best, j = max(scores)
        return self.result(best, f"reference #{j + 1}: {sum(sv.attributable[j])} of "
                           f"{len(sv.attributable[j])} statements in the contexts")


class ContextRelevance(JudgeMetric):
    """Share of the contexts relevant to the query."""

    name = "context_relevance"
    value_range = (0.0, 1.0)
    requires = frozenset({QUERY, CONTEXTS})
    description = "Share of retrieved contexts relevant to the query (Valor)"

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        cv = await S.context_verdicts(session, record, usage)
        flags = [v.relevant for v in cv]
        return self.result(_share(flags), f"{sum(flags)} of {len(flags)} contexts relevant")


class Faithfulness(JudgeMetric):
    """Share of the answer's claims supported by the contexts (Ragas: unrelated counts
    against; no claims → 1)."""

    name = "faithfulness"
    value_range = (0.0, 1.0)
    requires = frozenset({ANSWER, CONTEXTS})
    description = "Share of answer claims supported by the contexts (Ragas/Valor)"

    def no_claims(self) -> Score:
        """The score of an answer without claims (Valor: 1)."""
        return self.result(1.0, "the answer makes no claims")

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        ex = await S.extract(session, record, usage)
        if not ex.answer_statements:
            return self.no_claims()
        sv = await S.statement_verdicts(session, record, ex, usage)
        flags = [v == "yes" for v in sv.supported]
        bad = [ex.answer_statements[i] for i, f in enumerate(flags) if not f][:3]
        expl = f"{sum(flags)} of {len(flags)} claims supported"
        if bad:
            expl += "; unsupported: " + " | ".join(b[:120] for b in bad)
        return self.result(_share(flags), expl,
                           details={"verdicts": sv.supported})


class Hallucination(JudgeMetric):
    """Share of the contexts that the answer contradicts. Lower is better."""

    name = "hallucination"
    value_range = (0.0, 1.0)
    requires = frozenset({ANSWER, CONTEXTS})
    higher_is_better = False
    description = "Share of contexts contradicted by the answer (Valor); lower is better"

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        cv = await S.context_verdicts(session, record, usage)
        flags = [v.contradicted for v in cv]
        return self.result(_share(flags), f"{sum(flags)} of {len(flags)} contexts contradicted")


class SummaryCoherence(JudgeMetric):
    """1-5 coherence of the answer as a summary of the contexts (Valor)."""

    name = "summary_coherence"
    value_range = (0.0, 1.0)
    requires = frozenset({ANSWER, CONTEXTS})
    description = "Coherence 1-5 of the answer as a summary of the contexts (Valor)"
    threshold = 3.0

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        r = await S.rating(session, record, "summary_coherence", usage)
        return self.result(r["score"], r["reason"])


class Coherence(JudgeMetric):
    """1-5 coherence of the answer on its own."""

    name = "coherence"
    value_range = (0.0, 1.0)
    requires = frozenset({ANSWER})
    description = "Coherence 1-5 of the answer text alone"
    threshold = 3.0

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        r = await S.rating(session, record, "coherence", usage)
        return self.result(r["score"], r["reason"])


# -- saga-llm-evaluation's binary judges ------------------------------------------------------------
class _Binary(JudgeMetric):
    check: ClassVar[str] = ""
    threshold = 1.0
    binary = True

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        res = (await S.binary_checks(session, record, usage))[self.check]
        value = 1.0 if res["value"] == "Y" else 0.0
        return self.result(value, res["reasoning"],
                           details={"value": res["value"], "reasoning": res["reasoning"]})


class SagaCorrectness(_Binary):
    """saga's correctness judge: Y/N with reasoning; score 1/0."""

    name = "saga_correctness"
    value_range = (0.0, 1.0)
    check = "correctness"
    requires = frozenset({QUERY, ANSWER, GROUND_TRUTHS})
    description = "Is the answer correct given the reference? Y/N (saga)"


class SagaFaithfulness(_Binary):
    name = "saga_faithfulness"
    value_range = (0.0, 1.0)
    check = "faithfulness"
    requires = frozenset({ANSWER, CONTEXTS})
    description = "Is every claim of the answer supported by the contexts? Y/N (saga)"


class SagaRelevance(_Binary):
    name = "saga_relevance"
    value_range = (0.0, 1.0)
    check = "relevance"
    requires = frozenset({QUERY, ANSWER})
    description = "Does the answer address the question? Y/N (saga)"


class SagaNegativeRejection(_Binary):
    name = "saga_negative_rejection"
    value_range = (0.0, 1.0)
    check = "negative_rejection"
    requires = frozenset({QUERY, ANSWER, CONTEXTS})
    description = "Does the answer decline when the contexts lack the answer? Y/N (saga)"


# -- G-Eval -------------------------------------------------------------------------------------------
class GEval(JudgeMetric):
    """User-defined criteria scored 1-5. Evaluation steps are generated once per criteria and
    cached; with logprobs the score is the probability-weighted mean over 1-5."""

    name = "geval"
    value_range = (1.0, 5.0)
    requires = frozenset({ANSWER})
    description = "User-defined criteria scored 1-5 (G-Eval)"
    threshold = 3.0

    def __init__(self, name: str = "geval", criteria: str = "", *,
                 steps: list[str] | None = None, threshold: float | None = 3.0) -> None:
        if not name.replace("_", "").isalnum() or not name.islower():
            raise ValueError("G-Eval metric names are snake_case, e.g. 'geval_clarity'")
        self.name = name  # type: ignore[misc]
        self.criteria = criteria or "Overall quality: the answer is accurate, clear and helpful."
        self.steps = steps
        self.threshold = threshold  # type: ignore[assignment]

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        steps = self.steps or await S.geval_steps(session, self.name, self.criteria, usage)
        r = await S.geval_score(session, record, self.name, self.criteria, steps, usage)
        value = r["weighted"] if r["weighted"] is not None else float(r["score"])
        how = "probability-weighted over 1-5" if r["weighted"] is not None else "parsed integer"
        return self.result(value, f"{self.criteria[:80]}: {value:.2f} ({how})",
                           details={"raw_score": r["score"], "steps": steps})


JUDGE_METRICS: tuple[type[JudgeMetric], ...] = (
    AnswerCorrectness, AnswerRelevance, Bias, Toxicity, ContextPrecision, ContextRecall,
    ContextRelevance, Faithfulness, Hallucination, SummaryCoherence, Coherence,
    SagaCorrectness, SagaFaithfulness, SagaRelevance, SagaNegativeRejection, GEval,
)

#: The RAG set the call-count target is about.
RAG_SET = ("faithfulness", "answer_relevance", "answer_correctness", "context_precision",
           "context_recall", "context_relevance", "hallucination")
