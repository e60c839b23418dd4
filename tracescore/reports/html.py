"""HTML pages — the report, the trend, the comparison — each one self-contained file, drawn
from data only.

Query, then render: the pages take what the query side built — a
:class:`~tracescore.reports.model.ReportPage` (:func:`.report.build_page`), a
:class:`~tracescore.reports.trend.TrendPage` (:func:`.trend.build_trend`), a
:class:`~tracescore.reports.compare.Comparison` (:func:`.compare.build_comparison`) — and never
a connection: nothing here reads the database, so a page is tested from hand-built data and a
new front end costs one file.

Everything is inline: CSS, SVG charts drawn here, and a few lines of JavaScript for "expand
all" on the report. Nothing is fetched from anywhere, so a file can be mailed or archived.
Every piece of user text (queries, answers, contexts, explanations, and the names of metrics,
monitors, releases and segments) goes through :func:`html.escape`.

Pure functions: no I/O, no shared state, safe to call from any thread.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..score import label_for
from .model import (
    GroupSummary,
    Histogram,
    MetricSummary,
    MonitorStatus,
    Report,
    ReportPage,
    TimeBucket,
    Usage,
)
from .textfmt import num as _num
from .textfmt import pct as _pct
from .textfmt import when as _when

if TYPE_CHECKING:
    from .compare import Comparison, ScoreComparison
    from .trend import ReleaseMark, TrendPage, TrendSeries

__all__ = ["CONTEXT_CHARS", "render_comparison_html", "render_html", "render_trend_html"]

#: Characters of each context shown (inside a collapsed <details>).
CONTEXT_CHARS = 4000
#: The interval methods' names as a reader knows them (:mod:`tracescore.monitor.stats`).
METHODS = {
    "t": "Student t interval of the mean",
    "wilson": "Wilson score interval of the rate",
    "welch": "Welch's unequal-variance t interval and test (means)",
    "bootstrap": "percentile bootstrap over the rollups' 100-bin histograms (4,000 seeded "
                 "resamples), where Welch's normal approximation is not trusted (few or "
                 "skewed values)",
    "newcombe+score": "Newcombe's hybrid score interval (from the two Wilson intervals) with "
                      "the pooled two-proportion score test (rates)",
    "newcombe+fisher": "Newcombe's hybrid score interval with Fisher's exact test (rates with "
                       "an expected cell count below 5)",
}
_SHORT = {"t": "Student t", "wilson": "Wilson"}
#: Monitor states, worst first (the badge colours are in the CSS: .st-STATE).
STATES = ("ALERT", "WARNING", "NO_DATA", "OK")


# -- the report page -------------------------------------------------------------------------
def render_html(page: ReportPage, trend: TrendPage | None = None, *,
                context_chars: int = CONTEXT_CHARS) -> str:
    """The report page for ``page`` (:func:`~tracescore.reports.report.build_page`).

    First the monitors' states, then totals; per score name its headline number with the
    95 % interval, a histogram of values and the mean per time bucket with its interval band;
    the ``report --by`` groups as a table each; the trend (``trend``, when given); the worst
    records (each once, with every score, the explanations and the contexts); token usage of
    the app and of judge metrics.
    """
    report = page.report
    bucket, span = page.bucket, page.span
    cards = [
        _metric_card(m, page.histograms.get(m.name), page.timelines.get(m.name, []), bucket,
                     span, report.worst.get(m.name, []))
        for m in report.metrics
    ]
    worst = _worst_records(page, context_chars)

    errors = sum(m.errors for m in report.metrics)
    skipped = sum(m.skipped for m in report.metrics)
    tiles = [
        _tile("Records", f"{report.records:,}",
              f"{report.sampled:,} sampled{_share(report.sampled, report.records)}", "records"),
        _tile("Scores", f"{report.scores:,}", f"{len(report.metrics)} score names", "scores"),
        _tile("Errors", f"{errors:,}", "metric raised or timed out", "errors",
              "bad" if errors else ""),
        _tile("Skipped", f"{skipped:,}", "missing inputs", "skipped"),
        _tile("Pending jobs", f"{report.pending_jobs:,}", "not scored yet", "pending_jobs",
              "warn" if report.pending_jobs else ""),
        _tile("Dropped", f"{report.dropped:,}", "queue was full", "dropped",
              "bad" if report.dropped else ""),
    ]
    body = [
        '<header class="top">',
        '<div><h1>tracescore report</h1>',
        f'<p class="sub">{_scope(report.db, report.since, report.where)} · '
        f"generated {escape(_when(report.generated_at))}</p></div>",
        "</header>",
        _monitor_table(report.monitors),
        f'<section class="tiles">{"".join(tiles)}</section>',
        _notices(report),
        _skip_banner(report.metrics),
    ]
    if not report.metrics:
        empty = "No scores yet." if report.records else "No records yet."
        hint = ("Scoring jobs are waiting for a running pipeline." if report.pending_jobs
                else "Run an app with tracescore, or try <code>tracescore demo</code>.")
        body.append(f'<p class="empty">{empty} {hint}</p>')
    else:
        charts = (f" · each card charts how the values are spread, then the mean per "
                  f"{escape(bucket[1])} over time (UTC) with its 95 % interval band"
                  if bucket else "")
        body += [
            '<div class="h2row"><h2>Scores</h2>',
            '<p class="legend"><span class="sw pass"></span>pass <span class="sw fail"></span>'
            f'fail <span class="sw none"></span>no threshold{charts}</p></div>',
            f'<div class="grid">{"".join(cards)}</div>',
        ]
    if report.by is not None:
        body.append(_groups(report.by, report.groups))
    if trend is not None:
        body += _trend_sections(trend, monitor_table=False)
    if worst:
        body += [
            '<div class="h2row"><h2>Worst records</h2>',
            '<p class="legend">the lowest-scoring records; a record low on several scores '
            'is shown once, its chips name those scores · '
            '<button type="button" id="toggle">expand all</button></p></div>',
            "".join(worst),
        ]
    body += ['<div class="h2row"><h2>Cost</h2></div>', _cost(page.usage)]
    body.append(
        f'<footer>tracescore {escape(__version__)} · details of a record: '
        "<code>tracescore show TRACE_ID</code> · intervals are 95 % (Student t for means, "
        "Wilson for rates); percentiles from 100 bins over [0, 1] (±0.005) · all numbers from "
        f'<span class="mono">{escape(report.db)}</span></footer>'
    )
    title = f"tracescore report · {report.db}" if report.db else "tracescore report"
    return _document(title, body, script=_JS)


def render_trend_html(trend: TrendPage) -> str:
    """A page of its own for the trend: the monitors' states, each score over time with its
    interval band and the releases marked, and the monitors' history."""
    body = [
        '<header class="top">',
        '<div><h1>tracescore trend</h1>',
        f'<p class="sub">{_scope(trend.db, trend.since, trend.where)} · '
        f"generated {escape(_when(trend.generated_at))}</p></div>",
        "</header>",
        *_trend_sections(trend, monitor_table=True),
        f'<footer>tracescore {escape(__version__)} · <code>tracescore check</code> evaluates '
        "the monitors; <code>tracescore compare --by release</code> tests a release against "
        "the one before it</footer>",
    ]
    title = f"tracescore trend · {trend.db}" if trend.db else "tracescore trend"
    return _document(title, body)


def _document(title: str, body: Sequence[str], script: str = "") -> str:
    js = f"<script>{script}</script>\n" if script else ""
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<main>\n{chr(10).join(b for b in body if b)}\n</main>\n{js}</body>\n</html>\n'
    )


def _scope(db: str, since: float | None, where: dict[str, str]) -> str:
    window = "all time" if since is None else f"since {_when(since)}"
    scope = "".join(f" · {k} = {v}" for k, v in where.items())
    return f'<span class="mono">{escape(db)}</span> · {escape(window + scope)}'


# -- pieces ----------------------------------------------------------------------------------
def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""


def _tile(label: str, value: str, note: str, key: str, tone: str = "") -> str:
    return (f'<div class="tile {tone}"><div class="tl">{escape(label)}</div>'
            f'<div class="tv" data-total="{key}">{escape(value)}</div>'
            f'<div class="tn">{escape(note)}</div></div>')


def _badge(state: str) -> str:
    known = state if state in STATES else "NO_DATA"
    return (f'<span class="badge st-{known}" data-state="{escape(state)}">'
            f"{escape(state.replace('_', ' '))}</span>")


def _estimate(value: float | None, lo: float | None, hi: float | None,
              rate: bool = False) -> str:
    """``0.712 [0.690, 0.734]``, or for a rate ``71.2% [69.0, 73.4]``."""
    if value is None:
        return "—"
    if rate:
        text = f"{100 * value:.1f}%"
        return text + (f" [{100 * lo:.1f}, {100 * hi:.1f}]"
                       if lo is not None and hi is not None else "")
    text = _val(value)
    return text + (f" [{_val(lo)}, {_val(hi)}]" if lo is not None and hi is not None else "")


