"""Judge drift: a built-in monitor on the judge canary's history (issue 17, section 4).

The canary (:mod:`tracescore.judge.canary`) asks the judge known-answer questions at start-up,
on a schedule and whenever the judge's reported model or prompts change; every run is a row of
``judge_canary``. This monitor, ``judge_drift``, alerts when the judge's agreement with the
known answers drops, and names a change of the model the judge server reports.

The test (documented in docs/monitoring.md, "Judge drift")
----------------------------------------------------------
- **Epoch.** The runs of the latest run's configured model and prompt version. A new
  configuration or prompt (a user's decision) starts a new epoch; a provider swapping the model
  behind the same name does not — that is what the monitor exists to catch.
- **Baseline.** The first ``BASELINE_RUNS`` runs of the epoch, their cases fed in order to a
  PrPl-EB confidence sequence (:class:`tracescore.stats.confseq.EBSequence`, Waudby-Smith &
  Ramdas 2024); its lower bound at ``alpha / 2`` is the baseline's bound. Until the epoch has
  that many runs the state is NO_DATA ("baseline forming").
- **Current.** The later runs, cut into windows of ``WINDOW_RUNS`` runs; window k = 1, 2, ...
  feeds its cases to a PrPl-EB sequence at ``window_alpha(alpha / 2, k)`` = alpha / (2 k (k+1)),
  checked after every run. A window with fewer than ``MIN_RUNS`` runs reports the previous
  window's final verdict (no flapping at a rollover).
- **Verdict.** ALERT when the current window's upper bound is below the baseline's bound minus
  ``MIN_EFFECT``; WARNING when only its mean is below the baseline's mean minus ``MIN_EFFECT``,
  or (no drop seen) during ``CHANGE_NOTICE_S`` after a change of the reported model; else OK.
- **Guarantee.** The baseline bound fails with probability <= alpha/2 once per epoch; window k's
  sequence fails with probability <= alpha / (2 k (k+1)), summing to alpha/2 over the epoch. So
  while the judge's agreement (the average, over a window's runs, of each run's expected
  agreement given the past: a deterministic judge is covered too) stays at least its baseline
  agreement minus ``MIN_EFFECT``, the probability of any ALERT over the whole epoch is <= alpha
  — however often the monitor is checked, since a check only re-reads runs already stored and
  evidence grows only with new runs.

Runs in whichever process evaluates monitors (:class:`tracescore.monitor.runner.MonitorRunner`
calls :func:`evaluate_with` after its evaluator); the state, its history and its notifications
go through :func:`tracescore.monitor.state.save_evaluation` like every monitor's, under the
evaluator's lease, so ``report`` shows it and the notifier sends it. Blocking database I/O;
never on the app's request path.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats import CarriesEstimate, Estimate
from ..stats.confseq import EBSequence, window_alpha

log = logging.getLogger("tracescore")

__all__ = ["MONITOR", "DriftResult", "evaluate", "evaluate_with", "measure"]

#: The built-in monitor's name (``monitor_state.monitor``).
MONITOR = "judge_drift"
ALPHA = 0.05
BASELINE_RUNS = 3
WINDOW_RUNS = 7
MIN_RUNS = 3
MIN_EFFECT = 0.05
#: How long a change of the reported model keeps the state at WARNING (no drop seen).
CHANGE_NOTICE_S = 86400.0
#: Evaluations in a row that must agree before a better state is taken (a worse one: at once).
HYSTERESIS = 2
_RANK = {"OK": 0, "NO_DATA": 1, "WARNING": 2, "ALERT": 3}


@dataclass(frozen=True)
class DriftResult(CarriesEstimate):
    """One evaluation of the drift test (before hysteresis)."""

    state: str
    estimate: Estimate
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def observations(run: Mapping[str, Any]) -> list[float]:
    """A run's cases as 0/1 agreement, in case order (from its details; else its counts)."""
    details = run.get("details")
    cases = details.get("cases") if isinstance(details, Mapping) else None
    if isinstance(cases, list) and cases and all(isinstance(c, Mapping) for c in cases):
        return [1.0 if bool(c.get("expected")) == bool(c.get("got")) else 0.0 for c in cases]
    n, k = int(run.get("cases") or 0), int(run.get("agreed") or 0)
    return [1.0] * k + [0.0] * max(0, n - k)


def _sequence(runs: Iterable[Mapping[str, Any]], alpha: float) -> EBSequence:
    seq = EBSequence(alpha)
    for r in runs:
        seq.update(observations(r))
    return seq


def model_change(runs: Sequence[Mapping[str, Any]]) -> tuple[str, str, float] | None:
    """The last change of the reported model along ``runs`` (oldest first): (from, to, at)."""
    last: str | None = None
    change = None
    for r in runs:
        model = r.get("reported_model") or ""
        if not model:
            continue
        if last is not None and model != last:
            change = (last, model, float(r["at"]))
        last = model
    return change


