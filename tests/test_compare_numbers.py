"""Issue 29, part A: the numbers of report / report --by / compare / check --compare / the trend,
checked against the raw rows on awkward data (each test fails on the code before the fix).

Real SQLite files and a real PostgreSQL (the ``db`` fixture), data written through the store's
own write path with a controlled clock, so hours, rollups and cut windows are production's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import StoreClock, rows, store_clock

from tracescore.cli import main
from tracescore.read import query as Q
from tracescore.read.db import open_db
from tracescore.record import RagRecord
from tracescore.reports.compare import build_comparison
from tracescore.reports.report import build_report, timeline
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, open_store
from tracescore.store.segments import SegmentSpec

HOUR = 3600.0
NOW = 1_780_000_000.0 - 1_780_000_000.0 % HOUR  # an hour boundary
METRICS = ("quality", "grounded")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    return store_clock(monkeypatch, NOW - 48 * HOUR)


def _register(store: Any) -> None:
    from tracescore.metrics.base import Metric

    class _M(Metric):
        kind = "local"
        version = "1"
        requires = frozenset()

        def __init__(self, name: str, binary: bool) -> None:
            self.name = name
            self.binary = binary
            self.higher_is_better = True
            self.threshold = None
            self.description = name

        def score(self, record: RagRecord) -> Any:  # pragma: no cover - never scored
            raise NotImplementedError

    store.register_metrics([_M("quality", False), _M("grounded", True)])


def feed(db: str, clock: StoreClock, times: Sequence[float], *,
         quality: Callable[[int], float], grounded: Callable[[int], float],
         release: Callable[[int], str] = lambda i: "v1",
         judge: Callable[[int], str] = lambda i: "judge-a",
         route: Callable[[int], str] = lambda i: "search", seed: int = 0) -> None:
    """One record at each of ``times``, scored quality(i) and grounded(i), judged by
    judge(i), with release(i) and metadata.route = route(i)."""
    store = open_store(db)
    try:
        _register(store)
        for i, t in enumerate(times):
            clock.t = t
            spec = SegmentSpec(release=release(i), environment="prod", keys=("route",))
            rec = RagRecord(trace_id=f"{seed:08x}{i:024x}", span_id=f"{i:016x}", query=f"q{i}",
                            answer="a", end_time_ns=int(t * 1e9),
                            start_time_ns=int((t - 0.5) * 1e9),
                            metadata={"route": route(i)}, model="app-model")
            store.write_batch([(rec, Decision(0.1, METRICS))],
                              [NewJob(rec.record_id, m, "1") for m in METRICS], None,
                              segments=spec)
            jobs = store.lease_jobs("t", 10, 60.0, list(METRICS))
            done = [(j, [Score(j.metric, quality(i) if j.metric == "quality" else grounded(i),
                               metric=j.metric)]) for j in jobs]
            store.complete_jobs("t", done, "none",
                                judge_models={j.job_id: judge(i) for j in jobs})
    finally:
        store.close()


# -- 2. yes/no counts in every split ----------------------------------------------------------

def test_yes_counts_are_exact_in_every_split(db: str, clock: StoreClock, tmp_path: Path) -> None:
    """All 80 verdicts "yes": ``report`` said 80/80 but ``report --by judge_model`` said 0/40
    per judge, ``compare --by judge_model`` 0.0 % on both sides, and the trend's points were
    drawn with zero "yes" answers. Every split's yes counts must sum to the pooled count."""
    times = [NOW - 30 * HOUR + 600 * i for i in range(80)]
    feed(db, clock, times, quality=lambda i: 0.5 + (i % 5) / 10, grounded=lambda i: 1.0,
         release=lambda i: f"v{i % 2 + 1}", judge=lambda i: f"judge-{'ab'[i % 2]}",
         route=lambda i: ("search", "chat", "faq")[i % 3])
    clock.t = NOW
    conn = open_db(db)
    try:
        pooled = {m.name: m for m in build_report(conn).metrics}["grounded"]
        assert (pooled.yes, pooled.count) == (80, 80)
        for by in ("judge_model", "release", "environment", "model", "metadata.route"):
            rep = build_report(conn, by=by)
            counts = [m for g in rep.groups for m in g.metrics if m.name == "grounded"]
            assert counts, (by, rep.groups)
            assert sum(m.count for m in counts) == 80, by
            for m in counts:
                assert m.binary and m.yes == m.count and m.rate == 1.0, (by, m)
                assert m.lo is not None and m.hi == 1.0 and m.lo < 1.0
        cmp = build_comparison(conn, by="judge_model", now=NOW)
        g = {r.name: r for r in cmp.rows}["grounded"]
        assert g.current.value == 1.0 and g.baseline.value == 1.0
        assert g.diff.estimate == 0.0 and g.verdict not in ("regressed", "improved")
        # the trend's points: each bucket's band is that of its own yes count
        for b in timeline(conn, "grounded", bucket_s=HOUR, binary=True):
            assert b.mean == 1.0 and b.lo is not None and b.lo <= b.mean <= b.hi
        series = Q.score_series(conn, ["grounded"], Q.Window(), HOUR, by="judge_model")
        assert sum(a.yes for pts in series["grounded"].values() for _, a in pts) == 80
    finally:
        conn.close()
    page = tmp_path / "r.html"
    html = CliRunner().invoke(main, ["report", "--db", db, "--html", str(page)])
    assert html.exit_code == 0, html.output
    text = page.read_text()  # the trend chart's points: their own band, not zero yeses
    assert "100% yes [" in text and "100% yes [0, " not in text