def _monitor_table(monitors: Sequence[MonitorStatus],
                   strips: dict[str, str] | None = None) -> str:
    """The monitors' current states, alerts first (the order :func:`.report.monitor_statuses`
    gives); ``strips``: an SVG of each monitor's state over time, for the trend page."""
    if not monitors:
        return ""
    counts = {s: sum(m.state == s for m in monitors) for s in STATES}
    summary = " ".join(f'{_badge(s)} <b data-count="{s}">{n}</b>'
                       for s, n in counts.items() if n)
    rows = []
    for m in monitors:
        est = _estimate(m.value, m.lo, m.hi)
        strip = "" if strips is None else f'<td class="stripcell">{strips.get(m.name, "")}</td>'
        rows.append(
            f'<tr data-monitor="{escape(m.name)}" data-state="{escape(m.state)}">'
            f'<td>{_badge(m.state)}</td><td><div class="mname">{escape(m.name)}</div>'
            f'{f"<div class=msum>{escape(m.summary)}</div>" if m.summary else ""}</td>'
            f'<td class="num" data-value="{_attr(m.value)}" data-lo="{_attr(m.lo)}" '
            f'data-hi="{_attr(m.hi)}">{escape(est)}</td>'
            f'<td class="num">{"—" if m.n is None else f"n = {m.n:,}"}</td>'
            f'<td class="when">since {escape(_when(m.since))}</td>{strip}</tr>')
    head = "" if strips is None else "<th>over the trend's span</th>"
    worst = next((s for s in STATES if counts[s]), "OK")
    return (f'<section class="card monitors worst-{worst}" data-monitors="{len(monitors)}">'
            f'<div class="mhead"><h3>Monitors</h3><p class="mcounts">{summary}</p></div>'
            "<table><thead><tr><th>state</th><th>monitor · why</th>"
            "<th class=num>value [95% CI]</th>"
            f"<th class=num>n</th><th>since</th>{head}</tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table>'
            '<p class="note">states as the last <code>tracescore check</code> / '
            "<code>tracescore monitor</code> left them; an alert fires when the interval lies "
            "beyond the threshold, a warning may rest on the point estimate alone</p></section>")


def _attr(v: float | None) -> str:
    return "" if v is None else escape(repr(v))


def _notices(report: Report) -> str:
    """Judge canary failures and segment overflow: what makes the numbers below suspect."""
    items = []
    for j in report.judges:
        if j.get("degenerate"):
            items.append(
                f'<li data-judge-health="{escape(str(j["model"]))}"><b>judge '
                f'{escape(str(j["model"]))}</b> agreed with {100 * (j["agreement"] or 0):.0f}% '
                f'of {j["cases"]} canary cases: degenerate ({escape(str(j["reason"]))}); do '
                "not trust its scores</li>")
    if report.overflow:
        items.append(
            "<li>segments past their cardinality limit, counted as <code>other</code>: "
            + escape(", ".join(f"{dim} ({n:,} records)" for dim, n in report.overflow.items()))
            + "</li>")
    if not items:
        return ""
    return f'<section class="card notices"><ul>{"".join(items)}</ul></section>'


def _skip_text(m: MetricSummary) -> str:
    total = m.skipped + m.count + m.errors
    why = "; ".join(f"{reason} ({n:,})" for reason, n in m.skip_reasons[:3]) or "no reason"
    return f"skipped {m.skipped:,} of {total:,} records: {why}"


def _skip_banner(metrics: Sequence[MetricSummary]) -> str:
    """Near the top: metrics that could not run on most records, and why."""
    alike: dict[str, list[str]] = {}  # metrics skipped alike share a line
    for m in metrics:
        if m.mostly_skipped:
            names = alike.setdefault(_skip_text(m), [])
            if m.metric not in names:
                names.append(m.metric)
    if not alike:
        return ""
    items = "".join(
        f'<li data-skipped="{escape(" ".join(names))}"><b>{escape(", ".join(names))}</b>: '
        f"{escape(text)}</li>" for text, names in alike.items())
    return ('<section class="card skipbanner"><h3>Mostly skipped: these metrics could not '
            f"run on most records</h3><ul>{items}</ul></section>")


def _tone(value: float | None, m: MetricSummary) -> str:
    """``good``/``bad`` against the metric's threshold, else neutral."""
    if value is None or m.threshold is None or m.higher_is_better is None:
        return ""
    return "good" if label_for(value, m.threshold, m.higher_is_better) == "pass" else "bad"


def _direction(m: MetricSummary) -> str:
    if m.binary:
        text = "yes/no check (1 = yes)"
        if m.higher_is_better is not None and m.threshold is not None:
            text += f" · pass = {'yes' if m.higher_is_better else 'no'}"
        return text
    if m.higher_is_better is None:
        return "no better direction"
    text = "higher is better" if m.higher_is_better else "lower is better"
    if m.threshold is not None:
        text += f" · pass {'≥' if m.higher_is_better else '≤'} {m.threshold:g}"
    else:
        text += " · no threshold"
    return text


def _stat(label: str, key: str, shown: str, value: Any = None, tone: str = "") -> str:
    raw = "" if value is None else f' data-value="{escape(repr(value))}"'
    cls = f' class="{tone}"' if tone else ""
    return (f'<div><dt>{escape(label)}</dt><dd data-stat="{key}"{raw}{cls}>'
            f"{escape(shown)}</dd></div>")


def _ci_line(m: MetricSummary) -> str:
    """The headline's 95 % interval, with the method that gave it."""
    if m.lo is None or m.hi is None:
        why = "no values" if not m.count else "one value: no interval"
        return f'<p class="ci" data-stat="ci">95% CI — ({why})</p>'
    shown = (f"{100 * m.lo:.1f}–{100 * m.hi:.1f}%" if m.binary
             else f"{_val(m.lo)}–{_val(m.hi)}")
    method = _SHORT.get(m.ci_method, m.ci_method)
    return (f'<p class="ci" data-stat="ci" data-lo="{m.lo!r}" data-hi="{m.hi!r}" '
            f'data-method="{escape(m.ci_method)}">95% CI {escape(shown)}'
            f'{f" · {escape(method)}" if method else ""}</p>')


def _metric_card(m: MetricSummary, hist: Histogram | None, points: Sequence[TimeBucket],
                 bucket: tuple[float, str] | None, span: tuple[float, float] | None,
                 worst: Iterable[Any]) -> str:
    name = escape(m.name)
    origin = (f' <span class="from">from {escape(m.metric)}</span>'
              if m.metric != m.name else "")
    mean_attr = "" if m.mean is None else f' data-value="{m.mean!r}"'
    rate_attr = "" if m.rate is None else f' data-value="{m.rate!r}"'
    passbar = ""
    if m.fail_rate is not None and m.count:
        fail_w = 100 * m.fail_rate
        passbar = (f'<div class="passbar" title="{escape(_pct(m.fail_rate))} fail">'
                   f'<span class="fail" style="width:{fail_w:.2f}%"></span>'
                   f'<span class="pass" style="width:{100 - fail_w:.2f}%"></span></div>')
    common = [
        _stat("scores", "count", f"{m.count:,}", m.count),
        _stat("fail rate", "fail_rate", _pct(m.fail_rate), m.fail_rate,
              "bad" if m.fail_rate else ""),
        _stat("errors", "errors", f"{m.errors:,}", m.errors, "bad" if m.errors else ""),
        _stat("skipped", "skipped", f"{m.skipped:,}", m.skipped),
    ]
    if m.binary:  # a rate and a count, not percentiles of 0s and 1s
        stats = "".join([*common, _stat("yes", "yes", f"{m.yes or 0:,} / {m.count:,}", m.yes)])
        headline = (f'<div class="big" data-stat="rate"{rate_attr}>{_pct(m.rate)}</div>'
                    '<div class="bl">said yes (rate)</div>')
    else:
        stats = "".join([
            *common,
            _stat("p10", "p10", _val(m.p10), m.p10),
            _stat("p50", "p50", _val(m.p50), m.p50),
            _stat("p90", "p90", _val(m.p90), m.p90),
        ])
        headline = (f'<div class="big" data-stat="mean"{mean_attr}>{_val(m.mean)}</div>'
                    '<div class="bl">mean</div>')
    charts = '<p class="nodata">No ok scores in this window.</p>'
    if hist is not None and bucket is not None and span is not None:
        what = "yes / no" if m.binary else "distribution"
        over = "rate of yes" if m.binary else "mean"
        # the rollups bin [0, 1]; a score beyond it (a length, a latency) lands in an end bin
        outside = ("" if m.binary or m.mean is None or 0.0 <= m.mean <= 1.0 else
                   ' <span class="clip">· values outside [0, 1] are counted in the end bins'
                   "</span>")
        charts = (
            f"<figure><figcaption>{what}{outside}</figcaption>{_histogram_svg(m, hist)}"
            f"</figure><figure><figcaption>{over} per {escape(bucket[1])} · 95 % band"
            f"</figcaption>{_timeline_svg(m, points, bucket, span)}</figure>"
        )
    skipnote = (f'<p class="skipnote" data-skipnote="{name}">{escape(_skip_text(m))}</p>'
                if m.mostly_skipped else "")
    links = "".join(
        f'<li><a href="#{_rec_anchor(w.record_id)}"><span class="v {_tone(w.value, m)}">'
        f"{_val(w.value)}</span> {escape(_clip(w.query, 70))}</a></li>"
        for w in worst
    )
    worst_html = f'<div class="worst"><h4>worst</h4><ol>{links}</ol></div>' if links else ""
    return (
        f'<section class="card metric" id="metric-{name}" data-metric="{name}">'
        f'<header><h3>{name}{origin}</h3></header><p class="dir">{escape(_direction(m))}</p>'
        f'<div class="headline">{headline}</div>{_ci_line(m)}'
        f"{passbar}<dl class=\"stats\">{stats}</dl>{skipnote}{charts}{worst_html}</section>"
    )


def _val(v: float | None) -> str:
    """Scores in [0, 1] with 3 decimals, like the text report; larger values with fewer."""
    if v is None or abs(v) < 10:
        return _num(v)
    return f"{v:,.1f}" if abs(v) < 10_000 else f"{v:,.0f}"


