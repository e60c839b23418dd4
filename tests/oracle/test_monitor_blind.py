"""The issue's "blind monitors": what a monitor can detect, its error budget over a life
with gaps, and who hears its WARNINGs."""

from __future__ import annotations

import json
import re

from .build import BASE, HOUR, QUALITY, Rec, Spec
from .monitors import evaluate
from .run import built


def test_monitor_states_its_minimum_detectable_effect():
    """40 records an hour at ~0.55 against a threshold of 0.50 (a gap of 0.05): the check
    states the minimum detectable effect for this traffic and warns that it exceeds 0.05."""
    recs = tuple(Rec(t=90.0 * i, scores=((QUALITY, 0.45 + 0.1 * (i % 3 == 0) + 0.05),))
                 for i in range(40))
    with built(Spec(recs)) as (db, _):
        (got,) = evaluate(db, [{"name": "q", "score": QUALITY, "window": "1h",
                                "threshold": 0.5, "min_n": 10}], [BASE + HOUR + 60])
    text = json.dumps(got["q"]).lower()
    assert "detectable" in text or "mde" in text, got["q"]


def test_baseline_budget_survives_an_empty_baseline():
    """A previous_window monitor over a stream with a one-hour gap: the windows keep counting
    (the alpha spent so far stays spent) across the window whose baseline was empty."""
    recs = [Rec(t=60.0 * i, scores=((QUALITY, 0.7 + 0.1 * (i % 2)),)) for i in range(120)]
    recs += [Rec(t=4 * HOUR + 60.0 * i, scores=((QUALITY, 0.7 + 0.1 * (i % 2)),))
             for i in range(150)]
    nows = [BASE + HOUR + 30 + k * HOUR for k in range(6)]
    with built(Spec(tuple(recs))) as (db, _):
        evals = evaluate(db, [{"name": "b", "score": QUALITY, "window": "1h",
                               "baseline": "previous_window", "min_n": 10}], nows)
    windows = [int(m.group(1)) for e in evals
               if (m := re.search(r"window (\d+)", e["b"]["method"] or ""))]
    # (a check whose baseline is empty may repeat the last window's figures: never restart)
    assert windows == sorted(windows) and windows[-1] > 2, \
        [(e["b"]["state"], e["b"]["method"], e["b"]["summary"]) for e in evals]


def test_warnings_are_not_sent_to_channels_by_default():
    """A monitor whose estimate crosses its warning level (but not its threshold) enters
    WARNING; without an opt-in, nothing is delivered to its channel."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import WebhookReceiver

    from tracescore.monitor.config import monitors_from_objects
    from tracescore.monitor.evaluate import Evaluator
    from tracescore.monitor.notify import deliver_due

    recs = tuple(Rec(t=30.0 * i, scores=((QUALITY, 0.55 + 0.1 * (i % 2)),))
                 for i in range(100))
    hook = WebhookReceiver()
    try:
        with built(Spec(recs)) as (db, _):
            mons = monitors_from_objects({
                "monitor": [{"name": "q", "score": QUALITY, "window": "2h", "threshold": 0.3,
                             "warning": 0.7, "min_n": 10, "notify": ["team"]}],
                "channels": {"team": {"kind": "webhook", "url": hook.url}}})
            now = BASE + HOUR
            ev = Evaluator(db, mons, clock=lambda: now)
            try:
                (e,) = ev.run_once()
                assert e.state == "WARNING", e.summary
                deliver_due(ev._open()[0], mons.channels, now=now)
            finally:
                ev.close()
    finally:
        hook.close()
    assert hook.bodies == []
