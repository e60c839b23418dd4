"""Monitors (``tracescore check`` / ``monitor``) against the raw rows: the window's n, the
estimate, and a state consistent with its interval and threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from .build import BASE, GROUNDED, HOUR, QUALITY, TONE, Rec, Spec
from .monitors import evaluate
from .run import built, cli
from .strategies import specs

GRACE = 5.0
#: "now": inside an hour, past every record of a drawn database
NOW = BASE + 5 * HOUR + 1500.0


def ok_values(view, name, since, until):
    return [min(max(float(s["value"]), 0.0), 1.0) for s in view.rows["scores"]
            if s["name"] == name and s["status"] == "ok" and s["value"] is not None
            and since <= s["created_at"] < until]


def _anytime(window_h: float) -> list[dict]:
    return [{"name": "q", "score": QUALITY, "window": f"{window_h}h", "threshold": 0.5,
             "min_n": 5},
            {"name": "g", "score": GROUNDED, "statistic": "rate", "window": f"{window_h}h",
             "threshold": 0.5, "min_n": 5},
            {"name": "t", "score": TONE, "window": f"{window_h}h", "threshold": 0.6,
             "min_n": 5}]


@given(spec=specs(prune=False), window_h=st.sampled_from([1, 2, 3, 6]))
def test_anytime_monitor_counts_its_window_and_its_state_follows_its_interval(spec, window_h):
    """A threshold monitor's first evaluation reads [now - window, now - grace): its n and mean
    are those of the raw ok scores there; ALERT only when the whole interval lies beyond the
    threshold, OK/WARNING otherwise, NO_DATA below min_n."""
    with built(spec) as (db, view):
        (got,) = evaluate(db, _anytime(window_h), [NOW])
        rep, _ = cli("report", "--db", db, "--worst", 0)
    # the report's first lines: the states the check stored, figure for figure
    stored = {m["name"]: m for m in rep["monitors"]}
    for name, e in got.items():
        m = stored[name]
        assert (m["state"], m["n"], m["value"], m["lo"], m["hi"]) == (
            e["state"], e["n"], e["value"], e["lo"], e["hi"]), name
    for name, score, thr, below in (("q", QUALITY, 0.5, True), ("g", GROUNDED, 0.5, True),
                                    ("t", TONE, 0.6, False)):
        e = got[name]
        xs = ok_values(view, score, NOW - window_h * HOUR, NOW - GRACE)
        assert e["n"] == len(xs), name
        if not xs:
            assert e["state"] == "NO_DATA"
            continue
        assert e["value"] == pytest.approx(float(np.mean(xs)), abs=1e-9), name
        if len(xs) < 5:
            assert e["state"] == "NO_DATA", name
        elif e["state"] == "ALERT":
            assert (e["hi"] < thr) if below else (e["lo"] > thr), (name, e["summary"])
        else:
            assert e["state"] in ("OK", "WARNING"), name
            assert not ((e["hi"] < thr) if below else (e["lo"] > thr)), (name, e["summary"])


def _several_names_cut_hour() -> Spec:
    """Three score names in every hour; the window starts at :30 of an hour."""
    recs = tuple(Rec(t=60.0 * i, scores=((QUALITY, 0.9), (GROUNDED, 1.0), (TONE, 0.2)))
                 for i in range(5 * 60))
    return Spec(recs)


@given(spec=specs(prune=False, min_records=1),
       start=st.sampled_from([1800.0, 2 * HOUR + 600, 3 * HOUR - 1]))
@example(spec=_several_names_cut_hour(), start=2 * HOUR + 1800)
def test_window_counts_first_partial_hour(spec, start):
    """A ``rule = "fixed"`` monitor whose window starts inside an hour counts exactly the
    scores whose timestamps fall inside it (that hour's part included)."""
    window = NOW - (BASE + start)
    with built(spec) as (db, view):
        (got,) = evaluate(db, [{"name": "q", "score": QUALITY, "window": f"{window}s",
                                "threshold": 0.5, "rule": "fixed", "min_n": 1}], [NOW])
    xs = ok_values(view, QUALITY, NOW - window, math.inf)
    assert got["q"]["n"] == len(xs)
    if xs:
        assert got["q"]["value"] == pytest.approx(float(np.mean(xs)))


def test_previous_release_follows_newest():
    """A ``baseline = "previous_release"`` monitor compares the newest release with the one
    before it: when v3 (faithful 0.09 against 0.8) arrives inside the monitor's window, the
    next check watches v3 against v2 (and alerts), not v2 against v1."""
    import os
    import tempfile

    from .build import build

    def rel(name: str, start_h: float, value: float) -> Spec:
        return Spec(tuple(Rec(t=start_h * HOUR + 30.0 * i, release=name,
                              scores=((QUALITY, value),)) for i in range(80)))

    mon = [{"name": "regress", "score": QUALITY, "window": "1d",
            "baseline": "previous_release", "min_n": 10}]
    with tempfile.TemporaryDirectory(prefix="oracle-") as d:
        db = os.path.join(d, "ts.db")
        build(db, rel("v1", 0, 0.8))
        build(db, rel("v2", 1, 0.8), offset=1000)
        (first,) = evaluate(db, mon, [BASE + 2 * HOUR])
        assert first["regress"]["state"] == "OK"
        build(db, rel("v3", 2, 0.09), offset=2000)
        (_, later) = evaluate(db, mon, [BASE + 2 * HOUR, BASE + 3 * HOUR])
    e = later["regress"]
    assert "v3" in e["summary"], e["summary"]
    assert e["state"] == "ALERT", e["summary"]




def _drifting() -> Spec:
    """200 records at 0.9, then 200 at 0.3, in the same window: the sequence's centre
    weights the early values more, the plain mean (0.6) falls below its lower end."""
    return Spec(tuple(Rec(t=2 * HOUR + 20.0 * i, scores=((QUALITY, 0.9 if i < 200 else 0.3),))
                      for i in range(400)))


@given(spec=specs(prune=False), window_h=st.sampled_from([2, 6]))
@example(spec=_drifting(), window_h=6)
def test_interval_contains_mean(spec, window_h):
    """Every monitor's printed interval contains its printed estimate."""
    with built(spec) as (db, _):
        (got,) = evaluate(db, _anytime(window_h), [NOW])
    for name, e in got.items():
        if None not in (e["value"], e["lo"], e["hi"]):
            assert e["lo"] - 1e-12 <= e["value"] <= e["hi"] + 1e-12, (name, e["summary"])


def test_p10_summary_names_its_cutoff():
    """``p10 below 0.05`` is tested as "more than 10 % of the values lie below 0.05": the
    summary that compares the share with a level names 0.10, not 0.05."""
    import re

    recs = tuple(Rec(t=2 * HOUR + 20.0 * i, scores=((QUALITY, 0.01 if i % 2 else 0.9),))
                 for i in range(200))
    with built(Spec(recs)) as (db, _):
        (got,) = evaluate(db, [{"name": "p", "score": QUALITY, "statistic": "p10",
                                "threshold": 0.05, "window": "6h", "min_n": 10}], [NOW])
    e = got["p"]
    assert e["state"] == "ALERT", e["summary"]
    assert re.search(r"(above|below) (the cut-off )?(0\.10?\b|10 ?%)", e["summary"]), \
        e["summary"]


_LEVEL = r"(?:is|interval is|not) (below|above) (?:the baseline's bound )?(-?\d+\.\d+)"


def _baseline_drop() -> Spec:
    """A previous window at 0.50, the current one at 0.46: WARNING (the mean is below the
    baseline's mean - min_effect) while the estimate is above the bound the text names."""
    recs = [Rec(t=0.5 * HOUR + 10.0 * i, scores=((QUALITY, 0.5 + (0.1 if i % 2 else -0.1)),))
            for i in range(300)]
    recs += [Rec(t=3.5 * HOUR + 10.0 * i, scores=((QUALITY, 0.46 + (0.1 if i % 2 else -0.1)),))
             for i in range(300)]
    return Spec(tuple(recs))


def _short_baseline() -> Spec:
    """A window full of scores whose previous window holds one: NO_DATA, and the text must
    not say the *window* has too few (n=119: "fewer than 10 in the window")."""
    return Spec(tuple(Rec(t=3.5 * HOUR + 1.0 + 60.0 * i, scores=((QUALITY, 0.7),))
                      for i in range(150)) + (Rec(t=3 * HOUR - 60.0,
                                                  scores=((QUALITY, 0.7),)),))


@given(spec=specs(prune=False))
@example(spec=_baseline_drop())
@example(spec=_short_baseline())
def test_summary_agrees_with_its_numbers(spec):
    """What a summary says about its estimate and the level it names holds for the printed
    numbers: "X … is below L" means X < L; "the whole … interval is below L" means hi < L."""
    import re

    mons = [{"name": "b", "score": QUALITY, "window": "3h", "baseline": "previous_window",
             "min_n": 10, "warning": None},
            {"name": "q", "score": QUALITY, "window": "3h", "threshold": 0.5, "min_n": 10,
             "warning": 0.6}]
    with built(spec) as (db, _):
        (got,) = evaluate(db, mons, [BASE + 6.5 * HOUR])
    for e in got.values():
        few = re.search(r"fewer than (\d+) in the window", e["summary"])
        if few and e["n"] is not None:
            assert e["n"] < int(few.group(1)), e["summary"]
        m = re.search(_LEVEL, e["summary"])
        if not m or e["value"] is None:
            continue
        side, level = m.group(1), float(m.group(2))
        said = m.group(0)
        if said.startswith("not"):
            continue
        if "interval" in said:
            assert (e["hi"] < level) if side == "below" else (e["lo"] > level), e["summary"]
        else:
            assert (e["value"] < level) if side == "below" else (e["value"] > level), \
                e["summary"]


@given(spec=specs(prune=False))
def test_check_monitors_json_matches_the_raw_rows(spec):
    """``tracescore check --monitors FILE --json`` (the real clock: windows of ten years hold
    every record): each monitor's n and mean are those of every raw ok score; the exit code
    is 1 exactly when a monitor is in ALERT."""
    import os

    mons = ('[[monitor]]\nname = "q-fixed"\nscore = "quality"\nwindow = "520w"\n'
            'threshold = 0.5\nrule = "fixed"\nmin_n = 1\n\n'
            '[[monitor]]\nname = "t-any"\nscore = "tone"\nwindow = "520w"\n'
            'threshold = 0.6\nmin_n = 5\n')
    with built(spec) as (db, view):
        path = os.path.join(os.path.dirname(db), "monitors.toml")
        with open(path, "w") as f:
            f.write(mons)
        out, code = cli("check", "--db", db, "--monitors", path, ok=(0, 1))
    got = {e["monitor"]: e for e in out["monitors"]}
    for name, score in (("q-fixed", QUALITY), ("t-any", TONE)):
        xs = ok_values(view, score, -math.inf, math.inf)
        assert got[name]["n"] == len(xs), name
        if xs:
            assert got[name]["value"] == pytest.approx(float(np.mean(xs)), abs=1e-9), name
    assert code == out["exit"] == (1 if any(e["state"] == "ALERT" for e in got.values())
                                   else 0)
