"""The types that carry one :class:`~tracescore.stats.Estimate` instead of their own value, lo,
hi, n and method fields: their JSON keeps the keys, the order and the values the flat types
printed (written out here from the old field lists, for the same inputs), their stored rows
read back as they were written, and the one row type of ``monitor_history`` serves the store
and the trend page alike (SQLite and PostgreSQL: the ``db`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from tracescore.monitor import confseq
from tracescore.monitor import state as S
from tracescore.read.db import open_db
from tracescore.read.model import FeedbackSummary
from tracescore.read.pipeline import monitor_history, monitor_statuses
from tracescore.reports.inclusion import SampleRate
from tracescore.reports.trend import TrendPage, TrendPoint, TrendSeries
from tracescore.stats import Estimate, Moments, rate_ci
from tracescore.store import open_store
from tracescore.trust.agreement import KAPPA_METHOD, Confusion, cohens_kappa, spearman


def _put(store: Any, sql: str, args: tuple[Any, ...]) -> None:
    with S._tx(store) as c:
        c.execute(sql, args)


def test_monitor_rows_keep_a_null_n_null_and_one_history_type(db: str) -> None:
    store = open_store(db)
    try:
        S.ensure_tables(store)
        assert S.acquire_lease(store, S.DEFAULT_LEASE, "a", 1000, now=0)
        est = Estimate(120, 0.7, 0.6, 0.8, "anytime-valid CS")
        assert S.save_evaluation(store, "m", owner="a", state="ALERT", estimate=est,
                                 detail={"summary": "below 0.8"}, test_state=None, streak=0,
                                 pending=None, notify=None, at=100.0, now=100.0)
        assert S.save_evaluation(store, "empty", owner="a", state="NO_DATA",
                                 estimate=Estimate.missing("-"), detail={}, test_state=None,
                                 streak=0, pending=None, notify=None, at=101.0, now=101.0)
        # rows written before every evaluation stored its n: NULL n, a detail that is no object
        _put(store, "INSERT INTO monitor_state (monitor, state, since, checked_at, value, lo, "
             "hi, n, detail, streak) VALUES (?,?,?,?,?,?,?,?,?,?)",
             ("old", "OK", 50.0, 60.0, 0.9, 0.85, 0.95, None, "{}", 0))
        _put(store, "INSERT INTO monitor_history (monitor, state, previous, at, value, lo, hi, "
             "n, detail) VALUES (?,?,?,?,?,?,?,?,?)",
             ("old", "OK", None, 50.0, 0.9, 0.85, 0.95, None, "[1, 2]"))
        states = S.load_states(store)
        # the table keeps the estimate's value, lo, hi, n (its columns; no method)
        assert (states["m"].value, states["m"].lo, states["m"].hi, states["m"].n) == (
            0.7, 0.6, 0.8, 120)
        assert (states["empty"].n, states["empty"].value) == (0, None)
        assert states["old"].n is None and states["old"].value == 0.9

        stored = S.history(store)
        conn = open_db(db)
        try:
            read = monitor_history(conn, None, 10)
            statuses = {m.name: m for m in monitor_statuses(conn)}
        finally:
            conn.close()
        assert read == stored  # one row type, whichever side reads the table
        assert all(type(h) is S.HistoryRow for h in read)
        by = {h.monitor: h for h in read}
        assert (by["m"].previous, by["m"].value, by["m"].n, by["m"].summary) == (
            None, 0.7, 120, "below 0.8")
        assert by["old"].n is None and by["old"].detail == {} and by["old"].summary == ""

        # the report's JSON of a state: the old field order, null where the n is NULL
        assert statuses["old"].n is None and statuses["old"].estimate.n == 0
        assert not statuses["old"].n_stored and statuses["m"].n_stored
        assert statuses["m"].estimate == Estimate(120, 0.7, 0.6, 0.8, "")
        assert statuses["old"].to_json() == {
            "name": "old", "state": "OK", "since": 50.0, "checked_at": 60.0, "value": 0.9,
            "lo": 0.85, "hi": 0.95, "n": None, "summary": ""}
        assert list(statuses["m"].to_json()) == ["name", "state", "since", "checked_at",
                                                  "value", "lo", "hi", "n", "summary"]
        assert statuses["m"].to_json()["n"] == 120
        assert statuses["empty"].to_json()["n"] == 0  # a stored 0 stays 0
    finally:
        store.close()


def test_trend_json_keeps_its_point_and_history_lists() -> None:
    pts = [TrendPoint(3600.0, Estimate(5, 0.5, 0.4, 0.6, "t")),
           TrendPoint(7200.0, Estimate(1, 1.0, None, None, "t"))]
    hist = [S.HistoryRow(1, "m", "ALERT", "OK", 7000.0, 0.2, 0.1, 0.3, 9, {"summary": "x"})]
    page = TrendPage(db="d", generated_at=9000.0, since=None, span=(3600.0, 7300.0),
                     bucket_s=3600.0, bucket_label="hour",
                     series=[TrendSeries("q", "q", "mean", True, None, "t", pts)],
                     history=hist)
    out = page.to_json()
    assert out["series"]["q"]["points"] == [[3600.0, 5, 0.5, 0.4, 0.6],
                                            [7200.0, 1, 1.0, None, None]]
    assert out["history"] == [["m", "OK", "ALERT", 7000.0]]
    with pytest.raises(ValueError):
        TrendPoint(0.0, Estimate.missing("t"))  # a point is drawn: it needs a value


def test_feedback_json_keeps_the_old_keys_and_the_wilson_rate() -> None:
    f = FeedbackSummary("thumbs", count=12, traces=10, valued=11, mean=0.6, positive=7,
                        negative=4, estimate=rate_ci(7, 11), comments=2, last_at=5.0,
                        labels=(("wrong", 3),))
    w = rate_ci(7, 11)
    assert f.to_json() == {"count": 12, "traces": 10, "valued": 11, "mean": 0.6,
                           "positive": 7, "negative": 4, "rate": 7 / 11, "lo": w.lo,
                           "hi": w.hi, "comments": 2, "last_at": 5.0,
                           "labels": {"wrong": 3}}
    assert list(f.to_json()) == ["count", "traces", "valued", "mean", "positive", "negative",
                                 "rate", "lo", "hi", "comments", "last_at", "labels"]
    assert (f.rate, f.n) == (7 / 11, 11)
    none = FeedbackSummary("x", count=1, traces=1, valued=0, mean=None, positive=0,
                           negative=0)
    assert (none.to_json()["rate"], none.to_json()["lo"], none.to_json()["hi"]) == (
        None, None, None)


def test_kappa_and_correlation_json_and_their_n() -> None:
    k = cohens_kappa(Confusion(30, 5, 4, 21))
    assert k.n == 60 and k.method == KAPPA_METHOD
    assert k.to_json() == {"value": k.value, "lo": k.shown_lo, "hi": k.shown_hi,
                           "raw_lo": k.lo, "raw_hi": k.hi, "se": k.se, "reason": None,
                           "method": KAPPA_METHOD}
    statsmodels = pytest.importorskip("statsmodels.stats.inter_rater")
    ref = statsmodels.cohens_kappa([[30, 4], [5, 21]])  # rows: human, columns: judge
    assert k.value == pytest.approx(ref.kappa, abs=1e-12)
    assert (k.lo, k.hi) == (pytest.approx(ref.kappa_low), pytest.approx(ref.kappa_upp))
    one_class = cohens_kappa(Confusion(10, 0, 5, 0))
    assert one_class.value is None and one_class.n == 15 and one_class.reason

    judge = [0.1, 0.4, 0.35, 0.8, 0.7, 0.9]
    human = [0.2, 0.3, 0.5, 0.9, 0.6, 1.0]
    r = spearman(judge, human)
    assert r.n == 6 and list(r.to_json()) == ["value", "lo", "hi", "p_value", "method",
                                              "reason"]
    assert r.to_json()["value"] == r.value and r.lo is not None and r.lo < r.value < r.hi
    short = spearman(judge[:3], human[:3])
    assert short.value is not None and short.lo is None and short.n == 3


def test_sample_rate_reads_through_its_estimate() -> None:
    rate = SampleRate(Estimate(40, 0.25, 0.2, 0.3, "decisions"), True, 10)
    assert (rate.value, rate.lo, rate.hi, rate.n, rate.sampled, rate.source) == (
        0.25, 0.2, 0.3, 40, 10, "decisions")
    assert rate.share == 0.25


def test_confseq_status_keeps_its_stored_list() -> None:
    mon = confseq.ThresholdMonitor(0.8, "below", min_n=5)
    mon.update([0.9, 0.95, 0.85, 0.9, 0.92, 0.88])
    st = mon.status()
    m = Moments.from_values([0.9, 0.95, 0.85, 0.9, 0.92, 0.88])
    assert st.n == 6 and st.value == pytest.approx(m.mean)
    assert st.to_json() == [st.state, st.value, st.lo, st.hi, 6]
    # a state saved by the earlier NamedTuple (a plain list) loads into the same status
    assert confseq.Status.from_json(list(st.to_json())) == st
    mon.new_window()  # the new window has < min_n: the previous window's status carries
    clone = confseq.ThresholdMonitor.from_json(mon.to_json())
    assert clone.status() == mon.status() == st
    empty = confseq.ThresholdMonitor(0.8, "below").status()
    assert empty.to_json() == [confseq.NO_DATA, None, None, None, 0]