def _clip(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _rec_anchor(record_id: str) -> str:
    return "rec-" + escape(record_id)


# -- report --by -----------------------------------------------------------------------------
def _groups(by: str, groups: Sequence[GroupSummary]) -> str:
    """One small table per value of the ``--by`` dimension: each number with its interval."""
    cards = []
    for g in groups:
        value = "(none)" if g.value is None else g.value
        rows = []
        for m in g.metrics:
            shown = _estimate(m.rate if m.binary else m.mean, m.lo, m.hi, rate=m.binary)
            rows.append(
                f'<tr data-score="{escape(m.name)}"><td>{escape(m.name)}'
                f'{" <span class=from>rate</span>" if m.binary else ""}</td>'
                f'<td class="num">{m.count:,}</td>'
                f'<td class="num" data-g="estimate" data-value="{_attr(m.rate if m.binary else m.mean)}"'
                f' data-lo="{_attr(m.lo)}" data-hi="{_attr(m.hi)}">{escape(shown)}</td>'
                f'<td class="num">{"—" if m.binary else _val(m.p50)}</td>'
                f'<td class="num">{_pct(m.fail_rate)}</td>'
                f'<td class="num{" bad" if m.errors else ""}">{m.errors:,}</td>'
                f'<td class="num">{m.skipped:,}</td></tr>')
        table = ("<table><thead><tr><th>score</th><th class=num>n</th>"
                 "<th class=num>mean or rate [95% CI]</th><th class=num>p50</th>"
                 "<th class=num>fail</th><th class=num>errors</th><th class=num>skipped</th>"
                 f'</tr></thead><tbody>{"".join(rows)}</tbody></table>' if rows
                 else '<p class="nodata">no scores</p>')
        cards.append(
            f'<section class="card group" data-group="{escape(value)}">'
            f'<h3><span class="dim">{escape(by)} =</span> {escape(value)}</h3>'
            f'<p class="meta">{g.records:,} records, {g.sampled:,} sampled</p>{table}</section>')
    if not cards:
        cards.append(f'<p class="nodata">no values of {escape(by)} in this window</p>')
    return (f'<div class="h2row"><h2>By {escape(by)}</h2><p class="legend">the same numbers '
            f"for each value of {escape(by)}; compare two of them with "
            f"<code>tracescore compare --by {escape(by)}</code></p></div>"
            f'<div class="groups" data-by="{escape(by)}">{"".join(cards)}</div>')


# -- charts ----------------------------------------------------------------------------------
W, H = 320, 132
PAD_L, PAD_R, PAD_T, PAD_B = 30, 8, 10, 24


def _fmt_axis(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"


def _nice_step(top: int, ticks: int = 3) -> int:
    """A 1/2/5×10^k count step giving at most ``ticks`` gridlines up to ``top``."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m * ticks >= top:
                return step * m
        step *= 10


def _nice_up(x: float, mantissas: tuple[float, ...] = (1, 2, 2.5, 5)) -> float:
    """The smallest 1/2/2.5/5×10^k (or other ``mantissas``) at or above ``x`` (> 0)."""
    k = 10.0 ** math.floor(math.log10(x))
    for m in (*mantissas, 10):
        if m * k >= x * (1 - 1e-12):
            return m * k
    return 10 * k


def _zoom_range(values: Iterable[float | None]) -> tuple[float, float, float]:
    """(lo, hi, step) around the values and their intervals, on round gridlines: a trend is
    read for its changes, so its scale follows the data (kept within [0, 1] for scores
    there; at least 0.1 high, so noise is not blown up into a cliff)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return 0.0, 1.0, 0.25
    lo, hi = min(vals), max(vals)
    unit = lo >= -1e-9 and hi <= 1 + 1e-9
    span = max(hi - lo, 0.1 if unit else max(abs(hi), abs(lo)) * 0.1 or 1.0)
    mid = (lo + hi) / 2
    lo, hi = min(lo, mid - span / 2), max(hi, mid + span / 2)
    if unit and lo < 0:
        lo, hi = 0.0, hi - lo
    elif unit and hi > 1:
        lo, hi = lo - (hi - 1), 1.0
    step = _nice_up(span / 4, (1, 2, 5))  # gridlines at 0.05, not 0.025: short labels
    lo = math.floor(round((lo - span * 0.04) / step, 9)) * step
    hi = math.ceil(round((hi + span * 0.04) / step, 9)) * step
    if unit:
        lo, hi = max(0.0, lo), min(1.0, hi)
    return lo, hi, step


def _tick(v: float, step: float, rate: bool = False) -> str:
    """A gridline's label with the decimals its step needs (0.875, not 0.88)."""
    if rate:
        v, step = 100 * v, 100 * step
    places = 0
    while places < 6 and abs(step * 10 ** places - round(step * 10 ** places)) > 1e-9:
        places += 1
    text = f"{v:.{places}f}" if abs(v) < 1000 else f"{v:,.{places}f}"
    return text + ("%" if rate else "")


def _y_range(values: Iterable[float]) -> tuple[float, float]:
    """[0, 1] for scores in [0, 1] (a fixed scale reads the same on every chart); else from 0
    (or the least value) to a round number above the greatest."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals or (min(vals) >= -1e-9 and max(vals) <= 1 + 1e-9):
        return 0.0, 1.0
    lo, hi = min(0.0, min(vals)), max(vals)
    if hi <= lo:
        return lo, lo + 1.0
    top = _nice_up(hi - lo)
    return lo, lo + top


def _histogram_svg(m: MetricSummary, h: Histogram) -> str:
    counts = h.counts
    step = _nice_step(max(counts))
    top = max(step * math.ceil(max(counts) / step), 1)
    bins = len(counts)
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    bw = pw / bins
    out = [f'<svg class="chart hist" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="distribution of {escape(m.name)}" data-lo="{h.lo!r}" '
           f'data-hi="{h.hi!r}">']
    for tick in range(step, top + 1, step):
        y = PAD_T + ph * (1 - tick / top)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/><text class="ax" x="{PAD_L - 4}" y="{y + 3:.1f}" '
                   f'text-anchor="end">{tick:,}</text>')
    width = (h.hi - h.lo) / bins
    for i, (p, f, u) in enumerate(zip(h.passed, h.failed, h.unlabelled)):
        total = p + f + u
        x = PAD_L + i * bw + 1
        lo = h.lo + i * width
        tip = f"{_fmt_axis(lo)}–{_fmt_axis(lo + width)}: {total} score{'s' * (total != 1)}"
        if m.binary:
            tip = f"{('no (0)', 'yes (1)')[i]}: {total} score{'s' * (total != 1)}"
        if f and (p or u):
            tip += f" ({f} fail)"
        out.append(f'<g class="bin" data-bin="{i}" data-count="{total}"><title>'
                   f"{escape(tip)}</title>")
        y = PAD_T + ph
        for cls, n in (("fail", f), ("none", u), ("pass", p)):
            if not n:
                continue
            hh = ph * n / top
            y -= hh
            out.append(f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" '
                       f'height="{hh:.1f}" rx="1.5"/>')
        if not total:  # an empty bin still shows where it is
            out.append(f'<rect class="emptybin" x="{x:.1f}" y="{PAD_T + ph - 1:.1f}" '
                       f'width="{bw - 2:.1f}" height="1"/>')
        out.append("</g>")
    base = PAD_T + ph
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{W - PAD_R}" y1="{base}" y2="{base}"/>')
    if m.binary:  # two bars, each named; pass/fail is their colour, no threshold line
        for i, text in enumerate(("0 · no", "1 · yes")[:bins]):
            out.append(f'<text class="ax" x="{PAD_L + (i + 0.5) * bw:.1f}" y="{base + 14}" '
                       f'text-anchor="middle">{text}</text>')
        out.append("</svg>")
        return "".join(out)
    for v, anchor in ((h.lo, "start"), ((h.lo + h.hi) / 2, "middle"), (h.hi, "end")):
        x = PAD_L + pw * (v - h.lo) / (h.hi - h.lo)
        out.append(f'<text class="ax" x="{x:.1f}" y="{base + 14}" text-anchor="{anchor}">'
                   f"{_fmt_axis(v)}</text>")
    if m.threshold is not None and h.lo <= m.threshold <= h.hi:
        x = PAD_L + pw * (m.threshold - h.lo) / (h.hi - h.lo)
        out.append(f'<line class="thr" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T - 4}" '
                   f'y2="{base}"><title>threshold {m.threshold:g}</title></line>')
    out.append("</svg>")
    return "".join(out)


def _time_label(t: float, bucket_s: float) -> str:
    d = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    if bucket_s < 1:
        return d.strftime("%H:%M:%S.") + f"{d.microsecond // 1000:03d}"
    if bucket_s < 60:
        return d.strftime("%H:%M:%S")
    return d.strftime("%b %d" if bucket_s >= 86400 else "%b %d %H:%M")


def _runs(starts: Sequence[float], bucket_s: float) -> list[list[int]]:
    """Indexes of consecutive buckets: a gap (a bucket without scores) breaks a line."""
    runs: list[list[int]] = []
    for i, t in enumerate(starts):
        # (1.5 buckets: sub-second bucket starts carry float rounding)
        if runs and t - starts[runs[-1][-1]] <= 1.5 * bucket_s:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _band_paths(xs: Sequence[float], los: Sequence[float | None],
                his: Sequence[float | None], runs: Sequence[Sequence[int]],
                y: Any) -> list[str]:
    """A shaded polygon per run of buckets that have an interval (upper edge left to right,
    lower edge back); a lone bucket's interval is a short vertical bar."""
    out = []
    for run in runs:
        seg: list[int] = []
        for i in [*run, -1]:
            if i >= 0 and los[i] is not None and his[i] is not None:
                seg.append(i)
                continue
            if len(seg) > 1:
                top = " ".join(f"{'M' if k == 0 else 'L'}{xs[j]:.1f},{y(his[j]):.1f}"
                               for k, j in enumerate(seg))
                bottom = " ".join(f"L{xs[j]:.1f},{y(los[j]):.1f}" for j in reversed(seg))
                out.append(f'<path class="band" d="{top} {bottom} Z" data-from="{seg[0]}" '
                           f'data-to="{seg[-1]}"/>')
            elif seg:
                j = seg[0]
                out.append(f'<line class="bandbar" x1="{xs[j]:.1f}" x2="{xs[j]:.1f}" '
                           f'y1="{y(his[j]):.1f}" y2="{y(los[j]):.1f}" data-from="{j}" '
                           f'data-to="{j}"/>')
            seg = []
    return out


def _timeline_svg(m: MetricSummary, points: Sequence[TimeBucket],
                  bucket: tuple[float, str], span: tuple[float, float]) -> str:
    bucket_s = bucket[0]
    first = span[0] // bucket_s * bucket_s
    last = span[1] // bucket_s * bucket_s
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    lo, hi = _y_range(p.mean for p in points)

    def x(t: float) -> float:
        return PAD_L + pw / 2 if last == first else PAD_L + pw * (t - first) / (last - first)

    def y(v: float | None) -> float:
        v = min(max(v or 0.0, lo), hi)  # an interval past the scale is drawn to its edge
        return PAD_T + ph * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="chart timeline" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="mean of {escape(m.name)} per {escape(bucket[1])}" '
           f'data-points="{len(points)}" data-ylo="{lo!r}" data-yhi="{hi!r}">']
    for v in (lo, (lo + hi) / 2, hi):
        tick = f"{100 * v:.0f}%" if m.binary else _fmt_axis(v)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}"/><text class="ax" x="{PAD_L - 4}" y="{y(v) + 3:.1f}" '
                   f'text-anchor="end">{tick}</text>')
    xs = [x(p.start) for p in points]
    runs = _runs([p.start for p in points], bucket_s)
    out += _band_paths(xs, [p.lo for p in points], [p.hi for p in points], runs, y)
    # A yes/no metric's threshold (1) would sit on the top edge: its line says nothing.
    if not m.binary and m.threshold is not None and lo <= m.threshold <= hi:
        out.append(f'<line class="thr" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(m.threshold):.1f}"'
                   f' y2="{y(m.threshold):.1f}"><title>threshold {m.threshold:g}</title></line>')
    for run in runs:
        if len(run) > 1:
            d = " ".join(f"{'M' if k == 0 else 'L'}{xs[i]:.1f},{y(points[i].mean):.1f}"
                         for k, i in enumerate(run))
            out.append(f'<path class="line" d="{d}"/>')
    dot = 2.2 if len(points) > 24 else 3
    for p, px in zip(points, xs):
        when = f"{_time_label(p.start, bucket_s)} UTC"
        shown = f"{100 * p.mean:.0f}% yes" if m.binary else f"mean {p.mean:.3f}"
        if p.lo is not None and p.hi is not None:
            shown += (f" [{100 * p.lo:.0f}, {100 * p.hi:.0f}]" if m.binary
                      else f" [{p.lo:.3f}, {p.hi:.3f}]")
        tip = f"{when}: {shown}, {p.count} scores"
        if p.labelled:
            tip += f", {p.failed} fail"
        out.append(f'<circle class="pt" cx="{px:.1f}" cy="{y(p.mean):.1f}" r="{dot}" '
                   f'data-start="{p.start!r}" data-mean="{p.mean!r}" data-count="{p.count}" '
                   f'data-lo="{_attr(p.lo)}" data-hi="{_attr(p.hi)}">'
                   f"<title>{escape(tip)}</title></circle>")
    base = PAD_T + ph + 14
    if last == first:
        out.append(f'<text class="ax" x="{x(first):.1f}" y="{base}" text-anchor="middle">'
                   f"{escape(_time_label(first, bucket_s))}</text>")
    else:
        out.append(f'<text class="ax" x="{PAD_L}" y="{base}" text-anchor="start">'
                   f"{escape(_time_label(first, bucket_s))}</text>"
                   f'<text class="ax" x="{W - PAD_R}" y="{base}" text-anchor="end">'
                   f"{escape(_time_label(last, bucket_s))}</text>")
    out.append("</svg>")
    return "".join(out)