# -- 3. a window that starts inside an hour ----------------------------------------------------

def test_window_cut_mid_hour_counts_that_hours_records_for_one_name(
        db: str, clock: StoreClock) -> None:
    """With several score names, a window starting inside an hour counted none of that hour's
    records for one name (the rollup of every name outnumbered the raw rows of one, so the
    hour looked pruned)."""
    times = [NOW - 5 * HOUR + 30 * i for i in range(590)]  # ~4.9 hours, 120 a hour
    feed(db, clock, times, quality=lambda i: (i % 10) / 10, grounded=lambda i: float(i % 2))
    clock.t = NOW
    since = NOW - 5 * HOUR + 1800 + 15  # inside the first hour
    raw = rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'quality'"
                   " AND created_at >= ?", since)[0]["n"]
    conn = open_db(db)
    try:
        for names in (["quality"], None):
            got = Q.score_aggs(conn, Q.Window(since, None), names=names)
            assert Q.merge(got.values())["quality"].n_ok == raw, names
            # the trend's hourly buckets add up to the same window (not its whole first hour)
            series = Q.score_series(conn, names, Q.Window(since, None), HOUR)
            assert sum(a.n_ok for pts in series["quality"].values() for _, a in pts) == raw
        # a judge model scored only inside the cut first hour is a value of the window
        first_hour = Q.Window(since, since - since % HOUR + HOUR)
        assert [v for v, _ in Q.values_of(conn, "judge_model", first_hour)] == ["judge-a"]
        # and a window cut at both ends, inside one hour
        w = Q.Window(NOW - 4 * HOUR + 100, NOW - 4 * HOUR + 1900)
        inside = rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'quality'"
                          " AND created_at >= ? AND created_at < ?", w.since, w.until)[0]["n"]
        got = Q.merge(Q.score_aggs(conn, w, names=["quality"]).values())
        assert got["quality"].n_ok == inside > 0
    finally:
        conn.close()


# -- 1. a near-constant side --------------------------------------------------------------------

def test_near_constant_side_does_not_fail_the_gate(db: str, clock: StoreClock) -> None:
    """40 x 1.0 against 39 x 1.0 plus one 0.2: ``compare`` said REGRESSED (p ~ 0.0005) and
    ``check --compare`` exited 1; Welch gives p = 0.32. And an all-1.0 side's interval was the
    zero-width [1.000, 1.000]."""
    times = [NOW - 20 * HOUR + 900 * i for i in range(80)]
    feed(db, clock, times, quality=lambda i: 0.2 if i == 79 else 1.0, grounded=lambda i: 1.0,
         release=lambda i: "v1" if i < 40 else "v2")
    clock.t = NOW
    conn = open_db(db)
    try:
        cmp = build_comparison(conn, by="release", current="v2", baseline="v1", now=NOW)
    finally:
        conn.close()
    q = {r.name: r for r in cmp.rows}["quality"]
    assert q.verdict != "regressed" and q.diff.p_value > 0.3
    assert q.diff.lo < 0.0 < q.diff.hi and q.diff.method == "mover+range"
    base = q.baseline
    assert base.value == 1.0 and base.lo < 1.0 and base.hi == 1.0  # never zero width
    assert base.method == "range bound"
    gate = CliRunner().invoke(main, ["check", "--db", db, "--compare", "release=v2:v1"])
    assert gate.exit_code == 0, gate.output
    out = CliRunner().invoke(main, ["compare", "--db", db, "--current", "v2", "--baseline",
                                    "v1", "--json"])
    assert out.exit_code == 0, out.output
    js = json.loads(out.output)["scores"]["quality"]
    assert js["baseline"]["note"].startswith("no spread")
    assert "[1.000, 1.000]" not in CliRunner().invoke(
        main, ["compare", "--db", db, "--current", "v2", "--baseline", "v1"]).output
    # report --by release: v1's all-1.0 quality has the range bound, marked, not 1.000–1.000
    rep = CliRunner().invoke(main, ["report", "--db", db, "--by", "release"])
    assert rep.exit_code == 0, rep.output
    assert "1.000–1.000" not in rep.output and "0.912–1.000*" in rep.output
    assert "every value equal (no spread)" in rep.output


# -- 4. a value outside its own interval ---------------------------------------------------------

