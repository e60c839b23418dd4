"""Judge canary: known-answer verdict cases run through the configured judge.

A judge that always gives the same verdict, or agrees with the known answers about as often as
a coin, gets a loud warning: in the logs, in ``tracescore report``, and as
``tracescore.judge.degenerate`` on every score it produces. It runs in the background at
start-up (never delaying the app) and on demand with ``tracescore judge-check``. The cases are
our own: claims supported by, contradicted by, or unrelated to a context, and contexts relevant
or irrelevant to a question. Results are cached like any judge step, so a restart with the same
model costs nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..record import Context, RagRecord
from . import steps as S
from .base import JudgeError
from .session import JudgeSession, Usage

log = logging.getLogger("tracescore")

#: (context, question, [(claim, supported?)], [(other context, relevant?)])
CASES: tuple[tuple[str, str, tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]], ...] = (
    (
        "The Eiffel Tower is in Paris. It was completed in 1889 and is 330 metres tall.",
        "When was the Eiffel Tower completed?",
        (("The Eiffel Tower was completed in 1889.", True),
         ("The Eiffel Tower was completed in 1925.", False),
         ("The Eiffel Tower is made of solid gold.", False),
         ("The Eiffel Tower is 330 metres tall.", True),
         ("Bananas are rich in potassium.", False)),
        (("Bananas grow in tropical climates and are rich in potassium.", False),),
    ),
    (
        "Insulin is a hormone made by the pancreas. It lowers blood sugar by helping cells "
        "absorb glucose.",
        "Which organ produces insulin?",
        (("Insulin is produced by the pancreas.", True),
         ("Insulin is produced by the liver.", False),
         ("Insulin raises blood sugar.", False),
         ("Insulin helps cells absorb glucose.", True),
         ("The Moon orbits the Earth every 27 days.", False)),
        (("The pancreas also makes digestive enzymes that break down food.", True),
         ("Mount Everest is the highest mountain above sea level.", False)),
    ),
    (
        "The Larkspur Commuter e-bike has a 500 Wh battery and a range of up to 90 km.",
        "What is the range of the Commuter?",
        (("The Commuter has a range of up to 90 km.", True),
         ("The Commuter has a 750 Wh battery.", False),
         ("The Commuter has a 500 Wh battery.", True),
         ("The Commuter is waterproof to 100 metres.", False)),
        (("Range depends on assist level, temperature and rider weight.", True),
         ("Our office is closed on public holidays.", False)),
    ),
)


@dataclass(frozen=True)
class CanaryResult:
    agreement: float
    cases: int
    degenerate: bool
    reason: str
    yes_share: float

    def as_dict(self) -> dict[str, Any]:
        return {"agreement": round(self.agreement, 3), "cases": self.cases,
                "degenerate": self.degenerate, "reason": self.reason,
                "yes_share": round(self.yes_share, 3)}


async def run_canary(session: JudgeSession, *, min_agreement: float = 0.75) -> CanaryResult:
    expected: list[bool] = []
    got: list[bool] = []
    invalid = 0  # steps whose replies were unusable
    usage = Usage()
    for ctx, question, claims, others in CASES:
        record = RagRecord(trace_id="0" * 32, span_id="0" * 16, query=question,
                           contexts=(Context(ctx), *(Context(o) for o, _ in others)),
                           answer=" ".join(c for c, _ in claims))
        ex = S.Extraction([c for c, _ in claims], [], [])
        want = [ok for _, ok in claims]
        try:
            sv = await S.statement_verdicts(session, record, ex, usage)
            got += [v == "yes" for v in sv.supported]
        except JudgeError:  # no usable verdicts: every case of this step counts as missed
            invalid += 1
            got += [not w for w in want]
        expected += want
        want = [True] + [rel for _, rel in others]
        try:
            cv = await S.context_verdicts(session, record, usage)
            got += [v.relevant for v in cv]
        except JudgeError:
            invalid += 1
            got += [not w for w in want]
        expected += want
    agree = sum(e == g for e, g in zip(expected, got)) / len(expected)
    yes = sum(got) / len(got)
    base = max(sum(expected), len(expected) - sum(expected)) / len(expected)
    if invalid:
        reason = (f"{invalid} of {2 * len(CASES)} canary steps got no valid verdicts; "
                  f"agreement {agree:.0%}")
    elif yes in (0.0, 1.0):
        reason = f"the judge gave the same verdict to all {len(got)} canary cases"
    elif agree < min_agreement:
        reason = (f"the judge agreed with {agree:.0%} of known answers; always answering the "
                  f"majority verdict scores {base:.0%}")
    else:
        reason = ""
    result = CanaryResult(agree, len(expected), bool(reason), reason, yes)
    session.health = result.as_dict()
    try:
        session.store().set_judge_health(session.model, agree, len(expected), bool(reason),
                                         result.as_dict())
    except Exception as exc:  # pragma: no cover - accounting must not break the canary
        log.debug("could not store judge health: %r", exc)
    if reason:
        log.warning("tracescore judge canary: %s judge %r is DEGENERATE: %s. Its scores are "
                    "flagged tracescore.judge.degenerate; do not trust them.",
                    "the", session.model, reason)
    else:
        log.info("tracescore judge canary: %r agreed with %.0f%% of %d known answers",
                 session.model, agree * 100, len(expected))
    return result