# -- the trend -------------------------------------------------------------------------------
TW, TH = 560, 210
TPAD_L, TPAD_R, TPAD_T, TPAD_B = 42, 14, 30, 26


def _axis_range(trend: TrendPage) -> tuple[float, float] | None:
    """The time axis: from the first bucket's start to the last bucket's end."""
    if trend.span is None:
        return None
    b = trend.bucket_s
    return math.floor(trend.span[0] / b) * b, math.floor(trend.span[1] / b) * b + b


def _trend_sections(trend: TrendPage, *, monitor_table: bool) -> list[str]:
    axis = _axis_range(trend)
    unit = "day (UTC)" if trend.bucket_label == "day" else f"{trend.bucket_label} (UTC)"
    out = [f'<div class="h2row"><h2>Trend</h2><p class="legend">per {escape(unit)} · line: '
           'the mean (rate for a yes/no check) · band: its 95 % interval (Student t; Wilson '
           'for rates) · <span class="relkey"></span> release first seen</p></div>']
    strips = _monitor_strips(trend, axis)
    if monitor_table:
        out.append(_monitor_table(trend.monitors, strips))
    if not trend.series or axis is None:
        out.append('<p class="empty" data-trend="empty">No scores in this window yet.</p>')
    else:
        cards = [_trend_card(s, trend, axis) for s in trend.series]
        out.append(f'<div class="grid trend" data-bucket="{trend.bucket_s!r}">'
                   f'{"".join(cards)}</div>')
    out.append(_history_card(trend, None if monitor_table else strips))
    return out


def _trend_card(s: TrendSeries, trend: TrendPage, axis: tuple[float, float]) -> str:
    rate = s.kind == "rate"
    last = s.points[-1] if s.points else None
    now = ("" if last is None else
           f'<span class="tnow">last {escape(trend.bucket_label)}: '
           f"{escape(_estimate(last.value, last.lo, last.hi, rate=rate))}, n = {last.n:,}</span>")
    origin = (f' <span class="from">from {escape(s.metric)}</span>'
              if s.metric != s.name else "")
    return (f'<section class="card trendcard" data-series="{escape(s.name)}" '
            f'data-kind="{escape(s.kind)}"><header><h3>{escape(s.name)}{origin}</h3>{now}'
            f"</header>{_trend_svg(s, trend, axis)}</section>")


def _time_ticks(t0: float, t1: float, bucket_s: float, most: int = 6) -> list[float]:
    n = max(1, round((t1 - t0) / bucket_s))
    step = max(1, math.ceil(n / most))
    return [t0 + i * bucket_s for i in range(0, n + 1, step)]


def _tick_label(t: float, bucket_s: float, prev: float | None) -> str:
    d = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    if bucket_s >= 86400:
        return d.strftime("%b %d")
    if prev is None or _dt.datetime.fromtimestamp(prev, _dt.timezone.utc).date() != d.date():
        return d.strftime("%b %d %H:%M")
    return d.strftime("%H:%M")


def _trend_svg(s: TrendSeries, trend: TrendPage, axis: tuple[float, float]) -> str:
    t0, t1 = axis
    b = trend.bucket_s
    rate = s.kind == "rate"
    pw, ph = TW - TPAD_L - TPAD_R, TH - TPAD_T - TPAD_B
    lo, hi, step = _zoom_range([v for p in s.points for v in (p.value, p.lo, p.hi)])

    def x(t: float) -> float:
        return TPAD_L + pw * (t - t0) / (t1 - t0)

    def y(v: float | None) -> float:
        v = min(max(v or 0.0, lo), hi)
        return TPAD_T + ph * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="chart trend" viewBox="0 0 {TW} {TH}" role="img" '
           f'aria-label="{escape(s.kind)} of {escape(s.name)} per {escape(trend.bucket_label)}" '
           f'data-series="{escape(s.name)}" data-t0="{t0!r}" data-t1="{t1!r}" '
           f'data-ylo="{lo!r}" data-yhi="{hi!r}" data-x0="{TPAD_L}" data-x1="{TW - TPAD_R}" '
           f'data-points="{len(s.points)}">']
    for i in range(round((hi - lo) / step) + 1):
        v = lo + i * step
        tick = _tick(v, step, rate)
        out.append(f'<line class="grid" x1="{TPAD_L}" x2="{TW - TPAD_R}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}"/><text class="ax" x="{TPAD_L - 5}" y="{y(v) + 3:.1f}" '
                   f'text-anchor="end">{tick}</text>')
    base = TPAD_T + ph
    prev = None
    for t in _time_ticks(t0, t1, b):
        out.append(f'<line class="tick" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{base}" '
                   f'y2="{base + 4}"/><text class="ax" x="{x(t):.1f}" y="{base + 16}" '
                   f'text-anchor="{"start" if t == t0 else "end" if t >= t1 else "middle"}">'
                   f"{escape(_tick_label(t, b, prev))}</text>")
        prev = t
    out.append(f'<line class="axis" x1="{TPAD_L}" x2="{TW - TPAD_R}" y1="{base}" '
               f'y2="{base}"/>')
    # points sit in the middle of their bucket: a release line at its exact time then falls
    # before or after the bucket it split, as it did
    xs = [x(p.start + b / 2) for p in s.points]
    runs = _runs([p.start for p in s.points], b)
    out += _band_paths(xs, [p.lo for p in s.points], [p.hi for p in s.points], runs, y)
    if not rate and s.threshold is not None:
        if lo <= s.threshold <= hi:
            out.append(f'<line class="thr" x1="{TPAD_L}" x2="{TW - TPAD_R}" '
                       f'y1="{y(s.threshold):.1f}" y2="{y(s.threshold):.1f}"><title>threshold '
                       f"{s.threshold:g}</title></line>")
        else:  # the scale follows the data: say where the threshold is
            where = "↓" if s.threshold < lo else "↑"
            out.append(f'<text class="ax thrnote" x="{TW - TPAD_R - 2}" '
                       f'y="{TPAD_T + 10 if where == "↑" else base - 4}" text-anchor="end">'
                       f"threshold {s.threshold:g} {where}</text>")
    out += _release_marks(trend.releases, t0, t1, x, base)
    for run in runs:
        if len(run) > 1:
            d = " ".join(f"{'M' if k == 0 else 'L'}{xs[i]:.1f},{y(s.points[i].value):.1f}"
                         for k, i in enumerate(run))
            out.append(f'<path class="line" d="{d}"/>')
    dot = 2.2 if len(s.points) > 40 else 3
    for p, px in zip(s.points, xs):
        tip = (f"{_time_label(p.start, b)} UTC: {_estimate(p.value, p.lo, p.hi, rate=rate)}, "
               f"n = {p.n:,}")
        out.append(f'<circle class="pt" cx="{px:.1f}" cy="{y(p.value):.1f}" r="{dot}" '
                   f'data-start="{p.start!r}" data-value="{p.value!r}" data-n="{p.n}" '
                   f'data-lo="{_attr(p.lo)}" data-hi="{_attr(p.hi)}">'
                   f"<title>{escape(tip)}</title></circle>")
    out.append("</svg>")
    return "".join(out)


