"""The HTML pages drawn from data alone: the report, the trend, the comparison.

Every page here is rendered from hand-built data objects (no database: the renderers take data,
never a connection) and parsed back with html.parser; the tests check the numbers, where the
marks are drawn (intervals, bands, release lines, difference bars), the colours, escaping and
that nothing is fetched.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from typing import Any

import pytest

from tracescore.read.model import (
    GroupSummary,
    Histogram,
    JudgeUsage,
    MetricSummary,
    MonitorStatus,
    Report,
    ReportPage,
    TimeBucket,
    Usage,
    WorstRecord,
)
from tracescore.read.query import Window
from tracescore.reports import html as H
from tracescore.reports.compare import Comparison, ScoreComparison
from tracescore.reports.trend import (
    ReleaseMark,
    TrendPage,
    TrendPoint,
    TrendSeries,
)
from tracescore.stats import Difference, Estimate
from tracescore.store.monitor_state import HistoryRow

DAY = 86400.0
HOUR = 3600.0
T0 = 1_750_000_000.0 // DAY * DAY  # a UTC midnight


def status(name: str, state: str, since: float, checked: float, value: float | None,
           lo: float | None, hi: float | None, n: int | None, summary: str = "") -> MonitorStatus:
    """A stored monitor state (n None: a row without an n)."""
    return MonitorStatus(name, state, since, checked,
                         Estimate(n or 0, value, lo, hi, ""), summary, n is not None)


def point(start: float, n: int, value: float, lo: float | None, hi: float | None) -> TrendPoint:
    return TrendPoint(start, Estimate(n, value, lo, hi, "t"))


def change(monitor: str, state: str, previous: str | None, at: float, value: float | None,
           lo: float | None, hi: float | None, n: int | None, summary: str = "") -> HistoryRow:
    """A monitor_history row."""
    return HistoryRow(0, monitor, state, previous, at, value, lo, hi, n,
                      {"summary": summary} if summary else {})
NASTY = 'Which "bike", <script>alert("x")</script> & co?'
NASTY_MONITOR = "faith <b>drop</b>"
NASTY_RELEASE = "v3<img src=x onerror=alert(1)>"


# -- a small DOM -----------------------------------------------------------------------------
@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.texts + [c.text for c in self.children])

    def all(self, tag: str | None = None, **attrs: str | None) -> list[Node]:
        """Descendants with ``tag`` whose attributes match (None: present at all; a
        ``cls`` value: one of the element's classes)."""
        out = []
        for c in self.children:
            if _matches(c, tag, attrs):
                out.append(c)
            out += c.all(tag, **attrs)
        return out

    def one(self, tag: str | None = None, **attrs: str | None) -> Node:
        found = self.all(tag, **attrs)
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]

    def f(self, name: str) -> float:
        return float(self.attrs[name])


def _matches(n: Node, tag: str | None, attrs: dict[str, str | None]) -> bool:
    if tag is not None and n.tag != tag:
        return False
    for k, v in attrs.items():
        if k == "cls":
            if v not in n.attrs.get("class", "").split():
                return False
            continue
        key = k.replace("_", "-")
        if key not in n.attrs or (v is not None and n.attrs[key] != v):
            return False
    return True