def test_a_monitor_value_is_never_printed_outside_an_unnamed_interval() -> None:
    """"mean 0.641 [0.645, 0.746]": a monitor's interval is a confidence sequence centred on the
    window's weighted mean, so it may leave the plain mean out; the report then names it."""
    from tracescore.read.model import MonitorStatus
    from tracescore.reports.html._monitors import _monitor_table
    from tracescore.reports.textfmt import monitor_estimate
    from tracescore.stats import Estimate

    assert monitor_estimate(0.7, 0.65, 0.75) == "0.700 [0.650, 0.750]"
    apart = monitor_estimate(0.641, 0.645, 0.746)
    assert "0.641 [" not in apart and "anytime interval [0.645, 0.746]" in apart
    m = MonitorStatus("faithfulness-floor", "ALERT", NOW, NOW,
                      Estimate(480, 0.641, 0.645, 0.746, ""))
    html = _monitor_table([m])
    assert "0.641 [0.645" not in html and "weighted mean" in html


def test_compare_text_marks_a_side_without_spread() -> None:
    from tracescore import stats
    from tracescore.reports.compare import Comparison, ScoreComparison
    from tracescore.reports.report_text import format_comparison

    ones = stats.Moments.from_values([1.0] * 40)
    dip = stats.Moments.from_values([1.0] * 39 + [0.2])
    d = stats.mean_difference(dip, ones, bounded=True)
    row = ScoreComparison("quality", "quality", "mean", True, stats.mean_ci(dip, bounded=True),
                          stats.mean_ci(ones, bounded=True), d, d.p_value, "no evidence")
    c = Comparison("x.db", "release", "release=v2", "release=v1", Q.Window(), Q.Window(), {},
                   30, 0.02, 0.05, "holm", [row])
    text = format_comparison(c, width=200)
    assert "1.000 [1.000, 1.000]" not in text and "1.000 [0.912, 1.000]*" in text
    assert "no spread" in text and "mover+range" in text and "range bound" in text


# -- 5. numbers a user can check -----------------------------------------------------------------

def test_export_carries_the_split_keys_and_recounts_report_by(db: str, clock: StoreClock) -> None:
    """``export`` had no release, environment, segment or judge model columns: a split of
    ``report --by`` could not be recomputed from it. Now every split's n and mean can."""
    times = [NOW - 10 * HOUR + 300 * i for i in range(60)]
    feed(db, clock, times, quality=lambda i: (i % 7) / 7, grounded=lambda i: float(i % 3 > 0),
         release=lambda i: f"v{i % 2 + 1}", judge=lambda i: f"judge-{'ab'[i % 2]}",
         route=lambda i: ("search", "chat")[i % 2])
    clock.t = NOW
    out = CliRunner().invoke(main, ["export", "--db", db, "--format", "jsonl"])
    assert out.exit_code == 0, out.output
    got = [json.loads(line) for line in out.output.splitlines()]
    assert {g["environment"] for g in got} == {"prod"}
    assert all(g["release"] in ("v1", "v2") and g["segments"]["route"] in ("search", "chat")
               and g["score_judge_model"] in ("judge-a", "judge-b") for g in got)
    conn = open_db(db)
    try:
        for by, key in (("release", lambda g: g["release"]),
                        ("judge_model", lambda g: g["score_judge_model"]),
                        ("metadata.route", lambda g: g["segments"]["route"])):
            rep = build_report(conn, by=by)
            for grp in rep.groups:
                if by == "judge_model" and grp.value is None:
                    continue  # the records' row: a judge model belongs to a score, not a record
                m = {x.name: x for x in grp.metrics}["quality"]
                vals = [g["score_value"] for g in got
                        if g["score_name"] == "quality" and key(g) == grp.value]
                assert m.count == len(vals) and m.mean == pytest.approx(sum(vals) / len(vals))
    finally:
        conn.close()


def test_compare_page_marks_a_side_without_spread() -> None:
    from tracescore import stats
    from tracescore.reports.compare import Comparison, ScoreComparison
    from tracescore.reports.html import render_comparison_html

    ones = stats.Moments.from_values([1.0] * 40)
    dip = stats.Moments.from_values([1.0] * 39 + [0.2])
    d = stats.mean_difference(dip, ones, bounded=True)
    row = ScoreComparison("quality", "quality", "mean", True, stats.mean_ci(dip, bounded=True),
                          stats.mean_ci(ones, bounded=True), d, d.p_value, "no evidence")
    c = Comparison("x.db", "release", "release=v2", "release=v1", Q.Window(), Q.Window(), {},
                   30, 0.02, 0.05, "holm", [row])
    page = render_comparison_html(c)
    assert "1.000 [0.912, 1.000]" in page and "1.000 [1.000, 1.000]" not in page
    assert page.count('data-note="no-spread"') == 1
    assert "<code>mover+range</code>" in page and "<code>range bound</code>" in page