def _release_marks(releases: Sequence[ReleaseMark], t0: float, t1: float, x: Any,
                   base: float) -> list[str]:
    """A dashed vertical line at each release first seen inside the axis, its name above;
    the release already running at the axis' start is named at the left edge."""
    out: list[str] = []
    before = [r for r in releases if r.at < t0]
    inside = [r for r in releases if t0 <= r.at <= t1]
    ends = [-math.inf, -math.inf]  # right end of the last label on each of two rows
    if before:
        r = before[-1]
        label = _clip(r.release, 24)
        out.append(f'<text class="rel0" x="{TPAD_L + 2}" y="11" data-release-start='
                   f'"{escape(r.release)}">{escape(label)} →<title>release '
                   f"{escape(r.release)} (first seen {escape(_when(r.at))})</title></text>")
        ends[0] = TPAD_L + 2 + 6.2 * (len(label) + 2)
    for r in inside:
        px = x(r.at)
        label = _clip(r.release, 20)
        width = 6.2 * len(label) + 6  # roughly: 10.5 px system-ui digits and letters
        # centred on its line, moved inwards at the chart's edges
        left = min(max(px - width / 2, 2.0), TW - 2 - width)
        row = 0 if left > ends[0] else 1 if left > ends[1] else -1
        text = ""
        if row >= 0:  # no room on either row: the line stays, its name is in the tooltip
            ends[row] = left + width
            text = (f'<text x="{left + width / 2:.1f}" y="{11 + 11 * row}" '
                    f'text-anchor="middle">{escape(label)}</text>')
        out.append(f'<g class="rel" data-release="{escape(r.release)}" data-at="{r.at!r}">'
                   f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{4 + 11 * max(row, 0) + 10}" '
                   f'y2="{base}"/>{text}<title>release {escape(r.release)} first seen '
                   f"{escape(_when(r.at))}</title></g>")
    return out


_STRIP_W, _STRIP_H = 240, 14


def _monitor_strips(trend: TrendPage, axis: tuple[float, float] | None) -> dict[str, str]:
    """Per monitor, its state over the time axis as coloured segments (from its history:
    before its first change in the window, the state it changed from)."""
    names = [m.name for m in trend.monitors]
    names += sorted({h.monitor for h in trend.history} - set(names))
    if not names:
        return {}
    t0, t1 = _strip_range(trend, axis)
    current = {m.name: m for m in trend.monitors}
    out = {}
    for name in names:
        changes = sorted((h for h in trend.history if h.monitor == name), key=lambda h: h.at)
        segs: list[tuple[float, str]] = []
        if changes:
            if changes[0].previous:
                segs.append((t0, changes[0].previous))
            segs += [(h.at, h.state) for h in changes]
        elif name in current:
            m = current[name]
            segs.append((t0 if m.since is None else max(m.since, t0), m.state))
        rects = []
        for i, (start, state) in enumerate(segs):
            end = segs[i + 1][0] if i + 1 < len(segs) else t1
            a = _STRIP_W * (max(start, t0) - t0) / (t1 - t0)
            z = _STRIP_W * (min(end, t1) - t0) / (t1 - t0)
            if z <= a:
                continue
            known = state if state in STATES else "NO_DATA"
            rects.append(f'<rect class="s-{known}" x="{a:.1f}" y="2" width="{z - a:.1f}" '
                         f'height="{_STRIP_H - 4}" data-state="{escape(state)}" '
                         f'data-from="{max(start, t0)!r}"><title>{escape(state)} from '
                         f"{escape(_when(start))}</title></rect>")
        out[name] = (f'<svg class="strip" viewBox="0 0 {_STRIP_W} {_STRIP_H}" '
                     f'preserveAspectRatio="none" data-monitor="{escape(name)}" '
                     f'data-t0="{t0!r}" data-t1="{t1!r}"><rect class="sbg" x="0" y="2" '
                     f'width="{_STRIP_W}" height="{_STRIP_H - 4}"/>{"".join(rects)}</svg>')
    return out


def _strip_scale(trend: TrendPage) -> str:
    """The strips' time range under them (the same for every strip)."""
    t0, t1 = _strip_range(trend, _axis_range(trend))
    fmt = "%b %d" if t1 - t0 > 3 * 86400 else "%b %d %H:%M"
    a, b = (_dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime(fmt) for t in (t0, t1))
    return (f'<tr class="scale"><td></td><td><span>{escape(a)}</span><span>{escape(b)} UTC'
            "</span></td></tr>")


def _strip_range(trend: TrendPage, axis: tuple[float, float] | None) -> tuple[float, float]:
    """The strips' time range: the trend's axis, stretched to the monitors' last checks."""
    times = [h.at for h in trend.history] + [m.checked_at for m in trend.monitors
                                             if m.checked_at is not None]
    t0 = axis[0] if axis else min(times, default=trend.generated_at)
    t1 = max([axis[1] if axis else trend.generated_at, *times])
    return t0, (t1 if t1 > t0 else t0 + 1.0)


def _history_card(trend: TrendPage, strips: dict[str, str] | None, most: int = 20) -> str:
    """The latest state changes, newest first; on the report page also each monitor's strip
    (the trend page shows those in its monitor table)."""
    if not trend.history and not strips:
        return ""
    parts = ['<section class="card history"><h3>Monitor history</h3>']
    if strips:
        rows = "".join(f'<tr><td class="mname">{escape(name)}</td><td class="stripcell">{svg}'
                       "</td></tr>" for name, svg in strips.items())
        parts.append(f'<table class="strips"><tbody>{rows}{_strip_scale(trend)}</tbody>'
                     "</table>")
    items = []
    for h in trend.history[:most]:
        est = "" if h.value is None else f" · {_estimate(h.value, h.lo, h.hi)}"
        n = "" if h.n is None else f" · n = {h.n:,}"
        prev = f"{_badge(h.previous)} → " if h.previous else ""
        summary = f' <span class="msum">{escape(h.summary)}</span>' if h.summary else ""
        items.append(f'<li data-change="{escape(h.monitor)}" data-at="{h.at!r}">'
                     f'<span class="when">{escape(_when(h.at))}</span> '
                     f'<b class="mname">{escape(h.monitor)}</b> {prev}{_badge(h.state)}'
                     f"{escape(est + n)}{summary}</li>")
    if items:
        more = len(trend.history) - len(items)
        tail = f'<p class="note">and {more:,} earlier changes</p>' if more > 0 else ""
        parts.append(f'<ol class="changes">{"".join(items)}</ol>{tail}')
    else:
        parts.append('<p class="note">no state changes in this window</p>')
    parts.append("</section>")
    return "".join(parts)


# -- the comparison page ---------------------------------------------------------------------
DW, DH = 250, 40
DPAD = 12


def render_comparison_html(c: Comparison) -> str:
    """The ``tracescore compare`` page: per score n and the mean (or rate) on each side, the
    difference current − baseline as an interval bar against the ±min-effect band, the
    adjusted p-value and the verdict; the methods in a footnote."""
    scale = _diff_scale(c)
    counts: dict[str, int] = {}
    for r in c.rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    order = ("regressed", "changed", "improved", "no change", "no evidence",
             "not enough data")
    chips = " ".join(f'<span class="verdict {_vclass(v)}" data-verdict-count="{escape(v)}">'
                     f"{n} {escape(v)}</span>" for v, n in sorted(
                         counts.items(), key=lambda kv: (order.index(kv[0])
                                                         if kv[0] in order else 9, kv[0])))
    if c.regressed:
        names = ", ".join(_row_label(r) for r in c.regressed)
        banner = (f'<section class="card banner v-regressed" data-banner="regressed"><b>'
                  f"Regressed:</b> {escape(names)} — {escape(c.current_label)} is worse than "
                  f"{escape(c.baseline_label)} beyond ±{c.min_effect:g}, after adjusting for "
                  f"the {len(c.rows)} comparisons</section>")
    elif c.rows:
        banner = ('<section class="card banner" data-banner="none">No score regressed '
                  f"(α = {c.alpha:g}, {escape(_adjust_name(c.adjust))}).</section>")
    else:
        banner = '<p class="empty">No scores on either side.</p>'
    sides = "".join(
        f'<div class="tile side" data-side="{key}"><div class="tl">{key}</div>'
        f'<div class="tv sidev">{escape(label)}</div><div class="tn">{n:,} records'
        f"{escape(_window_text(w))}</div></div>"
        for key, label, n, w in (("current", c.current_label, c.current_records,
                                  c.current_window),
                                 ("baseline", c.baseline_label, c.baseline_records,
                                  c.baseline_window)))
    rows = [_comparison_row(r, c, scale) for r in c.rows]
    table = ""
    if rows:
        table = (
            '<section class="card"><table class="cmp"><thead><tr><th>score</th>'
            "<th class=num>n</th><th class=num>current [95% CI]</th><th class=num>n</th>"
            "<th class=num>baseline [95% CI]</th><th>difference, current − baseline "
            "[95% CI]</th><th class=num>p adj.</th><th>verdict</th></tr>"
            f'</thead><tbody>{"".join(rows)}</tbody></table></section>')
    scope = "".join(f" · {k} = {v}" for k, v in c.where.items())
    body = [
        '<header class="top"><div><h1>tracescore compare</h1>',
        f'<p class="sub"><span class="mono">{escape(c.db)}</span> · by {escape(c.by)}'
        f"{escape(scope)} · generated {escape(_when(c.generated_at))}</p></div></header>",
        f'<section class="tiles sides">{sides}</section>',
        banner,
        f'<p class="chips">{chips}</p>' if chips else "",
        table,
        _comparison_notes(c),
        f"<footer>tracescore {escape(__version__)} · the same numbers: <code>tracescore "
        f"compare --json</code></footer>",
    ]
    title = f"tracescore compare · {c.db}" if c.db else "tracescore compare"
    return _document(title, body)