class Dom(HTMLParser):
    VOID = {"br", "meta", "img", "input", "link", "hr", "source"}
    SVG_LEAVES = {"rect", "line", "circle", "path"}  # self-closed (<x/>) or with a <title>

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.cur = self.root
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: dict[str, int] = {}
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.urls += [(tag, k, a[k]) for k in ("src", "href", "xlink:href", "action", "poster",
                                               "data", "srcset") if k in a]
        node = Node(tag, a, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.cur = self.cur.parent or self.root

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.texts.append(data)


def dom(text: str) -> Node:
    return Dom(text).root


def axis_x(svg: Node, t: float) -> float:
    """Where time ``t`` falls on a chart's x axis (its data-t0/t1 over data-x0/x1)."""
    t0, t1 = svg.f("data-t0"), svg.f("data-t1")
    x0, x1 = svg.f("data-x0"), svg.f("data-x1")
    return x0 + (x1 - x0) * (t - t0) / (t1 - t0)


def trend_y(svg: Node, v: float) -> float:
    """Where value ``v`` falls on a trend chart's y axis (data-ylo at the bottom)."""
    ylo, yhi = svg.f("data-ylo"), svg.f("data-yhi")
    return H.TPAD_T + (H.TH - H.TPAD_T - H.TPAD_B) * (1 - (v - ylo) / (yhi - ylo))


def points_of(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+),(-?[\d.]+)", d)]


# -- hand-built data ------------------------------------------------------------------------
def metric(name: str, **kw: Any) -> MetricSummary:
    base: dict[str, Any] = dict(name=name, metric=name, higher_is_better=True, count=200,
                                mean=0.8125, p10=0.555, p50=0.845, p90=0.975, fail_rate=0.1,
                                labelled=200, errors=2, skipped=3, threshold=0.5,
                                lo=0.7902, hi=0.8348, ci_method="t", error_rate=0.0099)
    base.update(kw)
    est = Estimate(base["count"], base.pop("mean"), base.pop("lo"), base.pop("hi"),
                   base.pop("ci_method"))
    return MetricSummary(**base, estimate=est)


def bucket(start: float, n: int, mean: float, failed: int, labelled: int, lo: float | None,
           hi: float | None) -> TimeBucket:
    return TimeBucket(start, Estimate(n, mean, lo, hi, "t"), failed, labelled)


def report_page(*, monitors: bool = True, by: bool = True) -> ReportPage:
    faith = metric("faithfulness")
    exact = metric("exact_match", binary=True, yes=130, rate=0.65, mean=0.65, p10=None,
                   p50=None, p90=None, lo=0.5814, hi=0.7133, ci_method="wilson",
                   threshold=1.0, fail_rate=0.35)
    length = metric("answer_length", higher_is_better=False, mean=42.5, lo=39.0, hi=46.0,
                    threshold=None, fail_rate=None, labelled=0, p10=0.995, p50=0.995,
                    p90=0.995)
    worst = {"faithfulness": [WorstRecord("faithfulness", 0.05, "fail", "ab" * 16,
                                          "rec-1", NASTY)]}
    mons = [
        status(NASTY_MONITOR, "ALERT", T0 + 8 * DAY, T0 + 10 * DAY, 0.71, 0.69, 0.73,
                      340, "mean below 0.75 <for sure>"),
        status("errors", "WARNING", T0 + 9 * DAY, T0 + 10 * DAY, 0.04, 0.02, 0.06, 500),
        status("latency", "NO_DATA", T0, T0 + 10 * DAY, None, None, None, None),
        status("relevance", "OK", T0, T0 + 10 * DAY, 0.9, 0.88, 0.92, 800),
    ] if monitors else []
    groups = [
        GroupSummary("v1", 120, 100, [metric("faithfulness", count=100, mean=0.85, lo=0.82,
                                             hi=0.88)]),
        GroupSummary("<v2>", 110, 100, [metric("faithfulness", count=100, mean=0.775,
                                               lo=0.74, hi=0.81),
                                        metric("exact_match", binary=True, count=100, yes=60,
                                               rate=0.6, lo=0.502, hi=0.691)]),
    ] if by else []
    report = Report(db="shop.db", since=None, generated_at=T0 + 10 * DAY, records=230,
                    sampled=200, dropped=0, pending_jobs=1, scores=612,
                    metrics=[faith, exact, length], worst=worst, monitors=mons,
                    by="release" if by else None, groups=groups)
    hist = Histogram(0.0, 1.0, [0, 0, 0, 0, 0, 10, 20, 40, 60, 50], [5, 5, 5, 5, 0, 0, 0, 0,
                                                                      0, 0], [0] * 10)
    buckets = [bucket(T0 + i * HOUR, 20, 0.8 + 0.01 * i, 2, 20, 0.75 + 0.01 * i,
                          0.85 + 0.01 * i) for i in (0, 1, 2, 5, 6)]
    buckets.append(bucket(T0 + 8 * HOUR, 1, 0.9, 0, 1, None, None))  # one value: no band
    records = {"rec-1": {
        "record_id": "rec-1", "trace_id": "ab" * 16, "created_at": T0, "latency_ms": 12.5,
        "model": "m", "error": None, "query": NASTY, "answer": "an <i>answer</i>",
        "ground_truths": ["truth"], "contexts": [{"text": "ctx </details> & more",
                                                  "source": "kb", "id": 1, "score": 0.5}],
        "scores": [{"name": "faithfulness", "value": 0.05, "label": "fail",
                    "explanation": "made <up>", "status": "ok", "error": None}],
    }}
    usage = Usage(records=230, with_usage=200, input_tokens=24_000, output_tokens=6_000,
                  models={"gpt-x": 230}, judge_scores=200,
                  judge=[JudgeUsage("gpt-x", "statements", 200, 1, 80_000, 9_000, 0.42)])
    return ReportPage(report, (T0, T0 + 8 * HOUR + 60), (3600, "hour"),
                      {"faithfulness": hist, "exact_match": Histogram(0.0, 1.0, [130, 0],
                                                                      [0, 70], [0, 0]),
                       "answer_length": Histogram(0.0, 1.0, [0] * 10, [0] * 10,
                                                  [0] * 9 + [200])},
                      {"faithfulness": buckets, "exact_match": buckets[:3],
                       "answer_length": [bucket(T0, 200, 42.5, 0, 0, 39.0, 46.0)]},
                      usage, records)


def trend_page(*, history: bool = True) -> TrendPage:
    faith = [point(T0 + i * DAY, 100 + i, 0.85 - (0.08 if i >= 5 else 0) + 0.002 * i,
                        0.82 - (0.08 if i >= 5 else 0), 0.88 - (0.08 if i >= 5 else 0) + 0.004)
             for i in range(10) if i != 3]  # day 3: no scores, the line breaks
    rate = [point(T0 + i * DAY, 50, 0.6, 0.46, 0.72) for i in range(10)]
    releases = [ReleaseMark("v1", T0 - 20 * DAY), ReleaseMark("v2", T0 + 4.5 * DAY),
                ReleaseMark(NASTY_RELEASE, T0 + 7.25 * DAY)]
    monitors = [status(NASTY_MONITOR, "ALERT", T0 + 6 * DAY, T0 + 10 * DAY, 0.77,
                              0.75, 0.79, 500, "mean below 0.8"),
                status("errors", "OK", T0, T0 + 10 * DAY, 0.01, 0.0, 0.02, 900)]
    hist = [change(NASTY_MONITOR, "ALERT", "WARNING", T0 + 6 * DAY, 0.77, 0.75, 0.79,
                          500, "interval below 0.8"),
            change(NASTY_MONITOR, "WARNING", "OK", T0 + 5.5 * DAY, 0.79, 0.76, 0.82,
                          300)] if history else []
    return TrendPage(db="shop.db", generated_at=T0 + 10 * DAY, since=None,
                     span=(T0 + 100, T0 + 9 * DAY + 500), bucket_s=DAY, bucket_label="day",
                     series=[TrendSeries("faithfulness", "faithfulness", "mean", True, 0.5,
                                         "t", faith),
                             TrendSeries("exact_match", "exact_match", "rate", True, 1.0,
                                         "wilson", rate)],
                     releases=releases, monitors=monitors, history=hist)


def row(name: str, verdict: str, diff: tuple[float | None, float | None, float | None], *,
        kind: str = "mean", n: tuple[int, int] = (500, 480), p: float | None = 0.01,
        method: str = "welch", hib: bool | None = True) -> ScoreComparison:
    est, lo, hi = diff
    cur = Estimate(n[0], 0.7, 0.68, 0.72, "wilson" if kind != "mean" else "t")
    base = (Estimate(n[1], None, None, None, "t") if est is None else
            Estimate(n[1], 0.7 - est, 0.68 - est, 0.72 - est,
                     "wilson" if kind != "mean" else "t"))
    return ScoreComparison(name, name, kind, hib, cur, base, Difference(est, lo, hi, p, method),
                           p, verdict)


def comparison(rows: list[ScoreComparison] | None = None) -> Comparison:
    if rows is None:
        rows = [
            row("faithfulness", "regressed", (-0.06, -0.085, -0.035), p=0.0001),
            row(NASTY, "improved", (0.05, 0.03, 0.07), p=0.002),
            row("relevance", "no change", (0.004, -0.01, 0.015), p=0.6),
            row("exact_match", "no evidence", (-0.03, -0.09, 0.03), kind="rate", p=0.4,
                method="newcombe+score"),
            row("coherence", "not enough data", (-0.2, -0.5, 0.1), n=(12, 500), p=0.3,
                method="mover+range"),
            row("all scores", "regressed", (0.03, 0.015, 0.05), kind="error rate", p=0.001,
                method="newcombe+fisher", hib=False),
        ]
    return Comparison(db="shop.db", by="release", current_label="release=v2",
                      baseline_label="release=<v1>", current_window=Window(T0, None),
                      baseline_window=Window(T0, None), where={"environment": "prod"},
                      min_n=30, min_effect=0.02, alpha=0.05, adjust="holm", rows=rows,
                      generated_at=T0 + DAY, current_records=520, baseline_records=510)


# -- the report page -------------------------------------------------------------------------
def test_report_shows_each_mean_with_its_interval() -> None:
    page = report_page()
    root = dom(H.render_html(page))
    for m in page.report.metrics:
        card = root.one("section", data_metric=m.name)
        ci = card.one("p", cls="ci")
        assert (ci.f("data-lo"), ci.f("data-hi")) == (m.lo, m.hi)
        if m.binary:
            assert f"{100 * m.lo:.1f}–{100 * m.hi:.1f}%" in ci.text and "Wilson" in ci.text
            assert card.one(data_stat="rate").f("data-value") == m.rate
        else:
            assert f"{H._val(m.lo)}–{H._val(m.hi)}" in ci.text and "Student t" in ci.text
            assert card.one(data_stat="mean").f("data-value") == m.mean
    # a score beyond [0, 1] says where its values went in the [0, 1] histogram
    assert "outside [0, 1]" in root.one("section", data_metric="answer_length").text
    assert "outside [0, 1]" not in root.one("section", data_metric="faithfulness").text


def test_report_timeline_draws_each_buckets_interval_as_a_band() -> None:
    page = report_page()
    card = dom(H.render_html(page)).one("section", data_metric="faithfulness")
    svg = card.one("svg", cls="timeline")
    buckets = page.timelines["faithfulness"]
    ylo, yhi = svg.f("data-ylo"), svg.f("data-yhi")
    assert (ylo, yhi) == (0.0, 1.0)
    ph = H.H - H.PAD_T - H.PAD_B

    def y(v: float) -> float:
        return H.PAD_T + ph * (1 - (v - ylo) / (yhi - ylo))

    dots = svg.all("circle", cls="pt")
    assert [(d.f("data-start"), d.f("data-mean")) for d in dots] == [
        (b.start, b.mean) for b in buckets]
    # hours 0-2 and 5-6 are runs; hour 8 has one value and no interval: no band there
    bands = svg.all("path", cls="band")
    assert [(b.attrs["data-from"], b.attrs["data-to"]) for b in bands] == [("0", "2"),
                                                                          ("3", "4")]
    for band in bands:
        lo_i, hi_i = int(band.attrs["data-from"]), int(band.attrs["data-to"])
        pts = points_of(band.attrs["d"])
        run = buckets[lo_i:hi_i + 1]
        assert [p[1] for p in pts] == pytest.approx(
            [y(b.hi) for b in run] + [y(b.lo) for b in reversed(run)], abs=0.06)
        assert [p[0] for p in pts[:len(run)]] == pytest.approx(
            [float(d.attrs["cx"]) for d in dots[lo_i:hi_i + 1]], abs=0.06)
    assert dots[-1].attrs["data-lo"] == "" and not svg.all("line", cls="bandbar")
    # a score beyond [0, 1] gets a scale that holds it
    length = dom(H.render_html(page)).one("section", data_metric="answer_length")
    tl = length.one("svg", cls="timeline")
    assert tl.f("data-ylo") == 0.0 and tl.f("data-yhi") >= 42.5


def test_report_lists_monitor_states_first() -> None:
    page = report_page()
    html = H.render_html(page)
    root = dom(html)
    table = root.one("section", cls="monitors")
    assert html.index('class="card monitors') < html.index('class="tiles"')
    rows = table.all("tr", data_monitor=None)
    assert [(r.attrs["data-monitor"], r.attrs["data-state"]) for r in rows] == [
        (m.name, m.state) for m in page.report.monitors]
    for r, m in zip(rows, page.report.monitors):
        badge = r.one("span", cls="badge")
        assert f"st-{m.state}" in badge.attrs["class"].split()
        cell = r.one("td", data_value=None)
        if m.value is None:
            assert cell.attrs["data-value"] == "" and "—" in cell.text
        else:
            assert (cell.f("data-value"), cell.f("data-lo"), cell.f("data-hi")) == (
                m.value, m.lo, m.hi)
            assert f"{m.value:.3f} [{m.lo:.3f}, {m.hi:.3f}]" in cell.text
            assert f"n = {m.n:,}" in r.text
    assert table.one(data_count="ALERT").text == "1"
    # the badge colours: an alert is red, OK green, a warning amber
    css = _css(html)
    assert "var(--bad)" in css[".st-ALERT"] and "var(--good)" in css[".st-OK"]
    assert "var(--warn)" in css[".st-WARNING"]
    # no monitors: no section
    assert 'class="card monitors' not in H.render_html(report_page(monitors=False))


def test_report_by_shows_a_table_per_group() -> None:
    page = report_page()
    root = dom(H.render_html(page))
    box = root.one("div", data_by="release")
    cards = box.all("section", cls="group")
    assert [c.attrs["data-group"] for c in cards] == ["v1", "<v2>"]
    for card, g in zip(cards, page.report.groups):
        assert f"{g.records:,} records, {g.sampled:,} sampled" in card.text
        rows = card.all("tr", data_score=None)
        assert [r.attrs["data-score"] for r in rows] == [m.name for m in g.metrics]
        for r, m in zip(rows, g.metrics):
            cell = r.one("td", data_g="estimate")
            assert cell.f("data-value") == (m.rate if m.binary else m.mean)
            assert (cell.f("data-lo"), cell.f("data-hi")) == (m.lo, m.hi)
    rate_row = cards[1].one("tr", data_score="exact_match")
    assert "60.0% [50.2, 69.1]" in rate_row.text
    assert "compare --by release" in root.text
    assert 'data-by="release"' not in H.render_html(report_page(by=False))


def test_report_with_the_trend_embedded() -> None:
    html = H.render_html(report_page(), trend_page())
    root = dom(html)
    assert {s.attrs["data-series"] for s in root.all("section", cls="trendcard")} == {
        "faithfulness", "exact_match"}
    # the trend's own monitor table is not repeated (the report's is at the top) ...
    assert len(root.all("section", cls="monitors")) == 1
    # ... but each monitor's history strip is there
    hist = root.one("section", cls="history")
    assert {s.attrs["data-monitor"] for s in hist.all("svg", cls="strip")} == {
        NASTY_MONITOR, "errors"}
    # the trend section uses its own attributes: the report's cards are still one per score
    assert len(root.all("section", cls="metric")) == 3


# -- the trend -------------------------------------------------------------------------------
def test_trend_points_and_bands_are_the_datas() -> None:
    trend = trend_page()
    root = dom(H.render_trend_html(trend))
    for s in trend.series:
        svg = root.one("svg", cls="trend", data_series=s.name)
        # from the first bucket's start to the last bucket's end
        assert (svg.f("data-t0"), svg.f("data-t1")) == (T0, T0 + 10 * DAY)

        def x(t: float, svg: Node = svg) -> float:
            return axis_x(svg, t)

        def y(v: float, svg: Node = svg) -> float:
            return trend_y(svg, v)

        dots = svg.all("circle", cls="pt")
        assert [(d.f("data-start"), d.f("data-value"), int(d.attrs["data-n"]),
                 d.f("data-lo"), d.f("data-hi")) for d in dots] == [
            (p.start, p.value, p.n, p.lo, p.hi) for p in s.points]
        for d, p in zip(dots, s.points):  # a point sits mid-bucket, at its value
            assert float(d.attrs["cx"]) == pytest.approx(x(p.start + DAY / 2), abs=0.06)
            assert float(d.attrs["cy"]) == pytest.approx(y(p.value), abs=0.06)
        bands = svg.all("path", cls="band")
        covered = []
        for band in bands:
            a, b = int(band.attrs["data-from"]), int(band.attrs["data-to"])
            run = s.points[a:b + 1]
            covered += list(range(a, b + 1))
            pts = points_of(band.attrs["d"])
            assert len(pts) == 2 * len(run)
            assert [py for _, py in pts] == pytest.approx(
                [y(p.hi) for p in run] + [y(p.lo) for p in reversed(run)], abs=0.06)
        assert covered == list(range(len(s.points)))
    # ten days: a tick every other day, each on its midnight
    faith = root.one("svg", data_series="faithfulness")
    marks = [float(t.attrs["x1"]) for t in faith.all("line", cls="tick")]
    assert marks == pytest.approx([axis_x(faith, T0 + d * DAY) for d in range(0, 11, 2)],
                                  abs=0.06)
    # the missing day 3 breaks faithfulness' band and line in two; the rate is one piece
    faith = root.one("svg", data_series="faithfulness")
    assert len(faith.all("path", cls="band")) == len(faith.all("path", cls="line")) == 2
    assert len(root.one("svg", data_series="exact_match").all("path", cls="band")) == 1
    # the scale follows the data and its intervals (a trend is read for its changes), on
    # round gridlines; a rate is labelled in percent, a mean as is
    for s in trend.series:
        svg = root.one("svg", data_series=s.name)
        ylo, yhi = svg.f("data-ylo"), svg.f("data-yhi")
        values = [v for p in s.points for v in (p.value, p.lo, p.hi)]
        assert 0 <= ylo <= min(values) and max(values) <= yhi <= 1
        assert yhi - ylo < 0.5
        ticks = [t.text for t in svg.all("text", cls="ax") if t.attrs.get("text-anchor") == "end"
                 and not t.text.startswith(("Jun", "Jul"))]
        assert len(ticks) >= 3
        assert all(t.endswith("%") for t in ticks) == (s.kind == "rate")
    # the mean's threshold (0.5) is below this scale: a note says so; none for the rate
    assert not faith.all("line", cls="thr")
    assert faith.one("text", cls="thrnote").text == "threshold 0.5 ↓"
    rate = root.one("svg", data_series="exact_match")
    assert not rate.all("line", cls="thr") and not rate.all("text", cls="thrnote")


def test_trend_marks_release_changes_on_the_time_axis() -> None:
    trend = trend_page()
    html = H.render_trend_html(trend)
    root = dom(html)
    for s in trend.series:
        svg = root.one("svg", cls="trend", data_series=s.name)
        marks = svg.all("g", cls="rel")
        # v1 came before the axis: named at its left edge, no line
        assert [m.attrs["data-release"] for m in marks] == ["v2", NASTY_RELEASE]
        for m, r in zip(marks, trend.releases[1:]):
            line = m.one("line")
            want = axis_x(svg, r.at)
            assert float(line.attrs["x1"]) == float(line.attrs["x2"]) == pytest.approx(
                want, abs=0.06)
            assert m.f("data-at") == r.at
            assert r.release in m.text
        assert svg.one("text", cls="rel0").attrs["data-release-start"] == "v1"
    # the release name is text, not markup
    assert "<img" not in html and not root.all("img")
    css = _css(html)
    assert "stroke-dasharray" in css["svg .rel line"]


def test_trend_per_hour_labels_hours() -> None:
    hourly = TrendPage(db="x", generated_at=T0 + 30 * HOUR, since=None,
                       span=(T0 + 10, T0 + 20 * HOUR + 10), bucket_s=HOUR,
                       bucket_label="hour", series=[TrendSeries(
                           "faithfulness", "faithfulness", "mean", True, 0.75, "t",
                           [point(T0 + i * HOUR, 9, 0.7, 0.6, 0.8) for i in range(21)])],
                       releases=[ReleaseMark("v9", T0 + 12.5 * HOUR)])
    root = dom(H.render_trend_html(hourly))
    svg = root.one("svg", cls="trend")
    assert (svg.f("data-t0"), svg.f("data-t1")) == (T0, T0 + 21 * HOUR)
    ticks = [t.text for t in svg.all("text", cls="ax") if ":" in t.text]
    # the time ticks lie on the axis, on bucket boundaries, evenly spaced
    marks = [float(t.attrs["x1"]) for t in svg.all("line", cls="tick")]
    assert marks[0] == pytest.approx(svg.f("data-x0"), abs=0.06)
    assert marks[-1] <= svg.f("data-x1") + 0.06 and len(marks) <= 7
    # 21 hours: a tick every 4 hours (at most 7 ticks)
    assert [axis_x(svg, T0 + h * HOUR) for h in range(0, 22, 4)] == pytest.approx(marks,
                                                                                 abs=0.06)
    assert ticks and ticks[0].endswith("00:00") and all(t.endswith(":00") for t in ticks)
    assert "per hour (UTC)" in root.text
    # a threshold inside the scale is a line at its height
    thr = svg.one("line", cls="thr")
    assert float(thr.attrs["y1"]) == pytest.approx(trend_y(svg, 0.75), abs=0.06)


def test_trend_monitor_states_and_history() -> None:
    trend = trend_page()
    html = H.render_trend_html(trend)
    root = dom(html)
    table = root.one("section", cls="monitors")
    rows = table.all("tr", data_monitor=None)
    assert [(r.attrs["data-monitor"], r.attrs["data-state"]) for r in rows] == [
        (NASTY_MONITOR, "ALERT"), ("errors", "OK")]
    # the alerting monitor's strip: OK before its first change, WARNING, then ALERT to the end
    strip = rows[0].one("svg", cls="strip")
    t0, t1 = strip.f("data-t0"), strip.f("data-t1")
    assert (t0, t1) == (T0, T0 + 10 * DAY)
    rects = strip.all("rect", data_state=None)
    assert [(r.attrs["data-state"], r.f("data-from")) for r in rects] == [
        ("OK", T0), ("WARNING", T0 + 5.5 * DAY), ("ALERT", T0 + 6 * DAY)]
    w = H._STRIP_W
    assert [float(r.attrs["x"]) for r in rects] == pytest.approx([0, 0.55 * w, 0.6 * w],
                                                                 abs=0.06)
    assert float(rects[-1].attrs["x"]) + float(rects[-1].attrs["width"]) == pytest.approx(w,
                                                                                         abs=0.1)
    assert [r.attrs["class"] for r in rects] == ["s-OK", "s-WARNING", "s-ALERT"]
    # no change in the window: the current state since it began
    ok = rows[1].one("svg", cls="strip").all("rect", data_state=None)
    assert [(r.attrs["data-state"], r.f("data-from")) for r in ok] == [("OK", T0)]
    # the history list, newest first, with the state it left
    changes = root.one("section", cls="history").all("li", data_change=None)
    assert [c.f("data-at") for c in changes] == [T0 + 6 * DAY, T0 + 5.5 * DAY]
    first = [b.attrs["data-state"] for b in changes[0].all("span", cls="badge")]
    assert first == ["WARNING", "ALERT"]
    assert "0.770 [0.750, 0.790]" in changes[0].text and "n = 500" in changes[0].text
    css = _css(html)
    assert "var(--bad)" in css["svg .s-ALERT"] and "var(--good)" in css["svg .s-OK"]


def test_trend_without_scores_or_monitor_tables() -> None:
    empty = TrendPage(db="new.db", generated_at=T0, since=None, span=None, bucket_s=HOUR,
                      bucket_label="hour")
    html = H.render_trend_html(empty)
    root = dom(html)
    assert root.one(data_trend="empty") and not root.all("svg")
    assert 'class="card monitors' not in html and 'class="card history"' not in html


# -- the comparison --------------------------------------------------------------------------
def test_comparison_rows_carry_the_numbers() -> None:
    c = comparison()
    root = dom(H.render_comparison_html(c))
    trs = root.all("tr", data_verdict=None)
    assert [(t.attrs["data-row"], t.attrs["data-verdict"]) for t in trs] == [
        (r.name if r.kind in ("mean", "rate") else r.kind, r.verdict) for r in c.rows]
    for t, r in zip(trs, c.rows):
        assert t.one("td", data_n="current").text == f"{r.current.n:,}"
        assert t.one("td", data_n="baseline").text == f"{r.baseline.n:,}"
        assert t.one("td", data_est="current").attrs["data-value"] == repr(r.current.value)
        p = t.one("td", data_p=None)
        assert p.f("data-p") == r.p_adjusted
        assert p.text == (f"{r.p_adjusted:.3f}" if r.p_adjusted >= 0.001 else "<0.001")
        assert t.one("span", cls="verdict").text == r.verdict
    mean_row = trs[0]
    assert "70.0%" not in mean_row.text and "0.700 [0.680, 0.720]" in mean_row.text
    assert "-0.060 [-0.085, -0.035]" in mean_row.text
    rate_row = root.one("tr", data_row="exact_match")
    assert "70.0% [68.0, 72.0]" in rate_row.text and "-3.0 pp [-9.0, +3.0]" in rate_row.text
    assert root.one(data_banner="regressed")
    assert "faithfulness, error rate" in root.one(data_banner="regressed").text


def test_comparison_interval_bars() -> None:
    c = comparison()
    root = dom(H.render_comparison_html(c))
    scales = set()
    for t, r in zip(root.all("tr", data_verdict=None), c.rows):
        svg = t.one("svg", cls="diff")
        scale = svg.f("data-scale")

        def x(v: float, svg: Node = svg, scale: float = scale) -> float:
            x0, x1 = svg.f("data-x0"), svg.f("data-x1")
            return x0 + (x1 - x0) * (v + scale) / (2 * scale)

        d = r.diff
        assert svg.f("data-est") == d.estimate and svg.f("data-min-effect") == c.min_effect
        zero = svg.one("line", cls="zero")
        assert float(zero.attrs["x1"]) == pytest.approx(x(0), abs=0.06)
        eq = svg.one("rect", cls="eq")
        assert float(eq.attrs["x"]) == pytest.approx(x(-c.min_effect), abs=0.06)
        assert float(eq.attrs["width"]) == pytest.approx(x(c.min_effect) - x(-c.min_effect),
                                                         abs=0.1)
        ci = svg.one("line", cls="ci")
        assert (float(ci.attrs["x1"]), float(ci.attrs["x2"])) == pytest.approx(
            (x(d.lo), x(d.hi)), abs=0.06)
        assert float(svg.one("circle", cls="est").attrs["cx"]) == pytest.approx(
            x(d.estimate), abs=0.06)
        assert max(abs(d.lo), abs(d.hi)) <= scale  # the whole interval is on the axis
        assert H._vclass(r.verdict) in svg.attrs["class"].split()
        if r.verdict != "not enough data":
            scales.add(scale)
    # rows in ±1 share one scale, so their bars compare; a row with too little data to say
    # anything (its interval ±0.3) does not squash them: it gets its own
    assert scales == {0.1}


def test_comparison_verdict_colours() -> None:
    html = H.render_comparison_html(comparison())
    css = _css(html)
    want = {"regressed": "--bad", "improved": "--good", "changed": "--warn",
            "no change": "--accent", "no evidence": "--none", "not enough data": "--faint"}
    for verdict, var in want.items():
        assert css["." + H._vclass(verdict)] == f"--vc:var({var})"
    assert "var(--vc" in css["svg .ci"] and "var(--vc" in css["svg .est"]
    assert "var(--vc" in css[".verdict"]
    root = dom(html)
    for verdict in ("regressed", "improved", "no change", "no evidence", "not enough data"):
        tr = root.one("tr", data_verdict=verdict) if verdict != "regressed" else \
            root.all("tr", data_verdict=verdict)[0]
        assert H._vclass(verdict) in tr.one("span", cls="verdict").attrs["class"].split()
        assert H._vclass(verdict) in tr.one("svg").attrs["class"].split()


def test_comparison_footnote_names_the_methods() -> None:
    root = dom(H.render_comparison_html(comparison()))
    notes = root.one("section", cls="notes").text
    for word in ("Welch", "Newcombe", "MOVER", "range bound", "Fisher", "Wilson", "Student t", "Holm",
                 "family-wise", "±0.02", "fewer than 30", "α = 0.05"):
        assert word in notes, word
    bh = replace(comparison(), adjust="fdr_bh")
    assert "Benjamini–Hochberg" in dom(H.render_comparison_html(bh)).one(
        "section", cls="notes").text


def test_comparison_wide_and_empty_rows() -> None:
    wide = row("answer_length", "regressed", (12.0, 8.0, 16.0), p=0.0001)
    none = row("judge_only", "not enough data", (None, None, None), n=(0, 40), p=None)
    root = dom(H.render_comparison_html(comparison([wide, none, row(
        "faithfulness", "no change", (0.001, -0.005, 0.007))])))
    svg = root.one("tr", data_row="answer_length").one("svg")
    assert svg.f("data-scale") >= 16.0  # its own scale, so the interval is on the axis
    assert root.one("tr", data_row="faithfulness").one("svg").f("data-scale") < 1
    blank = root.one("tr", data_row="judge_only")
    assert not blank.all("line", cls="ci") and not blank.all("circle", cls="est")
    assert "no data" in blank.text and blank.one("td", data_p=None).text == "—"
    assert root.one(data_banner="regressed")
    empty = dom(H.render_comparison_html(comparison([])))
    assert "No scores on either side." in empty.text and not empty.all("table")


# -- every page ------------------------------------------------------------------------------
def _pages() -> dict[str, str]:
    return {"report": H.render_html(report_page(), trend_page()),
            "trend": H.render_trend_html(trend_page()),
            "compare": H.render_comparison_html(comparison())}


def test_user_text_is_escaped_on_every_page() -> None:
    for name, html in _pages().items():
        assert "<script>alert" not in html, name
        assert "<b>drop</b>" not in html and "<img" not in html, name
        d = Dom(html)
        # the only script is the report's own "expand all"; no markup came from user text
        assert d.tags.get("script", 0) == (1 if name == "report" else 0), name
        assert d.tags.get("img", 0) == 0 and d.tags.get("up", 0) == 0, name
        assert not any(b.text == "drop" for b in d.root.all("b")), name
    pages = _pages()
    report = dom(pages["report"])
    assert NASTY in report.one("article", cls="record").text  # parsed back: what was captured
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in pages["report"]
    assert "ctx </details> & more" in report.text and "made <up>" in report.text
    assert report.one("tr", data_monitor=NASTY_MONITOR)
    assert "mean below 0.75 <for sure>" in report.text
    assert report.one("section", data_group="<v2>")
    trend = dom(pages["trend"])
    assert len(trend.all("g", data_release=NASTY_RELEASE)) == 2  # one per chart
    assert NASTY_MONITOR in trend.one("section", cls="history").text
    compare = dom(pages["compare"])
    assert compare.one("tr", data_row=NASTY) and "release=<v1>" in compare.text


def test_no_page_fetches_anything() -> None:
    for name, html in _pages().items():
        d = Dom(html)
        # in-page anchors only (the worst-record links); no src, no external href
        assert all(attr == "href" and value.startswith("#") for _, attr, value in d.urls), (
            name, d.urls)
        for tag in ("link", "img", "iframe", "object", "embed", "video", "audio", "source",
                    "image", "use", "base", "form"):
            assert d.tags.get(tag, 0) == 0, (name, tag)
        assert not re.search(r"https?:|//[a-z]", html), name
        for node in d.root.all():
            assert not any(v.strip().lower().startswith(("http", "//", "javascript:"))
                           for v in node.attrs.values()), (name, node.tag, node.attrs)
        assert "@import" not in html and "url(" not in html, name
        assert "<style>" in html and html.startswith("<!doctype html>")


def test_rendering_takes_data_not_a_connection() -> None:
    """No query while drawing: the renderers have no database to reach."""
    import importlib
    import inspect
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(H.__path__)]
    assert len(names) >= 5  # every module of the package, not just its __init__
    for name in ["", *names]:
        mod = importlib.import_module(f"{H.__name__}.{name}" if name else H.__name__)
        src = inspect.getsource(mod)
        for word in ("execute(", "sqlite3", "open_db", "from ..query", "from ..report ",
                     "from ..show", "from .query", "from .report ", "from .show"):
            assert word not in src, (name, word)
        assert not re.search(r"\bconn\b", src), name


