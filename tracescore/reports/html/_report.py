"""The report page (``tracescore report --html``): monitors, totals, notices, a card per
score with its interval and charts, the ``--by`` groups, then the trend, the worst records
and the cost (each from its own module).

Renders a :class:`~tracescore.read.model.ReportPage` built by the query side; never a
connection, no queries. Every piece of user text goes through :func:`html.escape`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from ... import __version__
from ...read.model import (
    FeedbackSummary,
    GroupSummary,
    Histogram,
    MetricSummary,
    Report,
    ReportPage,
    TimeBucket,
)
from ..population_text import population_html
from ..textfmt import pct as _pct
from ..textfmt import when as _when
from ._charts import _histogram_svg, _timeline_svg
from ._cost import _cost
from ._monitors import _monitor_table
from ._page import _attr, _clip, _document, _estimate, _scope, _stat, _tone, _val
from ._records import _rec_anchor, _worst_records
from ._trend import _trend_sections
from ._trust import _trust_section

if TYPE_CHECKING:
    from ..trend import TrendPage

#: Characters of each context shown (inside a collapsed <details>).
CONTEXT_CHARS = 4000
_SHORT = {"t": "Student t", "wilson": "Wilson",
          "range bound": "range bound: every value equal, the exact bound over [0, 1]"}


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
        _tile("Pending jobs", f"{report.pending_jobs:,}",
              _pending_note(report), "pending_jobs", "warn" if report.pending_jobs else ""),
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
        _pending(report),
        _skip_banner(report.metrics),
    ]
    if not report.metrics:
        empty = "No scores yet." if report.records else "No records yet."
        hint = ("Scoring jobs are waiting (see above)." if report.pending_reasons
                else "Scoring jobs are waiting for a running pipeline." if report.pending_jobs
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
        body.append(population_html(getattr(report, "population", [])))
    if report.feedback:
        body.append(_feedback(report.feedback))
    body.append(_trust_section(getattr(report, "trust", [])))
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


def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""


def _tile(label: str, value: str, note: str, key: str, tone: str = "") -> str:
    return (f'<div class="tile {tone}"><div class="tl">{escape(label)}</div>'
            f'<div class="tv" data-total="{key}">{escape(value)}</div>'
            f'<div class="tn">{escape(note)}</div></div>')


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


def _pending_note(report: Report) -> str:
    """The pending tile's note: the main reason the jobs wait, else "not scored yet"."""
    waiting = [p for p in report.pending_reasons if p.state == "pending"]
    if not waiting:
        return "not scored yet"
    return _clip(waiting[0].reason, 80)


def _pending(report: Report) -> str:
    """Why the open jobs are not scored: one line per reason (a judge that cannot be
    reached, a budget, no running pipeline)."""
    if not report.pending_reasons:
        return ""
    items = "".join(
        f'<li data-pending="{escape(p.state)}"><b>{p.jobs:,} {escape(p.state)}</b>: '
        f"{escape(p.reason)}</li>" for p in report.pending_reasons)
    return (f'<section class="card notices pending"><h3>{report.pending_jobs:,} scoring '
            f"job{'s' if report.pending_jobs != 1 else ''} not done yet</h3>"
            f"<ul>{items}</ul></section>")


def _feedback(feedback: Sequence[FeedbackSummary]) -> str:
    """Users' feedback in the window (``ts.add_feedback``): one row per feedback name."""
    rows = []
    for f in feedback:
        share = "-" if f.rate is None else f"{100 * f.rate:.0f}%"
        if f.lo is not None and f.hi is not None:
            share += f" [{100 * f.lo:.1f}, {100 * f.hi:.1f}]"
        labels = ", ".join(f"{label} ({n:,})" for label, n in f.labels) or "-"
        mean = "-" if f.mean is None else f"{f.mean:.3f}"
        rows.append(
            f'<tr data-feedback="{escape(f.name)}"><td>{escape(f.name)}</td>'
            f'<td class="num">{f.count:,}</td><td class="num">{f.traces:,}</td>'
            f'<td class="num">{f.positive:,} / {f.negative:,}</td><td class="num">'
            f'{escape(share)}</td><td class="num">{mean}</td>'
            f'<td class="num">{f.comments:,}</td><td>{escape(labels)}</td></tr>')
    return ('<div class="h2row"><h2>User feedback</h2><p class="legend">'
            "<code>ts.add_feedback</code> in the window · up = a value &ge; 0.5 or a positive "
            "label · the share up with its 95 % Wilson interval</p></div>"
            '<section class="card"><table><thead><tr><th>feedback</th>'
            "<th class=num>n</th><th class=num>traces</th><th class=num>up / down</th>"
            "<th class=num>up [95% CI]</th><th class=num>mean</th><th class=num>comments</th>"
            "<th>labels</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></section>")


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


def _ci_line(m: MetricSummary) -> str:
    """The headline's 95 % interval, with the method that gave it."""
    if m.lo is None or m.hi is None:
        why = ("no values" if not m.count else "one value: no interval" if m.count == 1
               else "every value equal, range unknown: no interval")
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
    active = m.estimator == "active"
    common = [
        _stat("judged" if active else "scores", "count", f"{m.count:,}", m.count),
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
    if m.estimator == "active" and m.proxied is None:
        headline += ('<p class="meta" data-estimator="active">judged within a judge budget: '
                     "no active estimate here, and the judged records' own mean is not "
                     "shown (docs/judge_budget.md).</p>")
    elif m.estimator == "active":  # a judge budget: the estimate, not the judged records' mean
        headline += (
            f'<p class="meta" data-estimator="active">active estimate over {m.proxied or 0:,} '
            f"records with a proxy, {m.count:,} judged (judge budget, adaptive selection); "
            f"the judged records' own mean {_val(m.judged_mean)} over-represents the hard "
            "ones (docs/judge_budget.md). The timeline below is the active estimate per "
            "bucket with its 95 % interval; the distribution and the worst "
            "records are of the judged records only.</p>")
    charts = '<p class="nodata">No ok scores in this window.</p>'
    if hist is not None and bucket is not None and span is not None:
        what = "yes / no" if m.binary else "distribution"
        over = "rate of yes" if m.binary else "mean"
        if active:
            what += (' <span class="judgedonly" data-judged-only="1">· judged records only '
                     "(biased: adaptive selection over-represents the hard ones)</span>")
            over = "active estimate"
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
    worst_h = "worst judged records" if active else "worst"
    worst_html = (f'<div class="worst"><h4>{worst_h}</h4><ol>{links}</ol></div>' if links
                  else "")
    return (
        f'<section class="card metric" id="metric-{name}" data-metric="{name}">'
        f'<header><h3>{name}{origin}</h3></header><p class="dir">{escape(_direction(m))}</p>'
        f'<div class="headline">{headline}</div>{_ci_line(m)}'
        f"{passbar}<dl class=\"stats\">{stats}</dl>{skipnote}{charts}{worst_html}</section>"
    )


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


# Expand/collapse every <details> of the worst records; the page works without it.
_JS = """
(function(){var b=document.getElementById('toggle');if(!b)return;b.onclick=function(){
var open=b.textContent==='expand all';document.querySelectorAll('.record details')
.forEach(function(d){d.open=open});b.textContent=open?'collapse all':'expand all'}})();
"""