def _vclass(verdict: str) -> str:
    return "v-" + "-".join(verdict.split())


def _row_label(r: ScoreComparison) -> str:
    return r.name if r.kind in ("mean", "rate") else r.kind


def _window_text(w: Any) -> str:
    if w.since is None and w.until is None:
        return ""
    if w.until is None:
        return f" · since {_when(w.since)}"
    return f" · {_when(w.since)} to {_when(w.until)}"


def _adjust_name(adjust: str) -> str:
    return {"holm": "Holm", "fdr_bh": "Benjamini–Hochberg"}.get(adjust, adjust)


def _extent(r: ScoreComparison) -> float:
    d = r.diff
    return max((abs(v) for v in (d.lo, d.hi, d.estimate) if v is not None), default=0.0)


def _diff_scale(c: Comparison) -> float:
    """One symmetric scale for every row whose difference fits in ±1 (scores and rates in
    [0, 1]): bars side by side then compare. Wider rows, and rows with too little data to
    decide (whose wide intervals would squash the others), get their own (:func:`_scale_of`)."""
    widest = max((_extent(r) for r in c.rows
                  if _extent(r) <= 1.0 and r.verdict != "not enough data"), default=0.0)
    return _nice_up(max(widest * 1.1, 2 * c.min_effect, 1e-6))


def _scale_of(r: ScoreComparison, shared: float) -> float:
    e = _extent(r)
    return shared if e <= shared else _nice_up(e * 1.1)


def _diff_text(v: float | None, rate: bool) -> str:
    if v is None:
        return "—"
    return f"{100 * v:+.1f}" if rate else f"{v:+.3f}"


def _comparison_row(r: ScoreComparison, c: Comparison, shared: float) -> str:
    rate = r.kind != "mean"
    d = r.diff
    unit = " pp" if rate else ""
    diff = "—"
    if d.estimate is not None:
        diff = _diff_text(d.estimate, rate) + unit
        if d.lo is not None and d.hi is not None:
            diff += f" [{_diff_text(d.lo, rate)}, {_diff_text(d.hi, rate)}]"
    p = ("—" if r.p_adjusted is None else
         f"{r.p_adjusted:.3f}" if r.p_adjusted >= 0.001 else "<0.001")
    label = (escape(r.name) if r.kind in ("mean", "rate") else
             f'{escape(r.kind)} <span class="from">{escape(r.name)}</span>')
    kind = {"mean": "mean", "rate": "yes/no rate"}.get(r.kind, "lower is better")
    arrow = {True: "higher is better", False: "lower is better", None: "no direction"}
    note = kind if r.kind not in ("mean", "rate") else f"{kind} · {arrow[r.higher_is_better]}"
    scale = _scale_of(r, shared)
    cls = _vclass(r.verdict)
    return (
        f'<tr class="{cls}" data-row="{escape(r.name if r.kind in ("mean", "rate") else r.kind)}"'
        f' data-kind="{escape(r.kind)}" data-verdict="{escape(r.verdict)}">'
        f'<td><div class="sname">{label}</div><div class="dir">{escape(note)}</div></td>'
        f'<td class="num" data-n="current">{r.current.n:,}</td>'
        f'<td class="num" data-est="current" data-value="{_attr(r.current.value)}">'
        f"{escape(_estimate(r.current.value, r.current.lo, r.current.hi, rate))}</td>"
        f'<td class="num" data-n="baseline">{r.baseline.n:,}</td>'
        f'<td class="num" data-est="baseline" data-value="{_attr(r.baseline.value)}">'
        f"{escape(_estimate(r.baseline.value, r.baseline.lo, r.baseline.hi, rate))}</td>"
        f'<td class="diffcell">{_diff_svg(r, c.min_effect, scale, rate, cls)}'
        f'<div class="difftext" data-diff="{escape(d.method)}">{escape(diff)}</div></td>'
        f'<td class="num" data-p="{_attr(r.p_adjusted)}">{escape(p)}</td>'
        f'<td><span class="verdict {cls}">{escape(r.verdict)}</span></td></tr>')


def _diff_svg(r: ScoreComparison, min_effect: float, scale: float, rate: bool,
              cls: str) -> str:
    d = r.diff
    pw = DW - 2 * DPAD
    axis_y = 15

    def x(v: float) -> float:
        return DPAD + pw * (max(-scale, min(scale, v)) + scale) / (2 * scale)

    out = [f'<svg class="chart diff {cls}" viewBox="0 0 {DW} {DH}" role="img" '
           f'aria-label="difference of {escape(r.name)}: {escape(r.verdict)}" '
           f'data-scale="{scale!r}" data-min-effect="{min_effect!r}" '
           f'data-est="{_attr(d.estimate)}" data-lo="{_attr(d.lo)}" data-hi="{_attr(d.hi)}" '
           f'data-x0="{DPAD}" data-x1="{DW - DPAD}">']
    me = min(min_effect, scale)
    out.append(f'<rect class="eq" x="{x(-me):.1f}" y="3" width="{x(me) - x(-me):.1f}" '
               f'height="{2 * axis_y - 6}"><title>±{min_effect:g}: '
               "no change that matters</title></rect>")
    out.append(f'<line class="axis" x1="{DPAD}" x2="{DW - DPAD}" y1="{axis_y}" '
               f'y2="{axis_y}"/><line class="zero" x1="{x(0):.1f}" x2="{x(0):.1f}" y1="1" '
               f'y2="{2 * axis_y - 1}"/>')
    k = 100 if rate else 1
    for v, anchor in ((-scale, "start"), (0.0, "middle"), (scale, "end")):
        text = f"{k * v:+g}" if v else "0"
        out.append(f'<text class="ax" x="{x(v):.1f}" y="{DH - 2}" text-anchor="{anchor}">'
                   f"{text}{' pp' if rate and v > 0 else ''}</text>")
    if d.lo is not None and d.hi is not None:
        clipped = ' data-clipped="1"' if d.lo < -scale or d.hi > scale else ""
        out.append(f'<line class="ci" x1="{x(d.lo):.1f}" x2="{x(d.hi):.1f}" y1="{axis_y}" '
                   f'y2="{axis_y}"{clipped}/>')
    if d.estimate is not None:
        out.append(f'<circle class="est" cx="{x(d.estimate):.1f}" cy="{axis_y}" r="4.5"/>')
    else:
        out.append(f'<text class="ax" x="{x(0) + 6:.1f}" y="{axis_y - 4}">no data</text>')
    out.append("</svg>")
    return "".join(out)


def _comparison_notes(c: Comparison) -> str:
    methods = sorted({m for r in c.rows for m in (r.diff.method, r.current.method,
                                                  r.baseline.method) if m})
    items = "".join(f"<li><code>{escape(m)}</code>: {escape(METHODS.get(m, m))}</li>"
                    for m in methods)
    adjust = {
        "holm": "Holm's step-down adjustment: it bounds the chance of even one false "
                "“regressed” among all the rows compared (family-wise), which is what a "
                "deployment gate pays for; it holds whatever the correlation between scores "
                "(they share records).",
        "fdr_bh": "Benjamini–Hochberg: it bounds the expected share of false findings among "
                  "the rows called different; better for exploring many scores than for "
                  "gating a release.",
    }.get(c.adjust, escape(c.adjust))
    verdicts = (
        f"<b>regressed</b> / <b>improved</b>: the adjusted p-value is below α = {c.alpha:g} "
        f"and the interval is not inside ±{c.min_effect:g} (<b>changed</b>: a score with no "
        f"better direction); <b>no change</b>: the whole interval lies inside "
        f"±{c.min_effect:g} (the shaded band); <b>no evidence</b>: the interval is too wide "
        f"to say either; <b>not enough data</b>: fewer than {c.min_n} scored records on a "
        "side.")
    return (
        '<section class="notes"><h3>How to read this</h3><ul>'
        "<li>difference = current − baseline; each bar is its 95 % confidence interval, the "
        "dot the estimate, the shaded band ±min-effect around 0; rates in percentage points "
        "(pp). Rows whose difference fits in ±1 share one scale.</li>"
        f"<li>intervals and tests: <ul>{items}</ul></li>"
        f"<li>p-values adjusted across the {len(c.rows)} rows: {adjust}</li>"
        f"<li>{verdicts}</li>"
        "<li>error and skip rates compare every job of every score (lower is better): a "
        "release that errors more has regressed, whatever its mean.</li>"
        "<li>the tests assume independent requests and scores bounded in [0, 1].</li>"
        "</ul></section>")


# -- worst records ---------------------------------------------------------------------------
def _worst_records(page: ReportPage, context_chars: int) -> list[str]:
    """One card per record that is among the worst of some score, most-often-worst first."""
    report = page.report
    by_record: dict[str, list[Any]] = {}
    for items in report.worst.values():
        for w in items:
            by_record.setdefault(w.record_id, []).append(w)
    summaries = {m.name: m for m in report.metrics}
    order = sorted(by_record, key=lambda r: -len(by_record[r]))  # stable: first seen first
    return [_record_card(page.records[rid], by_record[rid], summaries, context_chars)
            for rid in order if rid in page.records]