def _css(html: str) -> dict[str, str]:
    """The page's CSS rules, selector → declarations (one rule per selector in a list)."""
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    style = re.sub(r"@media[^{]*\{((?:[^{}]*\{[^{}]*\})*)\s*\}", "", style)
    out: dict[str, str] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", style):
        for sel in selectors.split(","):
            sel = " ".join(sel.split())
            out[sel] = (out.get(sel, "") + ";" + body.strip()).strip(";")
    return out


def test_css_helper_reads_rules() -> None:
    css = _css("<style>.a,.b{x:1}svg .c{y:2}@media (x){.a{z:3}}</style>")
    assert css == {".a": "x:1", ".b": "x:1", "svg .c": "y:2"}
    assert math.isclose(H._nice_up(0.31), 0.5) and H._nice_up(12.0) == 20.0


# -- end to end: the real pipeline, the real store, the data builder ---------------------------
def test_trend_from_a_database_with_two_releases(make_ts: Any, db_path: Any) -> None:
    """Records logged by two releases through the real pipeline; a monitor evaluated by the
    real evaluator; build_trend reads them back and the page draws them."""
    import sqlite3
    import statistics

    from scipy import stats

    from tracescore.monitor.config import monitors_from_objects
    from tracescore.monitor.evaluate import Evaluator
    from tracescore.read.db import open_db
    from tracescore.read.pipeline import monitor_statuses
    from tracescore.reports.trend import build_trend
    from tracescore.testing import ScriptedMetric

    values = {"v1": [0.9, 0.8, 0.85, 0.95, 0.7, 0.9], "v2": [0.6, 0.5, 0.7, 0.65, 0.55, 0.6]}
    for release, vals in values.items():
        it = iter(vals)
        metric = ScriptedMetric(lambda r, it=it: next(it), name="grounded")
        ts, _ = make_ts(release=release, environment="prod", metrics=[metric])
        for i in range(len(vals)):
            ts.log_record(query=f"{release} question {i} <script>", answer="an answer")
        assert ts.flush(timeout=60)
        ts.shutdown(timeout=30)
    monitors = monitors_from_objects([{"name": "grounded-low", "score": "grounded",
                                       "threshold": 0.8, "min_n": 5, "notify": []}])
    ev = Evaluator(str(db_path), monitors)
    try:
        ev.run_once()
    finally:
        ev.release()
        ev.close()

    conn = open_db(db_path)
    try:
        trend = build_trend(conn, db=str(db_path))
        daily = build_trend(conn, by_hour=False)
        only_v2 = build_trend(conn, where={"release": "v2"})
        statuses = monitor_statuses(conn)
    finally:
        conn.close()
    raw = sqlite3.connect(db_path)
    stored = {r[0]: r[1] for r in raw.execute(
        "SELECT release, min(created_at) FROM records GROUP BY release")}
    raw.close()

    # a short span: per hour; every value in its hour's mean, with the Student t interval
    assert (trend.bucket_s, trend.bucket_label) == (HOUR, "hour")
    (series,) = trend.series
    assert (series.name, series.kind, series.ci_method) == ("grounded", "mean", "t")
    everything = values["v1"] + values["v2"]
    assert sum(p.n for p in series.points) == len(everything)
    if len(series.points) == 1:  # (unless the run straddled an hour)
        p = series.points[0]
        n = len(everything)
        half = stats.t.ppf(0.975, n - 1) * statistics.stdev(everything) / math.sqrt(n)
        assert p.value == pytest.approx(statistics.fmean(everything))
        assert (p.lo, p.hi) == pytest.approx((p.value - half, p.value + half))
    assert [r.release for r in trend.releases] == ["v1", "v2"]
    assert [r.at for r in trend.releases] == pytest.approx([stored["v1"], stored["v2"]],
                                                           abs=2.0)
    # per day on request; a filter keeps its segment's scores and releases only
    assert daily.bucket_s == DAY and all(p.start % DAY == 0 for p in daily.series[0].points)
    assert sum(p.n for p in only_v2.series[0].points) == len(values["v2"])
    assert [r.release for r in only_v2.releases] == ["v2"]
    # the monitor's state and the change that led to it
    assert [(m.name, m.state) for m in trend.monitors] == [(m.name, m.state) for m in statuses]
    assert trend.monitors and trend.history
    assert {h.monitor for h in trend.history} == {"grounded-low"}

    html = H.render_trend_html(trend)
    root = dom(html)
    svg = root.one("svg", cls="trend", data_series="grounded")
    assert [float(c.attrs["data-value"]) for c in svg.all("circle", cls="pt")] == [
        p.value for p in series.points]
    assert {g.attrs["data-release"] for g in svg.all("g", cls="rel")} | {
        t.attrs["data-release-start"] for t in svg.all("text", cls="rel0")} <= {"v1", "v2"}
    assert root.one("tr", data_monitor="grounded-low")
    assert "<script>" not in html
