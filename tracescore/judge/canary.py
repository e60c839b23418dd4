"""Judge canary: known-answer verdict cases run through the configured judge.

A judge that always gives the same verdict, or agrees with the known answers about as often as
a coin, gets a loud warning: in the logs, in ``tracescore report``, and as
``tracescore.judge.degenerate`` on every score it produces. The cases are our own: claims
supported by, contradicted by, or unrelated to a context, and contexts relevant or irrelevant
to a question.

When it runs (in whichever process scores: the app's scorer or ``tracescore worker``):

- at start-up, in the background (never delaying the app); its steps are cached like any
  judge step, so a restart with the same model costs nothing;
- again every ``JudgeSession.canary_every_s`` (default a day; ``$TRACESCORE_JUDGE_CANARY_EVERY``
  sets it: ``"6h"``, ``"off"``), when the reported judge model changes and when a prompt
  template changes — these runs ask the judge itself, never the cache (:meth:`.fresh`), since
  a cached verdict cannot show the judge changing. They are started from the scoring loop
  (:func:`maybe_run`, after a judge score), so a scorer with nothing to score runs none. In a
  fleet, one worker runs a scheduled run: the others see the lease (``monitor_lease`` row
  ``judge_canary:<model>``) or the stored run and skip it;
- on demand with ``tracescore judge-check``.

Every run is kept in the ``judge_canary`` table (schema 4): when, the configured and reported
models, the prompt version, what triggered it, cases, agreed, the share of "yes", per-case
expected/got. :mod:`tracescore.monitor.judge_drift` watches that history.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..record import Context, RagRecord
from . import steps as S
from .base import JudgeError, RetryLater
from .session import JudgeSession, Usage, prompt_version

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


TRIGGERS = ("startup", "schedule", "model_changed", "prompt_changed", "manual")
#: How long a worker holds the fleet's canary lease (a run takes a few judge calls).
LEASE_S = 600.0
#: After a refused lease or a failed run, wait this long before trying again.
RETRY_S = 60.0


@dataclass(frozen=True)
class CanaryResult:
    agreement: float
    cases: int
    degenerate: bool
    reason: str
    yes_share: float
    agreed: int = 0
    trigger: str = "startup"
    reported_model: str = ""
    prompt_version: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"agreement": round(self.agreement, 3), "cases": self.cases,
                "degenerate": self.degenerate, "reason": self.reason,
                "yes_share": round(self.yes_share, 3)}


async def run_canary(session: JudgeSession, *, min_agreement: float = 0.75,
                     trigger: str = "startup", fresh: bool | None = None) -> CanaryResult:
    """Run the known-answer cases once, store the run in the history and the judge's health.

    ``trigger``: why it runs (:data:`TRIGGERS`); ``fresh`` (default: for every trigger but
    ``startup`` and ``manual``): ask the judge, not the cache. A start-up run is stored as
    ``prompt_changed`` / ``model_changed`` when the prompts or the reported model differ from
    the last stored run of this configured model."""
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {TRIGGERS}, got {trigger!r}")
    if fresh is None:
        fresh = trigger not in ("startup", "manual")
        if trigger == "startup" and _last_run(session) is None:
            # No run of this judge is stored (the last process stopped before its start-up
            # run was done, or this is the first): its cached steps, if any, say nothing of
            # which model answered them. Ask the judge, so the stored run names it.
            fresh = True
    if fresh:
        with session.fresh():
            return await _run(session, min_agreement, trigger)
    return await _run(session, min_agreement, trigger)


#: How many times a run is asked again when the judge's reported model changed during it.
MIXED_RETRIES = 2


async def _run(session: JudgeSession, min_agreement: float, trigger: str) -> CanaryResult:
    expected, got, steps, invalid, usage = await _ask(session)
    for _ in range(MIXED_RETRIES):
        if len(usage.models) <= 1:
            break
        # The reported model changed while the run asked (some cases answered by the old
        # model, some by the new): such a run measures neither. Ask again: the first whole run
        # of the new model is the model_changed run (no second one is scheduled for it).
        log.info("tracescore judge canary: the judge's reported model changed during the run "
                 "(%s); asking again", ", ".join(sorted(usage.models)))
        if trigger == "schedule":
            trigger = "model_changed"
            session.canary_seen_change = session.model_change
        expected, got, steps, invalid, usage = await _ask(session)
    return _finish(session, min_agreement, trigger, expected, got, steps, invalid, usage)


async def _ask(session: JudgeSession) -> tuple[list[bool], list[bool], list[str], int, Usage]:
    """The known-answer cases asked once: (expected, got, steps, invalid steps, usage)."""
    expected: list[bool] = []
    got: list[bool] = []
    steps: list[str] = []
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
        steps += ["statements"] * len(want)
        want = [True] + [rel for _, rel in others]
        try:
            cv = await S.context_verdicts(session, record, usage)
            got += [v.relevant for v in cv]
        except JudgeError:
            invalid += 1
            got += [not w for w in want]
        expected += want
        steps += ["contexts"] * len(want)
    return expected, got, steps, invalid, usage


def _finish(session: JudgeSession, min_agreement: float, trigger: str, expected: list[bool],
            got: list[bool], steps: list[str], invalid: int, usage: Usage) -> CanaryResult:
    agreed = sum(e == g for e, g in zip(expected, got))
    agree = agreed / len(expected)
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
    # (a run served wholly from the cache asked no one: the model is the one that answered
    # the stored run its verdicts repeat)
    last = None if usage.reported or session.reported_model else _last_run(session)
    reported = usage.reported or session.reported_model or \
        (last or {}).get("reported_model") or ""
    pv = prompt_version(usage.prompts)
    trigger = _startup_trigger(session, trigger, reported, pv)
    if trigger == "schedule" and reported and _model_changed_since_last(session, reported):
        # the first run of a newly reported model, whichever schedule brought it: it is the
        # model_changed run (a later one for the same change would only repeat it)
        trigger = "model_changed"
        session.canary_seen_change = session.model_change
    result = CanaryResult(agree, len(expected), bool(reason), reason, yes, agreed, trigger,
                          reported, pv)
    _store_run(session, result, [{"step": s, "expected": e, "got": g}
                                 for s, e, g in zip(steps, expected, got)])
    if trigger != "manual":
        session.canary_armed = True
        session.canary_prompts = dict(usage.prompts)
        if session.canary_every_s:
            session.canary_next_at = time.time() + session.canary_every_s
    session.health = result.as_dict()
    try:
        session.store().set_judge_health(session.model, agree, len(expected), bool(reason),
                                         result.as_dict())
    except Exception as exc:  # pragma: no cover - accounting must not break the canary
        log.debug("could not store judge health: %r", exc)
    say_result(session.model, pv, trigger, reason, agree, len(expected))
    return result


def say_result(model: str, prompt_version: str, trigger: str, reason: str, agree: float,
               cases: int) -> None:
    """Log a canary run: a degenerate judge's full WARNING once per (model, prompt version)
    in this process, INFO on the runs after it (a daily schedule would repeat it forever);
    a judge that recovers is forgotten, so a relapse warns again."""
    key = (model, prompt_version)
    if reason and key not in _WARNED:
        _WARNED.add(key)
        log.warning("tracescore judge canary: %s judge %r is DEGENERATE: %s. Its scores are "
                    "flagged tracescore.judge.degenerate; do not trust them.",
                    "the", model, reason)
    elif reason:
        log.info("tracescore judge canary: judge %r is still degenerate (%s run): %s",
                 model, trigger, reason)
    else:
        _WARNED.discard(key)
        log.info("tracescore judge canary: %r agreed with %.0f%% of %d known answers",
                 model, agree * 100, cases)


#: (configured model, prompt version) whose degenerate WARNING this process has logged
_WARNED: set[tuple[str, str]] = set()


def _last_run(session: JudgeSession) -> dict[str, Any] | None:
    """The last stored canary run of the configured model, or None (none, or no history)."""
    try:
        runs = session.store().canary_runs(judge_model=session.model)
    except Exception:  # a database before schema 4, or away
        return None
    return runs[-1] if runs else None


def _startup_trigger(session: JudgeSession, trigger: str, reported: str, pv: str) -> str:
    """A start-up run is news when the prompts or the reported model changed since the last
    stored run of this configured model: it is stored under that trigger."""
    if trigger != "startup":
        return trigger
    try:
        runs = session.store().canary_runs(judge_model=session.model)
    except Exception:  # a database before schema 4, or away: a plain start-up run
        return trigger
    if not runs:
        return trigger
    last = runs[-1]
    if pv and last.get("prompt_version") and last["prompt_version"] != pv:
        return "prompt_changed"
    if reported and last.get("reported_model") and last["reported_model"] != reported:
        return "model_changed"
    return trigger


def _model_changed_since_last(session: JudgeSession, reported: str) -> bool:
    try:
        runs = session.store().canary_runs(judge_model=session.model)
    except Exception:  # a database before schema 4, or away
        return False
    last = runs[-1].get("reported_model") if runs else None
    return bool(last) and last != reported


def _store_run(session: JudgeSession, r: CanaryResult, cases: list[dict[str, Any]]) -> None:
    try:
        session.store().add_canary_run({
            "at": time.time(), "judge_model": session.model, "reported_model": r.reported_model,
            "prompt_version": r.prompt_version, "trigger": r.trigger, "cases": r.cases,
            "agreed": r.agreed, "yes_share": r.yes_share, "degenerate": r.degenerate,
            "reason": r.reason, "details": {"cases": cases}})
    except Exception as exc:  # history must not break the canary (e.g. a schema-3 database)
        log.debug("could not store the canary run: %r", exc)


# -- runs after start-up ------------------------------------------------------------------------
def due(session: JudgeSession, now: float | None = None) -> str | None:
    """Why the canary should run now (a trigger), or None. Cheap: memory only."""
    if not session.canary_armed:
        return None  # no start-up run (judge_canary=False, or not finished yet)
    task = session.canary_task
    if task is not None and not task.done():
        return None
    change = session.model_change
    if change is not None and change != session.canary_seen_change:
        return "model_changed"
    if session.prompt_changed:
        return "prompt_changed"
    now = time.time() if now is None else now
    if session.canary_every_s and now >= session.canary_next_at:
        return "schedule"
    return None


def maybe_run(session: JudgeSession) -> None:
    """Start a canary run in the background when one is due (called on the scoring loop after
    a judge score; never blocks, never raises)."""
    try:
        trigger = due(session)
        if trigger is None:
            return
        if trigger == "model_changed":
            session.canary_seen_change = session.model_change
        session.canary_task = asyncio.get_running_loop().create_task(
            run_when_due(session, trigger))
    except Exception as exc:  # pragma: no cover - scoring must go on
        log.debug("tracescore: could not start the judge canary: %r", exc)


async def run_when_due(session: JudgeSession, trigger: str) -> CanaryResult | None:
    """Run the canary for ``trigger`` unless another worker of the fleet holds the canary
    lease or already stored a run that covers it; returns the result, or None if skipped."""
    from ..store import monitor_state as MS

    every = session.canary_every_s or 0.0
    now = time.time()
    owner = f"{os.getpid()}:{uuid.uuid4().hex[:8]}"
    name = f"judge_canary:{session.model}"[:200]
    store: Any = None
    held = False
    try:
        store = session.store()
        held = MS.acquire_lease(store, name, owner, LEASE_S)
        if not held:  # another worker is running it
            session.canary_next_at = now + min(every or RETRY_S, RETRY_S)
            return None
        runs = store.canary_runs(judge_model=session.model, since=now - max(every, RETRY_S))
        if trigger == "schedule" and every and runs and runs[-1]["at"] > now - every:
            session.canary_next_at = float(runs[-1]["at"]) + every
            return None
        change = session.model_change
        if trigger == "model_changed" and change is not None and any(
                r["reported_model"] == change[1] and r["at"] >= change[2] - 1.0
                and r["trigger"] != "startup" for r in runs):
            return None
        return await run_canary(session, trigger=trigger)
    except RetryLater as exc:  # judge down or over budget: try again later
        log.info("tracescore judge canary (%s) postponed: %s", trigger, exc)
        session.canary_next_at = now + RETRY_S
        if trigger == "model_changed":
            session.canary_seen_change = None
        return None
    except Exception as exc:
        log.warning("tracescore judge canary (%s) could not run: %s", trigger, exc)
        session.canary_next_at = now + max(RETRY_S, min(every, 3600.0))
        return None
    finally:
        if held and store is not None:
            try:
                MS.release_lease(store, name, owner)
            except Exception:  # the lease expires by itself
                pass