def _text_block(label: str, text: str | None) -> str:
    body = (f'<p class="text">{escape(text)}</p>' if text
            else '<p class="text missing">—</p>')
    return f'<div class="field"><h4>{escape(label)}</h4>{body}</div>'


def _record_card(rec: dict[str, Any], worst: Sequence[Any],
                 summaries: dict[str, MetricSummary], context_chars: int) -> str:
    scores = {s["name"]: s for s in rec["scores"]}
    why = []
    for w in worst:
        m = summaries[w.name]
        s = scores.get(w.name, {})
        why.append(
            f'<li><span class="chip {_tone(w.value, m)}" data-worst="{escape(w.name)}">'
            f"{escape(w.name)} <b>{_val(w.value)}</b></span>"
            f'<span class="expl">{escape(s.get("explanation") or "")}</span></li>'
        )
    meta = [f'trace <span class="mono">{escape(rec["trace_id"][:16])}</span>',
            escape(_when(rec.get("created_at")))]
    if rec.get("latency_ms") is not None:
        meta.append(f"{rec['latency_ms']:.1f} ms")
    if rec.get("model"):
        meta.append(escape(str(rec["model"])))
    if rec.get("error"):
        meta.append(f'<span class="bad">error: {escape(str(rec["error"]))}</span>')
    gts = rec["ground_truths"] if isinstance(rec["ground_truths"], list) else []
    ctxs = rec["contexts"] if isinstance(rec["contexts"], list) else []
    ctx_items = []
    for i, c in enumerate(ctxs):
        head = [f"[{i}]"]
        if c.get("source"):
            head.append(escape(str(c["source"])))
        if c.get("id") is not None:
            head.append(f'id <span class="mono">{escape(str(c["id"]))}</span>')
        if isinstance(c.get("score"), (int, float)):
            head.append(f"score {c['score']:.4g}")
        text = str(c.get("text") or "")
        if len(text) > context_chars:
            text = text[:context_chars].rstrip() + f"… ({len(c['text']):,} chars)"
        ctx_items.append(f'<li><div class="cmeta">{" · ".join(head)}</div>'
                         f'<p class="text">{escape(text)}</p></li>')
    ctx_html = (f"<details class=\"ctx\"><summary>{len(ctxs)} retrieved context"
                f"{'s' * (len(ctxs) != 1)}</summary><ol>{''.join(ctx_items)}</ol></details>"
                if ctxs else '<p class="missing">no retrieved contexts</p>')
    rows = []
    for s in rec["scores"]:
        summary = summaries.get(s["name"])
        value = _val(s["value"]) if s["status"] == "ok" else escape(s["status"])
        tone = _tone(s["value"], summary) if summary is not None and s["status"] == "ok" else (
            "bad" if s["status"] == "error" else "")
        note = s["explanation"] if s["status"] == "ok" else s["error"]
        rows.append(f'<tr><td>{escape(s["name"])}</td><td class="num {tone}">{value}</td>'
                    f'<td>{escape(s["label"] or "")}</td><td>{escape(note or "")}</td></tr>')
    scores_html = (f'<details class="scores"><summary>all {len(rows)} scores</summary>'
                   '<table><thead><tr><th>score</th><th>value</th><th>label</th>'
                   f'<th>explanation</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
                   "</details>")
    return (
        f'<article class="card record" id="{_rec_anchor(rec["record_id"])}" '
        f'data-record="{escape(rec["record_id"])}">'
        f'<header><h3 class="query">{escape(rec.get("query") or "(no query captured)")}</h3>'
        f'<p class="meta">{" · ".join(meta)}</p></header>'
        f'<ul class="why">{"".join(why)}</ul>'
        f'<div class="qa">{_text_block("answer", rec.get("answer"))}'
        f'{_text_block("ground truth", chr(10).join(map(str, gts)) if gts else None)}</div>'
        f"{ctx_html}{scores_html}</article>"
    )


# -- cost ------------------------------------------------------------------------------------
def _cost(u: Usage) -> str:
    parts = ['<div class="cost">']
    if u.judge:
        rows = []
        for j in u.judge:
            errors = (f'<span class="bad">{j.errors:,}</span>' if j.errors else "0")
            rows.append(
                f'<tr data-judge="{escape(j.model)}:{escape(j.step)}"><td>{escape(j.model)}</td>'
                f"<td>{escape(j.step)}</td><td class=\"num\">{j.calls:,}</td>"
                f'<td class="num">{errors}</td><td class="num">{j.input_tokens:,}</td>'
                f'<td class="num">{j.output_tokens:,}</td><td class="num">{_usd(j.cost_usd)}</td>'
                "</tr>"
            )
        calls = sum(j.calls for j in u.judge)
        tokens = sum(j.input_tokens + j.output_tokens for j in u.judge)
        parts.append(
            '<div class="card"><h3>Judge calls</h3><dl class="stats">'
            + _stat("cost", "judge_cost_usd", _usd(u.judge_cost_usd), u.judge_cost_usd)
            + _stat("calls", "judge_calls", f"{calls:,}", calls)
            + _stat("tokens", "judge_tokens", f"{tokens:,}", tokens)
            + "</dl><table><thead><tr><th>model</th><th>step</th><th class=num>calls</th>"
            "<th class=num>errors</th><th class=num>input tokens</th>"
            "<th class=num>output tokens</th><th class=num>cost</th></tr>"
            f'</thead><tbody>{"".join(rows)}</tbody></table></div>'
        )
    elif u.judge_scores:
        parts.append('<div class="card"><h3>Judge calls</h3><p data-judge="none">'
                     f"{u.judge_scores:,} judge scores, but no judge calls logged in this "
                     "window (cached answers, or written before calls were logged).</p></div>")
    else:
        parts.append('<div class="card"><h3>Judge calls</h3><p data-judge="none">'
                     "No judge calls in this window: no LLM-judge metric scored anything, so "
                     "scoring used no tokens.</p></div>")
    models = ", ".join(f"{escape(k)} ({v:,})" for k, v in u.models.items()) or "—"
    per = ""
    if u.with_usage:
        per = (f" · {(u.input_tokens + u.output_tokens) / u.with_usage:,.0f} tokens per "
               "record")
    parts.append(
        '<div class="card"><h3>App tokens</h3><dl class="stats">'
        + _stat("input", "app_input_tokens", f"{u.input_tokens:,}", u.input_tokens)
        + _stat("output", "app_output_tokens", f"{u.output_tokens:,}", u.output_tokens)
        + _stat("with usage", "app_records", f"{u.with_usage:,} / {u.records:,}",
                u.with_usage)
        + f'</dl><p class="note">models: {models}{per}</p></div>'
    )
    parts.append("</div>")
    return "".join(parts)


def _usd(v: float | None) -> str:
    if v is None:
        return "—"
    return f"${v:,.4f}" if v < 1 else f"${v:,.2f}"