def scored_model_change(runs: Sequence[Mapping[str, Any]],
                        scored: Sequence[tuple[str, float]]) -> tuple[str, str, float] | None:
    """A model the judge's *scores* report that the canary has not seen yet: (the canary's
    last reported model, the new one, when the scores first showed it). ``scored``: the
    reported models on the scores (their ``judge_model`` segment) with the start of the
    hour each was first seen, oldest first. The scores see a provider's swap at its first
    reply; the canary only at its next run, which may be hours away (its schedule)."""
    if not runs or not scored:
        return None
    latest = runs[-1]
    seen = {latest.get("reported_model") or "", latest.get("judge_model") or ""}
    newest, first = scored[-1]
    if len(scored) > 1 and scored[-2][1] >= first:
        return None  # two models first seen in one hour: which is newer is not known
    # first seen in the hour of the canary's last run or later (rollup hours: the hour's start)
    if newest and newest not in seen and first >= float(latest["at"]) - 3600.0:
        return (latest.get("reported_model") or latest.get("judge_model") or "?", newest,
                float(first))
    return None


def measure(runs: Sequence[Mapping[str, Any]], now: float, *, alpha: float = ALPHA,
            baseline_runs: int = BASELINE_RUNS, window_runs: int = WINDOW_RUNS,
            min_runs: int = MIN_RUNS, min_effect: float = MIN_EFFECT,
            scored: Sequence[tuple[str, float]] = ()) -> DriftResult | None:
    """The drift verdict from the canary history ``runs`` (oldest first); None without runs.
    ``scored``: the models the scores report (see :func:`scored_model_change`): a model the
    canary has not seen yet raises WARNING at once; the ALERT still waits for the canary's
    evidence. Pure: the same runs give the same verdict."""
    if not runs:
        return None
    latest = runs[-1]
    judge, pv = latest.get("judge_model") or "", latest.get("prompt_version") or ""
    of_judge = [r for r in runs if (r.get("judge_model") or "") == judge]
    epoch = [r for r in of_judge if (r.get("prompt_version") or "") == pv]
    change = model_change(of_judge)
    unseen = scored_model_change(runs, scored)
    if unseen is not None:
        change = unseen
    detail: dict[str, Any] = {"judge_model": judge, "prompt_version": pv, "runs": len(epoch),
                              "reported_model": latest.get("reported_model") or ""}
    said = ""
    if change is not None:
        detail["model_change"] = {"from": change[0], "to": change[1], "at": change[2],
                                  "seen_by": "scores" if unseen is not None else "canary"}
        said = f"judge model changed from {change[0]} to {change[1]} at {_iso(change[2])}"
        if unseen is not None:
            said += (" (reported in the judge's replies to scoring; the canary has not run "
                     "on it yet: an ALERT waits for its evidence)")
    method = (f"canary agreement: anytime-valid empirical-Bernstein confidence sequence per "
              f"window of {window_runs} runs at alpha/(2k(k+1)), against the lower bound of the "
              f"first {baseline_runs} runs at alpha/2 (alpha {alpha:g})")
    if len(epoch) < baseline_runs:
        text = (f"judge {judge}: baseline forming ({len(epoch)} of {baseline_runs} canary runs "
                f"since this model and prompt version)")
        # a model change is news at once, baseline or not (the ALERT waits for evidence)
        noticed = change is not None and now - change[2] < CHANGE_NOTICE_S
        return DriftResult("WARNING" if noticed else "NO_DATA", Estimate.missing(method),
                           f"{said}; {text}" if said else text, detail)
    base = _sequence(epoch[:baseline_runs], alpha / 2)
    base_lo = base.interval()[0]
    base_mean = base.mean if base.mean is not None else 0.0
    rest = epoch[baseline_runs:]
    k = max(1, (len(rest) - 1) // window_runs + 1)
    window = rest[(k - 1) * window_runs:]
    carried = bool(k > 1 and len(window) < min_runs)
    if carried:
        k -= 1
        window = rest[(k - 1) * window_runs:k * window_runs]
    cur = _sequence(window, window_alpha(alpha / 2, k))
    lo, hi = cur.interval()
    mean = cur.mean
    detail.update({"baseline_mean": base_mean, "baseline_bound": base_lo,
                   "baseline_n": base.n, "window": k, "window_runs": len(window),
                   "carried": carried, "min_effect": min_effect,
                   "condition": "canary agreement below the baseline's"})
    floor = base_lo - min_effect
    if mean is None:
        state = "NO_DATA"
        text = (f"judge {judge}: baseline {base_mean:.3f} (bound {base_lo:.3f}, "
                f"n={base.n}); no canary run since")
    else:
        where = f"canary agreement {mean:.3f} [{lo:.3f}, {hi:.3f}] (n={cur.n}, {len(window)} runs)"
        if hi < floor:
            state = "ALERT"
            text = (f"{where}: the whole anytime-valid interval is below the baseline's bound "
                    f"{base_lo:.3f} − {min_effect:g} (baseline agreement {base_mean:.3f}, "
                    f"n={base.n})")
        elif mean < base_mean - min_effect:
            state = "WARNING"
            text = (f"{where}: below the baseline's {base_mean:.3f} − {min_effect:g}; the "
                    f"interval does not confirm it yet")
        else:
            state = "OK"
            text = f"{where}: not below the baseline ({base_mean:.3f}, n={base.n})"
        text = f"judge {judge}: {text}"
    if said:
        text = f"{said}; {text}"
        if state in ("OK", "NO_DATA") and change is not None and now - change[2] < CHANGE_NOTICE_S:
            state = "WARNING"
    est = (Estimate.missing(method, cur.n) if mean is None
           else Estimate(cur.n, mean, lo, hi, method))
    return DriftResult(state, est, text, detail)


def _scored_models(store: Any) -> list[tuple[str, float]]:
    """The models the scores report (``judge_model`` segment), each with the rollup hour it
    was first seen, oldest first (from the hourly rollups: cheap)."""
    from ..read.monitoring import judge_models_seen
    from ..store import monitor_state as S

    try:
        return judge_models_seen(S._reader(store))
    except Exception as exc:  # a database without rollups: the canary alone
        log.debug("tracescore: no judge models in the rollups: %r", exc)
        return []


def _hysteresis(prior: Any, raw: str) -> tuple[str, str | None, int]:
    """(state, pending, streak): worse states at once, better ones after HYSTERESIS
    evaluations in a row (as :mod:`tracescore.monitor.evaluate` does)."""
    if prior is None or _RANK.get(raw, 0) > _RANK.get(prior.state, 0) or raw == prior.state:
        return raw, None, 0
    streak = prior.streak + 1 if prior.pending == raw else 1
    if streak >= HYSTERESIS:
        return raw, None, 0
    return prior.state, raw, streak


def evaluate(store: Any, *, owner: str, channels: Sequence[Any] = (), save: bool = True,
             otel_logger: Any = None, db_label: str = "", now: float | None = None) -> Any:
    """Evaluate ``judge_drift`` on ``store`` (a :func:`tracescore.store.open_store` store of
    this thread) and, with ``save``, store it with its notifications to ``channels`` (objects
    with ``.name`` and ``.kind``) — only while ``owner`` holds the monitors' lease. Returns an
    :class:`tracescore.monitor.evaluate.Evaluation`, or None when there is no canary history
    (no judge, or a database before schema 4). Blocking."""
    from ..store import monitor_state as S
    from . import notify as N
    from .evaluate import Evaluation

    try:
        runs = store.canary_runs()
    except Exception as exc:  # no judge_canary table (schema < 4): nothing to watch
        log.debug("tracescore: no judge canary history: %r", exc)
        return None
    t = S.db_now(store) if now is None else float(now)
    result = measure(runs, t, scored=_scored_models(store))
    if result is None:
        return None
    prior = S.load_states(store).get(MONITOR)
    state, pending, streak = _hysteresis(prior, result.state)
    previous = prior.state if prior is not None else None
    changed = previous != state
    detail = {"summary": result.summary, "method": result.method, "raw": result.state,
              "worst": [], **result.detail}
    saved = False
    if save:
        event = N.AlertEvent(
            monitor=MONITOR, state=state, previous=previous, score="judge_canary",
            statistic="agreement", window_s=0.0, estimate=result.estimate,
            condition="judge canary agreement below its baseline", verdict=result.summary,
            command="tracescore check", db=db_label, at=t)
        # news: a bad state, or a recovery from one (a formed baseline, NO_DATA → OK, is not)
        news = changed and (state in ("ALERT", "WARNING") or previous in ("ALERT", "WARNING"))
        items = N.outbox_items(event, channels) if news else None
        saved = S.save_evaluation(
            store, MONITOR, owner=owner, state=state,
            estimate=result.estimate, detail=detail, test_state={"v": 1}, streak=streak,
            pending=pending, notify=items, at=t)
        if saved and changed:
            N.emit_state_change(otel_logger, event)
    return Evaluation(MONITOR, state, previous, result.state, result.estimate, result.summary,
                      changed, saved, (), None, detail)


def evaluate_with(evaluator: Any, *, save: bool = True) -> list[Any]:
    """``judge_drift`` beside an :class:`tracescore.monitor.evaluate.Evaluator`'s monitors:
    on its store, under its lease, to every channel of its monitor set. Call it after
    ``evaluator.run_once()``; returns ``[]`` or one Evaluation."""
    store, _reader = evaluator._open()
    ev = evaluate(store, owner=evaluator.owner, channels=tuple(evaluator.monitors.channels),
                  save=save, otel_logger=evaluator.otel_logger, db_label=evaluator.db_label)
    return [] if ev is None else [ev]
