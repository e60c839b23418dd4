"""``rgb_noise``: the per-record facts behind RGB's four abilities on live traffic.

RGB builds its test sets so that each question probes one ability; live records are not
labelled, so this judge metric says, per record, which ability it exercises and stores the
verdicts in the score's details, where :mod:`tracescore.reports.rgb` aggregates them
(``tracescore report --rgb``). See docs/rgb.md for the definitions.

The value is the record's noise ratio: the share of its contexts that the judge finds not
relevant to the question (lower is better; no pass/fail threshold).
"""

from __future__ import annotations

from typing import Any

from ..judge import steps as S
from ..judge.rgb_steps import rgb_verdicts
from ..judge.session import JudgeSession, Usage
from ..record import CONTEXTS, GROUND_TRUTHS, QUERY, RagRecord
from ..score import Score
from .judged import JudgeMetric

#: Lower bounds of RGB's noise-ratio buckets (RGB tests 0, 0.2, 0.4, 0.6, 0.8 and 1.0).
BUCKETS = (0, 20, 40, 60, 80)


def noise_bucket(n_contexts: int, n_relevant: int) -> int | None:
    """The 20 %-bucket (0, 20, 40, 60, 80) of a noise ratio, floored; None for 100 % noise
    (no relevant context: that record belongs to negative rejection) or no contexts.

    Integer arithmetic, so 3 noisy of 5 lands in 60, not in 40 through a float rounding.
    """
    if n_contexts <= 0 or n_relevant <= 0:
        return None
    return 20 * ((5 * (n_contexts - n_relevant)) // n_contexts)


def integration_need(groups: list[list[list[int]]]) -> tuple[bool, list[int]]:
    """Does the answer need several contexts? ``groups``: per reference (or the answer alone),
    per statement, the contexts that each support it on their own.

    A group needs integration when it has a supported statement and no single context supports
    all of its supported statements (so at least two contexts each support a part). References
    are alternative answers: the record needs integration only when every reference with a
    supported statement does. Returns (needs, supporting contexts of those groups).
    """
    usable = [[s for s in g if s] for g in groups]
    usable = [g for g in usable if g]
    supporting = sorted({i for g in usable for s in g for i in s})
    if not usable:
        return False, supporting
    needs = all(not set.intersection(*(set(s) for s in g)) for g in usable)
    return needs, supporting


class RgbNoise(JudgeMetric):
    """Noise ratio of the contexts, and what RGB's abilities need: relevant contexts,
    counterfactual contexts, the contexts supporting each statement of the reference."""

    name = "rgb_noise"
    value_range = (0.0, 1.0)
    version = "1"
    requires = frozenset({QUERY, CONTEXTS})
    uses = frozenset({GROUND_TRUTHS})  # statements come from the reference when there is one
    higher_is_better = False
    description = ("RGB live: share of contexts not relevant (noise), with counterfactual and "
                   "integration verdicts for `tracescore report --rgb`")

    def __init__(self, *, threshold: float | None = None) -> None:
        self.threshold = threshold

    async def evaluate(self, record: RagRecord, session: JudgeSession, usage: Usage) -> Score:
        cv = await S.context_verdicts(session, record, usage)
        ex = await S.extract(session, record, usage)
        if record.ground_truths:
            source = "reference"
            groups_text = [list(g) for g in ex.reference_statements]
        else:
            source = "answer"
            groups_text = [list(ex.answer_statements)]
        flat = [s for g in groups_text for s in g]
        rv = await rgb_verdicts(session, record, flat, usage)
        groups: list[list[list[int]]] = []
        k = 0
        for g in groups_text:
            groups.append(rv.supported_by[k : k + len(g)])
            k += len(g)
        needs, supporting = integration_need(groups)

        n = len(cv)
        relevant = [v.relevant for v in cv]
        n_rel = sum(relevant)
        ratio = (n - n_rel) / n
        counterfactual = [i for i, f in enumerate(rv.counterfactual) if f]
        details: dict[str, Any] = {
            "n_contexts": n, "n_relevant": n_rel, "noise_ratio": ratio,
            "noise_bucket": noise_bucket(n, n_rel), "relevant": relevant,
            "counterfactual_contexts": counterfactual,
            "counterfactual_reasons": {str(i): rv.reasons[i][:200] for i in counterfactual},
            "answer_contradicts": [i for i, v in enumerate(cv) if v.contradicted],
            "statements_from": source if flat else None,
            "statement_support": groups,
            "supporting_contexts": supporting,
            "needs_integration": needs,
        }
        parts = [f"{n_rel} of {n} contexts relevant (noise {ratio:.0%})"]
        if counterfactual:
            parts.append(f"counterfactual: #{', #'.join(str(i + 1) for i in counterfactual)}")
        if needs:
            parts.append(f"the {source} needs contexts "
                         f"#{', #'.join(str(i + 1) for i in supporting)} together")
        return self.result(ratio, "; ".join(parts), details=details)