_CSS = """
:root{--bg:#f6f6f3;--card:#fff;--ink:#1d2126;--muted:#6a7079;--line:#e3e3de;--soft:#f0f0ec;
--good:#2e7d5b;--good-bg:#e3f1ea;--bad:#b8432f;--bad-bg:#f8e5e0;--warn:#a8741a;--warn-bg:#f6ecd6;--faint:#d5d7db;--none:#8a94a6;
--accent:#3f5a8a;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme:dark){:root{--bg:#15171a;--card:#1d2024;--ink:#e6e6e3;
--muted:#9aa0a8;--line:#2e3237;--soft:#24272c;--good:#5fb98f;--good-bg:#1f3a2e;--bad:#e07a64;
--bad-bg:#402520;--warn:#d6a24a;--warn-bg:#3a3020;--faint:#454a52;--none:#7d8799;--accent:#8fa9d8}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;-webkit-font-smoothing:antialiased}
main{max-width:1280px;margin:0 auto;padding:32px 28px 48px}
h1{font-size:26px;font-weight:650;letter-spacing:-.01em;margin:0}
h2{font-size:19px;font-weight:620;margin:0}
h3{font-size:16px;font-weight:600;margin:0}
h4{font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.06em;
color:var(--muted);margin:0 0 4px}
.sub{color:var(--muted);margin:4px 0 0;font-size:14px}
.mono,code{font-family:var(--mono);font-size:.9em}
code{background:var(--soft);padding:1px 5px;border-radius:4px}
.top{display:flex;justify-content:space-between;align-items:flex-end;margin-bottom:22px}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.tl{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
.tv{font-size:26px;font-weight:620;font-variant-numeric:tabular-nums;margin:2px 0}
.tn{font-size:12px;color:var(--muted)}
.tile.bad .tv{color:var(--bad)}.tile.warn .tv{color:var(--warn)}
.h2row{display:flex;align-items:baseline;justify-content:space-between;gap:16px;
flex-wrap:wrap;margin:36px 0 14px;border-bottom:1px solid var(--line);padding-bottom:8px}
.legend{margin:0;color:var(--muted);font-size:13px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 10px;
vertical-align:-1px}
.sw.pass{background:var(--good)}.sw.fail{background:var(--bad)}.sw.none{background:var(--none)}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:16px 18px}
.from{font-weight:400;color:var(--muted);font-size:13px;margin-left:4px}
.dir{margin:0;color:var(--muted);font-size:12px}
.headline{display:flex;align-items:baseline;gap:8px;margin:6px 0 6px}
.big{font-size:34px;font-weight:650;font-variant-numeric:tabular-nums;letter-spacing:-.02em}
.bl{color:var(--muted);font-size:13px}
.good{color:var(--good)}.bad{color:var(--bad)}
.passbar{display:flex;height:6px;border-radius:3px;overflow:hidden;background:var(--soft);
margin-bottom:10px}
.passbar .pass{background:var(--good);opacity:.75}.passbar .fail{background:var(--bad);opacity:.8}
dl.stats{display:grid;grid-template-columns:repeat(4,1fr);gap:6px 10px;margin:0 0 6px}
dl.stats dt{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
dl.stats dd{margin:0;font-variant-numeric:tabular-nums;font-weight:550}
figure{margin:10px 0 0}
figcaption{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
svg.chart{width:100%;height:auto;display:block;overflow:visible}
svg .grid{stroke:var(--line);stroke-width:1}
svg .axis{stroke:var(--muted);stroke-width:1;opacity:.6}
svg .ax{fill:var(--muted);font-size:10px;font-family:inherit;font-variant-numeric:tabular-nums}
svg .pass{fill:var(--good);opacity:.8}svg .fail{fill:var(--bad);opacity:.85}
svg .none{fill:var(--none);opacity:.8}svg .emptybin{fill:var(--line)}
svg .bin:hover rect{opacity:1}
svg .thr{stroke:var(--ink);stroke-width:1;stroke-dasharray:3 3;opacity:.45}
svg .line{fill:none;stroke:var(--accent);stroke-width:1.8;stroke-linejoin:round}
svg .pt{fill:var(--accent);stroke:var(--card);stroke-width:1}
svg .pt.good{fill:var(--good)}svg .pt.bad{fill:var(--bad)}
.nodata{color:var(--muted);font-size:14px}
.skipnote{margin:4px 0;padding:6px 10px;border-radius:6px;background:var(--bad-bg);
color:var(--bad);font-size:13px}
.skipbanner{margin-top:14px;border-color:var(--warn)}
.skipbanner h3{color:var(--warn);font-size:15px}
.skipbanner ul{margin:6px 0 0;padding-left:18px;font-size:14px}
.worst{margin-top:12px;border-top:1px solid var(--line);padding-top:8px}
.worst ol{list-style:none;margin:0;padding:0;font-size:13px}
.worst li{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.worst a{color:var(--ink);text-decoration:none}.worst a:hover{text-decoration:underline}
.v{font-variant-numeric:tabular-nums;font-weight:600;margin-right:6px}
.record{margin-bottom:14px}
.record .query{font-size:17px}
.meta{margin:2px 0 0;color:var(--muted);font-size:13px}
.why{list-style:none;padding:0;margin:10px 0;display:grid;
grid-template-columns:max-content 1fr;gap:5px 10px;align-items:baseline;font-size:14px}
.why li{display:contents}
.chip{justify-self:start;border-radius:999px;padding:1px 10px;font-size:12.5px;background:var(--soft);
color:var(--ink);font-variant-numeric:tabular-nums}
.chip.bad{background:var(--bad-bg);color:var(--bad)}
.chip.good{background:var(--good-bg);color:var(--good)}
.expl{color:var(--muted)}
.qa{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:14px;
margin:10px 0}
.field{background:var(--soft);border-radius:8px;padding:10px 12px}
.text{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
.missing{color:var(--muted)}
details{margin-top:8px}
summary{cursor:pointer;color:var(--accent);font-size:14px}
details ol{margin:8px 0 0;padding-left:0;list-style:none;display:grid;gap:8px}
details li{border-left:3px solid var(--line);padding:2px 0 2px 12px}
.cmeta{font-size:12px;color:var(--muted)}
details .text{font-size:14px}
table{border-collapse:collapse;width:100%;font-size:13.5px;margin-top:6px}
th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;
border-bottom:1px solid var(--line);padding:4px 8px}
td{border-bottom:1px solid var(--soft);padding:4px 8px;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.cost{display:grid;grid-template-columns:minmax(0,2fr) minmax(280px,1fr);gap:16px;
align-items:start}
.cost dl.stats{grid-template-columns:repeat(3,1fr);margin-top:8px}
th.num{text-align:right}
.cost p{margin:8px 0 0}.note{color:var(--muted);font-size:13px}
button{font:inherit;font-size:13px;color:var(--accent);background:none;
border:1px solid var(--line);border-radius:6px;padding:2px 10px;cursor:pointer}
.empty{background:var(--card);border:1px dashed var(--line);border-radius:12px;padding:28px;
text-align:center;color:var(--muted);margin-top:24px}
footer{margin-top:40px;color:var(--muted);font-size:12.5px}
.ci{margin:-2px 0 8px;color:var(--muted);font-size:13px;font-variant-numeric:tabular-nums}
.clip{text-transform:none;letter-spacing:0}
svg .band{fill:var(--accent);opacity:.17}
svg .bandbar{stroke:var(--accent);stroke-width:5;opacity:.25;stroke-linecap:round}
svg .tick{stroke:var(--muted);opacity:.6}
svg .rel line{stroke:var(--ink);stroke-width:1.2;stroke-dasharray:4 3;opacity:.6}
svg .rel text,svg .rel0{fill:var(--ink);font-size:10.5px;font-weight:600}
svg .rel0{fill:var(--muted);font-weight:500}
.relkey{display:inline-block;width:0;height:11px;border-left:1.5px dashed var(--ink);
margin:0 4px 0 8px;vertical-align:-1px;opacity:.7}
.trendcard header{display:flex;justify-content:space-between;align-items:baseline;gap:8px;
flex-wrap:wrap}
.tnow{color:var(--muted);font-size:12.5px;font-variant-numeric:tabular-nums}
.grid.trend{grid-template-columns:repeat(auto-fill,minmax(520px,1fr))}
.badge{display:inline-block;border-radius:999px;padding:0 9px;font-size:11.5px;font-weight:650;
letter-spacing:.04em;white-space:nowrap;line-height:1.7}
.st-OK{background:var(--good-bg);color:var(--good)}
.st-WARNING{background:var(--warn-bg);color:var(--warn)}
.st-ALERT{background:var(--bad);color:#fff}
.st-NO_DATA{background:var(--soft);color:var(--muted)}
.monitors{margin-bottom:16px}
.monitors.card{border-left:4px solid var(--good)}
.monitors.card.worst-ALERT{border-left-color:var(--bad)}
.monitors.card.worst-WARNING{border-left-color:var(--warn)}
.monitors.card.worst-NO_DATA{border-left-color:var(--none)}
.mhead{display:flex;justify-content:space-between;align-items:baseline;gap:12px;flex-wrap:wrap}
.mcounts{margin:0;font-size:13px}.mcounts b{margin-right:8px}
.mname{font-weight:600;white-space:nowrap}
.msum{color:var(--muted);font-size:13px}
.monitors td{vertical-align:top}.when{color:var(--muted);white-space:nowrap;font-size:12.5px}
.stripcell{min-width:180px;width:24%}
svg.strip{width:100%;height:14px;display:block}
svg .sbg{fill:var(--soft)}
svg .s-OK{fill:var(--good);opacity:.75}svg .s-WARNING{fill:var(--warn)}
svg .s-ALERT{fill:var(--bad)}svg .s-NO_DATA{fill:var(--none);opacity:.45}
.history{margin-top:16px}
.changes{list-style:none;margin:8px 0 0;padding:0;display:grid;gap:4px;font-size:13.5px}
table.strips td{border:0;padding:3px 8px 3px 0}
table.strips td.mname{width:22%}table.strips td.stripcell{width:78%}
table.strips tr.scale td{padding-top:0;color:var(--muted);font-size:11.5px}
table.strips tr.scale td span:last-child{float:right}
.notices{margin-top:14px;border-color:var(--bad)}
.notices ul{margin:0;padding-left:18px;font-size:14px}
.groups{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:16px}
.group .dim{color:var(--muted);font-weight:500}
.v-regressed{--vc:var(--bad)}.v-improved{--vc:var(--good)}.v-changed{--vc:var(--warn)}
.v-no-change{--vc:var(--accent)}.v-no-evidence{--vc:var(--none)}
.v-not-enough-data{--vc:var(--faint)}
.verdict{display:inline-block;border-radius:999px;padding:0 10px;font-size:12.5px;
font-weight:620;color:#fff;background:var(--vc,var(--none));white-space:nowrap;line-height:1.7}
.verdict.v-not-enough-data{color:var(--ink)}
svg .ci{stroke:var(--vc,var(--none));stroke-width:7;stroke-linecap:round}
svg .est{fill:var(--vc,var(--none));stroke:var(--card);stroke-width:1.5}
svg .eq{fill:var(--soft);stroke:var(--line)}
svg .zero{stroke:var(--ink);stroke-width:1;opacity:.5}
svg.diff{width:260px;display:block}
.difftext{margin-top:2px;font-size:12.5px;font-variant-numeric:tabular-nums;white-space:nowrap;
margin-left:12px}
table.cmp td{vertical-align:middle}
table.cmp tr.v-regressed td:first-child{box-shadow:inset 3px 0 var(--bad)}
.sname{font-weight:600}
.sides .sidev{font-size:20px;overflow-wrap:anywhere}
.banner{margin:16px 0 0}
.banner.v-regressed{border-color:var(--bad);background:var(--bad-bg);color:var(--bad)}
.chips{display:flex;gap:8px;flex-wrap:wrap;margin:12px 0}
.notes{margin-top:24px;color:var(--muted);font-size:13.5px}
.notes h3{color:var(--ink);font-size:14px}.notes li{margin:3px 0}
@media (max-width:900px){.cost{grid-template-columns:1fr}.grid.trend,.groups{grid-template-columns:1fr}}
@media (max-width:560px){main{padding:18px 14px}dl.stats{grid-template-columns:repeat(3,1fr)}}
@media print{details{display:block}.tile,.card{break-inside:avoid}}
"""

# Expand/collapse every <details> of the worst records; the page works without it.
_JS = """
(function(){var b=document.getElementById('toggle');if(!b)return;b.onclick=function(){
var open=b.textContent==='expand all';document.querySelectorAll('.record details')
.forEach(function(d){d.open=open});b.textContent=open?'collapse all':'expand all'}})();
"""
