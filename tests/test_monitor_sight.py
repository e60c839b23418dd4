"""Issue 29, part B: monitors that follow the newest release, say what their numbers are, see
(or say they cannot), keep their lifetime bound across empty baselines, keep WARNINGs off the
channels by default, and surface a judge model change at once. Real SQLite files written
through the store's write path; each test fails on the code before session 11."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from helpers import StoreClock, store_clock
from test_monitoring import DAY, NOW, beta, feed

from tracescore.monitor import confseq
from tracescore.monitor import judge_drift as drift
from tracescore.monitor.config import monitors_from_objects
from tracescore.monitor.evaluate import Evaluator, is_news
from tracescore.monitor.measure import _describe_baseline
from tracescore.stats import Estimate, Moments, sight
from tracescore.stats import confseq as cs

HOUR = 3600.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    return store_clock(monkeypatch, NOW - 10 * DAY)


def _mons(**kw: Any) -> Any:
    spec = {"name": "m", "score": "quality", "window": "1d", "min_n": 30, **kw}
    return monitors_from_objects({"monitor": [spec]})


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])\d+\.\d+", text)]


# -- 1. previous_release follows the newest release ------------------------------------------
def test_previous_release_follows_a_new_release_within_the_window(db: str,
                                                                  clock: StoreClock) -> None:
    feed(db, clock, release="v1", n=200, start=NOW - 3 * DAY, spread=DAY,
         quality=beta(0.80), grounded=0.9, seed=1)
    feed(db, clock, release="v2", n=200, start=NOW - 2 * DAY, spread=DAY,
         quality=beta(0.80), grounded=0.9, seed=2)
    mons = _mons(baseline="previous_release", window="1w")
    ev = Evaluator(db, mons, clock=lambda: clock.t)
    try:
        clock.t = NOW - DAY + 60
        (e,) = ev.run_once()
        assert e.raw == "OK" and "release v1 (current: v2)" in e.summary, e.summary
        # a bad v3 ships in the same (weekly) window
        feed(db, clock, release="v3", n=200, start=NOW - DAY + 120, spread=DAY - 600,
             quality=beta(0.09), grounded=0.9, seed=3)
        clock.t = NOW
        (e,) = ev.run_once()
    finally:
        ev.close()
    assert e.state == "ALERT", e.summary
    assert "release v2 (current: v3)" in e.summary and e.value is not None and e.value < 0.2
    # the new pair is a new window of the same test: the lifetime budget goes on
    assert "window 2 " in e.method, e.method


# -- 2. verdict texts name the numbers their decision used --------------------------------------
def test_percentile_verdict_names_the_share_that_decides_it(db: str, clock: StoreClock) -> None:
    # p10 below 0.05: alerts when more than 10 % of the values lie below 0.05
    feed(db, clock, release="v1", n=400, start=NOW - DAY + 60, spread=DAY - 600,
         quality=lambda rng: 0.01 if rng.random() < 0.5 else 0.9, grounded=0.9, seed=4)
    ev = Evaluator(db, _mons(statistic="p10", threshold=0.05), clock=lambda: clock.t)
    try:
        clock.t = NOW
        (e,) = ev.run_once()
    finally:
        ev.close()
    assert e.state == "ALERT", e.summary
    verdict = e.summary.split(": the whole anytime-valid interval is above ", 1)[1]
    assert verdict.startswith("0.1 "), e.summary  # the share cut-off, not the threshold 0.05
    assert e.lo is not None and e.lo > 0.10


@pytest.mark.parametrize("cur_mean,state", [(0.465, "WARNING"), (0.30, "ALERT"),
                                             (0.52, "OK")])
def test_baseline_verdict_numbers_agree_with_its_words(cur_mean: float, state: str) -> None:
    """"0.482 is below the bound 0.477" came from naming the bound where the decision had
    used the baseline's mean: each message now names the number it compared, and every
    comparison it prints is true as printed."""
    rng = np.random.default_rng(5)
    base = rng.beta(5, 5, 400)  # mean ~0.5
    mon = confseq.BaselineMonitor(Moments.from_values(base), "below", 0.05, 0.02,
                                  min_n=30, schedule="log")
    x = np.clip(rng.normal(cur_mean, 0.02, 3000), 0, 1)
    mon.update(x)
    st = mon.status()
    assert st.state == state
    m = _mons(baseline="7d").monitors[0]
    text = _describe_baseline(m, "mean", st, "below", mon, "the 7d before the window")
    est = float(text.split()[1])
    if state == "ALERT":
        cut = float(text.split("interval is below ")[1].split()[0])
        hi = re.search(r"\[([\d.]+), ([\d.]+)\]", text)
        assert hi is not None and float(hi.group(2)) < cut
        assert cut == pytest.approx(mon.baseline_bound - 0.02, abs=1e-3)
    elif state == "WARNING":
        cut = float(text.split("the estimate is below ")[1].split()[0])
        assert est < cut
        assert cut == pytest.approx(mon.baseline.mean - 0.02, abs=1e-3)
    else:
        cut = float(text.split("not below ")[1].split()[0])
        assert est >= cut


# -- 3. blind monitors: they say so; windows grow; the schedule keeps power --------------------
def test_minimum_detectable_effect_is_calibrated() -> None:
    """At the stated MDE, a window of n alerts by its end in about POWER of streams."""
    from tracescore.stats.confseq import eb_confidence_sequence

    rng = np.random.default_rng(6)
    sd, n = 0.11, 480
    for a in (cs.window_alpha(0.05, 1), cs.window_alpha_log(0.05, 168)):
        mde = sight.detectable(n, a, sd * sd)
        mu = 0.8 - mde
        k = mu * (1 - mu) / sd ** 2 - 1
        x = rng.beta(mu * k, (1 - mu) * k, (1500, n))
        _lo, hi = eb_confidence_sequence(x, a)
        power = float(np.mean(hi[:, -1] < 0.8))
        assert 0.75 <= power <= 0.85, (a, mde, power)
    need = sight.records_needed(0.05, cs.window_alpha_log(0.05, 168), sd * sd)
    assert need is not None and sight.detectable(need, cs.window_alpha_log(
        0.05, 168), sd * sd) <= 0.05 < sight.detectable(need - 1, cs.window_alpha_log(
            0.05, 168), sd * sd)


def test_a_blind_monitor_says_so_and_its_window_grows(db: str, clock: StoreClock) -> None:
    # 40 records an hour, hourly windows, a 0.05 drop to catch: blind per hour
    feed(db, clock, release="v1", n=40, start=NOW - 2 * HOUR + 60, spread=HOUR - 120,
         quality=beta(0.85), grounded=0.9, seed=8)
    ev = Evaluator(db, _mons(threshold=0.80, window="1h"), clock=lambda: clock.t)
    try:
        clock.t = NOW - HOUR
        (e,) = ev.run_once()
        assert "BLIND to the 0.05 it is meant to catch" in e.summary, e.summary
        assert e.detail["sight"]["blind"] and e.detail["sight"]["needed"] > 40
        feed(db, clock, release="v1", n=40, start=NOW - HOUR + 60, spread=HOUR - 120,
             quality=beta(0.85), grounded=0.9, seed=9)
        clock.t = NOW + HOUR + 60  # two time windows later
        feed(db, clock, release="v1", n=40, start=NOW + 60, spread=HOUR - 120,
             quality=beta(0.85), grounded=0.9, seed=10)
        clock.t = NOW + HOUR + 60
        (e,) = ev.run_once()
    finally:
        ev.close()
    # the window kept its records instead of closing with too few: it spans several hours
    assert e.n > 40 and "window 1 " in e.method and "window of" in e.method, e.method


def test_log_schedule_sums_to_alpha_and_quiet_windows_spend_nothing() -> None:
    parts = [cs.window_alpha_log(0.05, k) for k in range(1, 200001)]
    assert sum(parts) == pytest.approx(0.05 * (1 - np.log(2) / np.log(200002)), rel=1e-9)
    assert sum(parts) < 0.05
    assert parts[167] > 4 * cs.window_alpha(0.05, 168)
    mon = confseq.ThresholdMonitor(0.8, "below", min_n=30, schedule="log")
    mon.update([0.9] * 10)
    mon.new_window()  # 10 < min_n: could not alert, spent nothing
    assert mon.window_index == 1
    mon.update([0.9] * 40)
    mon.new_window()
    assert mon.window_index == 2
    clone = confseq.ThresholdMonitor.from_json(mon.to_json())
    assert clone.schedule == "log" and clone.window_alpha == mon.window_alpha


def test_an_empty_baseline_does_not_restart_the_budget(db: str, clock: StoreClock) -> None:
    """previous_window, hourly windows on hour boundaries: data in hours -2..1, none in hours
    2-3, data in hours 4-5. Window 4's baseline (hour 2) is empty: NO_DATA; window 6 goes on
    with the same test at its next share of alpha instead of starting again at window 1
    (which made the lifetime bound alpha per gap)."""
    t0 = (NOW // HOUR) * HOUR  # hour-aligned: independent of how a window cut mid-hour reads
    for i, h in enumerate((-2, -1, 0, 1, 4, 5)):
        feed(db, clock, release="v1", n=60, start=t0 + h * HOUR + 30, spread=HOUR - 120,
             quality=beta(0.85), grounded=0.9, seed=20 + i)
    # detect = 1: not blind, so its windows close on time (a blind one would grow instead)
    ev = Evaluator(db, _mons(baseline="previous_window", window="1h", detect=1.0),
                   clock=lambda: clock.t)
    try:
        methods = []
        for h in (0, 1, 2):
            clock.t = t0 + h * HOUR + (600 if h else 0)
            (e,) = ev.run_once()
            methods.append(e.method)
        assert "window 1 " in methods[0] and "window 2 " in methods[1], methods
        clock.t = t0 + 3 * HOUR + 600  # window 4: its baseline, hour 2, is empty
        (e,) = ev.run_once()
        assert e.raw == "NO_DATA" and "no baseline" in e.summary, e.summary
        clock.t = t0 + 5 * HOUR + 600  # window 6: baseline hour 4 has data again
        (e,) = ev.run_once()
    finally:
        ev.close()
    assert e.raw != "NO_DATA" and e.n >= 30, e.summary
    # window 3 held no records (spent nothing), so the test goes on at its third share
    assert "window 3 " in e.method, e.method
    assert e.detail["window_start"] == t0 + 5 * HOUR


# -- WARNINGs stay off the channels unless asked for ------------------------------------------
def test_warnings_reach_the_channels_only_when_asked() -> None:
    quiet = _mons(threshold=0.8).monitors[0]
    loud = _mons(threshold=0.8, notify_on=["alert", "warning"]).monitors[0]
    assert not is_news(quiet, None, "WARNING") and is_news(loud, None, "WARNING")
    assert not is_news(quiet, "OK", "WARNING") and not is_news(quiet, "WARNING", "OK")
    assert is_news(quiet, "WARNING", "ALERT") and is_news(quiet, "ALERT", "WARNING")
    assert is_news(quiet, None, "ALERT") and is_news(loud, "OK", "WARNING")
    with pytest.raises(Exception, match="alert"):
        _mons(threshold=0.8, notify_on=["warning"])


def test_a_warning_queues_no_notification_by_default(db: str, clock: StoreClock) -> None:
    from tracescore.monitor import state as S
    from tracescore.store import open_store

    feed(db, clock, release="v1", n=300, start=NOW - DAY + 60, spread=DAY - 600,
         quality=beta(0.82), grounded=0.9, seed=30)
    mons = monitors_from_objects({"monitor": [
        {"name": "m", "score": "quality", "threshold": 0.7, "warning": 0.9,
         "notify": ["team"]}], "channels": {"team": {"url": "http://127.0.0.1:9/x"}}})
    ev = Evaluator(db, mons, clock=lambda: clock.t)
    try:
        clock.t = NOW
        (e,) = ev.run_once()
    finally:
        ev.close()
    assert e.state == "WARNING" and e.saved
    store = open_store(db)
    try:
        assert S.outbox_rows(store) == []
    finally:
        store.close()


# -- 4. a judge model change reported by the server: WARNING at once -------------------------
def _runs(model: str, n: int, t: float) -> list[dict[str, Any]]:
    return [{"at": t + i * 60, "judge_model": "provider/judge", "reported_model": model,
             "prompt_version": "p1", "trigger": "schedule", "cases": 10, "agreed": 10,
             "details": None} for i in range(n)]


def test_a_model_change_in_the_scores_warns_before_the_canary_runs() -> None:
    runs = _runs("judge-a", 4, NOW - 5 * HOUR)  # baseline formed, all agree
    assert drift.measure(runs, NOW).state == "OK"
    scored = [("judge-a", NOW - 6 * HOUR), ("judge-b", NOW - HOUR)]
    r = drift.measure(runs, NOW, scored=scored)
    assert r is not None and r.state == "WARNING", r.summary
    assert "judge-a to judge-b" in r.summary and r.detail["model_change"]["seen_by"] == "scores"
    # a model the canary already saw, or one older than its last run, is no news
    assert drift.measure(runs, NOW, scored=[("judge-a", NOW - 6 * HOUR)]).state == "OK"
    # a baseline still forming (fewer than 3 runs): the change still shows at once
    early = drift.measure(runs[:1], NOW, scored=scored)
    assert early is not None and early.state == "WARNING"


def _judged(db: str, clock: StoreClock, model: str, n: int, start: float, seed: int) -> None:
    """``n`` records whose quality score was judged by ``model`` (the scores' judge_model)."""
    import random

    from test_monitoring import METRICS, _register

    from tracescore.record import RagRecord
    from tracescore.sampling import Decision
    from tracescore.score import Score
    from tracescore.store import NewJob, open_store
    from tracescore.store.segments import SegmentSpec

    rng = random.Random(seed)
    store = open_store(db)
    try:
        _register(store)
        for i in range(n):
            clock.t = start + 30 * i
            rec = RagRecord(trace_id=f"{seed:08x}{i:024x}", span_id=f"{i:016x}", query="q",
                            answer="a", end_time_ns=int(clock.t * 1e9),
                            start_time_ns=int((clock.t - 0.5) * 1e9), model="app-model")
            store.write_batch([(rec, Decision(0.1, METRICS))],
                              [NewJob(rec.record_id, "quality", "1")], None,
                              segments=SegmentSpec(release="v1", environment="prod"))
            jobs = store.lease_jobs("t", 10, 60.0, ["quality"])
            store.complete_jobs("t", [(j, [Score("quality", rng.random(), metric="quality")])
                                      for j in jobs], "none",
                                judge_models={j.job_id: model for j in jobs})
    finally:
        store.close()


def test_check_warns_of_a_judge_swap_seen_in_the_scores(db: str, clock: StoreClock) -> None:
    """End to end on a real database: canary runs saw judge-a (baseline formed, all agree);
    scores judged since by a server that reports judge-b. Before the canary's next run,
    ``judge_drift`` is WARNING naming the change (it said OK until three more runs)."""
    from tracescore.store import open_store

    t = (NOW // HOUR) * HOUR
    store = open_store(db)
    try:
        for r in _runs("judge-a", 4, t - 6 * HOUR):
            store.add_canary_run(r)
    finally:
        store.close()
    _judged(db, clock, "judge-a", 20, t - 6 * HOUR, seed=40)
    _judged(db, clock, "judge-b", 20, t - HOUR, seed=41)
    store = open_store(db)
    try:
        ev = drift.evaluate(store, owner="test", save=False, now=t)
    finally:
        store.close()
    assert ev is not None and ev.state == "WARNING", ev and ev.summary
    assert "judge-a to judge-b" in ev.summary and "canary has not run on it" in ev.summary


def test_check_states_each_monitors_sight_at_load(db: str, clock: StoreClock,
                                                   tmp_path: Any) -> None:
    """`check` prints each monitor's minimum detectable effect for the last window's
    traffic when it loads the monitors, WARNING for a blind one, and puts it in --json."""
    import json
    import time

    from helpers import run_cli

    now = time.time()
    feed(db, clock, release="v1", n=60, start=now - 3 * HOUR, spread=2 * HOUR,
         quality=beta(0.85), grounded=0.9, seed=50)
    clock.t = now
    toml = tmp_path / "m.toml"
    toml.write_text('[[monitor]]\nname = "few"\nscore = "quality"\nthreshold = 0.8\n'
                    '[[monitor]]\nname = "coarse"\nscore = "quality"\nthreshold = 0.8\n'
                    'detect = 0.5\n')
    out = run_cli("check", "--db", db, "--monitors", str(toml), "--no-notify")
    assert out.exit_code == 0, out.output
    assert "WARNING: monitor few: detects a drop of" in out.output, out.output
    assert "BLIND to the 0.05 it is meant to catch" in out.output
    assert "monitor coarse: detects a drop of" in out.output
    assert "WARNING: monitor coarse" not in out.output
    js = run_cli("check", "--db", db, "--monitors", str(toml), "--no-notify", "--json")
    sight_of = json.loads(js.output)["sight"]
    assert sight_of["few"]["blind"] and sight_of["few"]["n"] == 60
    assert not sight_of["coarse"]["blind"]


def test_an_apps_runner_logs_each_blind_monitor_once(caplog: pytest.LogCaptureFixture) -> None:
    """init(monitors=...) has no `check` to print the sight at load: its runner logs a blind
    monitor once (not at every evaluation)."""
    import logging

    from tracescore.monitor.evaluate import Evaluation
    from tracescore.monitor.runner import say_blind

    def ev(name: str, blind: bool) -> Evaluation:
        return Evaluation(name, "OK", None, "OK", Estimate(40, 0.85, 0.7, 1.0, "m"),
                          f"{name} summary", False, True, detail={"sight": {"blind": blind}})

    said: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="tracescore"):
        for _ in range(3):
            say_blind([ev("few", True), ev("many", False)], said)
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["tracescore: monitor few is blind: few summary"]
