"""Calling a metric: guards that turn a metric's ``SystemExit``/``KeyboardInterrupt`` into an
ordinary error (:class:`MetricAborted`), and the normalisation of its output into
:class:`~tracescore.score.Score` objects. Pure functions, any thread."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

from ..judge.base import RetryLater
from ..metrics.base import Metric, check_output
from ..metrics.ready import call_ready
from ..record import RagRecord
from ..score import Score
from ..store import StoreAPI
from ..store.compact import skip_reason

log = logging.getLogger("tracescore")


def _refused(store: StoreAPI, exc: BaseException) -> bool:
    """The store says ``exc`` is a fault that passes (never raises)."""
    try:
        return bool(store.unavailable(exc))
    except Exception:
        return False


class MetricAborted(Exception):
    """A metric raised a ``BaseException`` that is not an ``Exception`` (``SystemExit`` from
    a ``sys.exit()`` in its code or a library's, ``KeyboardInterrupt``): carried back to the
    loop as an ordinary exception, so it ends in an error score and never in the loop."""


def _aborted(exc: BaseException) -> str:
    return f"metric raised {exc!r}"[:2000]


def _guarded(metric: Metric, record: RagRecord) -> Any:
    """Run a sync metric (pool thread). A ``BaseException`` would otherwise cross to the
    loop through the future and end it (asyncio re-raises ``SystemExit`` out of the loop)."""
    try:
        return call_ready(metric, record)
    except Exception:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit and co. from the metric's code
        raise MetricAborted(_aborted(exc)) from None


async def _awaited_guarded(aw: Any) -> Any:
    """Await a metric's coroutine; its ``SystemExit``/``KeyboardInterrupt`` becomes
    :class:`MetricAborted`. Cancellation (timeout, stop) passes through."""
    try:
        return await aw
    except (SystemExit, KeyboardInterrupt) as exc:
        raise MetricAborted(_aborted(exc)) from None


def _with(s: Score, **kw: Any) -> Score:
    from dataclasses import replace

    return replace(s, **kw)


def _normalise(metric: Metric, out: Any, duration_ms: float | None = None) -> list[Score]:
    """A metric's output as its scores: a Score or a list of Scores named as the metric
    declares (:func:`~.metrics.base.check_output` turns anything else — a bare number, a score
    named for another metric — into one error score per name, with the reason); values
    validated."""
    out = check_output(metric, out)
    items: list[Any] = [out] if isinstance(out, Score) else list(out)
    scores: list[Score] = []
    for s in items:
        if not isinstance(s, Score):
            raise TypeError(f"metric {metric.name!r} returned {type(s).__name__} in its list")
        if s.status == "ok" and (s.value is None or not math.isfinite(s.value)):
            s = Score.failed(s.name, f"metric returned a non-finite value {s.value!r}")
        if duration_ms is None:
            scores.append(_with(s, metric=s.metric or metric.name,
                                metric_version=metric.version))
        else:
            scores.append(_with(s, metric=s.metric or metric.name,
                                metric_version=metric.version, duration_ms=duration_ms))
    if not scores:
        raise ValueError(f"metric {metric.name!r} returned no score")
    if len({s.name for s in scores}) != len(scores):
        raise ValueError(f"metric {metric.name!r} returned two scores with the same name")
    return scores


def _row_score(row: Mapping[str, Any]) -> Score:
    return Score(
        name=row["name"], value=row["value"], label=row["label"],
        explanation=row["explanation"], status=row["status"], error=row["error"],
        metric=row["metric"], metric_version=row["metric_version"],
        duration_ms=row["duration_ms"],
    )


def skipped_scores(metric: Metric, record: RagRecord) -> list[Score] | None:
    """The skip scores of a metric whose inputs ``record`` lacks (a compact row, or a missing
    query/contexts/answer/ground truth), or None when it has them all."""
    if record.compact and metric.requires:
        return [Score.skipped(n, skip_reason(), metric=metric.name,
                              metric_version=metric.version) for n in metric.names()]
    missing = record.missing(metric.requires)
    if missing:
        return [Score.skipped(n, f"record has no {', '.join(missing)}", metric=metric.name,
                              metric_version=metric.version) for n in metric.names()]
    return None


async def score_metric(metric: Metric, record: RagRecord, *, timeout_s: float,
                       loop: asyncio.AbstractEventLoop, executor: Executor | None
                       ) -> list[Score]:
    """Run one metric on one record on ``loop`` (a sync metric on ``executor``, under
    :func:`_guarded`), at most ``timeout_s``; never raises but ``RetryLater`` (the judge is
    unavailable or over budget: the job waits, it does not fail): failures become error
    scores with the reason."""
    t0 = time.perf_counter()
    skipped = skipped_scores(metric, record)
    if skipped is not None:
        return skipped
    try:
        if inspect.iscoroutinefunction(metric.__call__) or metric.kind == "judge":
            out: Any = metric(record)
        else:
            ctx = contextvars.copy_context()
            out = loop.run_in_executor(executor, ctx.run, _guarded, metric, record)
        if inspect.isawaitable(out):
            out = await asyncio.wait_for(_awaited_guarded(out), timeout_s)
        scores = _normalise(metric, out)
    except RetryLater:
        raise
    except asyncio.TimeoutError:
        scores = [Score.failed(n, f"timed out after {timeout_s:g}s",
                               metric=metric.name, metric_version=metric.version)
                  for n in metric.names()]
    except (SystemExit, KeyboardInterrupt) as exc:  # raised by the sync part of a judge
        scores = [Score.failed(n, _aborted(exc), metric=metric.name,
                               metric_version=metric.version) for n in metric.names()]
    except MetricAborted as exc:
        scores = [Score.failed(n, str(exc), metric=metric.name,
                               metric_version=metric.version) for n in metric.names()]
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        scores = [Score.failed(n, reason, metric=metric.name, metric_version=metric.version)
                  for n in metric.names()]
    ms = (time.perf_counter() - t0) * 1000
    return [_with(s, duration_ms=ms) for s in scores]


async def canary_once(session: Any, done: threading.Event) -> None:
    """The judge canary's start-up run on the scorer's loop (``done`` set when it ended,
    whatever happened: for callers that want its verdict, such as the demo). A judge that is
    unavailable is tried again at the next scheduled run; a broken one shows up in the
    scores, and is logged once here."""
    from ..judge.canary import run_canary

    try:
        await run_canary(session)
    except RetryLater:
        pass
    except Exception as exc:
        log.warning("tracescore judge canary could not run: %s", exc)
    finally:
        done.set()
