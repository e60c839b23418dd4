"""The HTML report: one self-contained page of charts, worst records and cost.

Everything is inline: CSS, SVG charts drawn here from the report queries in
:mod:`tracescore.reports.summary`, and a few lines of JavaScript for "expand all". Nothing is fetched
from anywhere, so the file can be mailed or archived. Every piece of user text (queries,
answers, contexts, explanations, metric names) goes through :func:`html.escape`.

Rendering reads the database (blocking SQLite I/O) through the connection it is given.
"""

from __future__ import annotations

import datetime as _dt
import math
import sqlite3
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from .. import __version__
from ..score import label_for
from .summary import (
    Histogram,
    MetricSummary,
    Report,
    TimeBucket,
    Usage,
    _num,
    _pct,
    _when,
    find_records,
    histogram,
    pick_bucket,
    record_details,
    score_time_span,
    timeline,
    usage_summary,
)

__all__ = ["render_html"]

#: Characters of each context shown (inside a collapsed <details>).
CONTEXT_CHARS = 4000


def render_html(conn: sqlite3.Connection, report: Report, *, bins: int = 10,
                context_chars: int = CONTEXT_CHARS) -> str:
    """The page for ``report`` (from :func:`~tracescore.reports.summary.build_report` on ``conn``).

    Per score name: headline numbers, a histogram of values and the mean per time bucket;
    then the worst records (each once, with every score, the explanations and the contexts);
    then token usage of the app and of judge metrics.
    """
    since = report.since
    span = score_time_span(conn, since=since)
    bucket = pick_bucket(*span) if span else None
    usage = usage_summary(conn, since=since)
    cards = []
    for m in report.metrics:
        # A yes/no metric gets two bars (0 and 1), not ten bins with nothing between.
        hist = histogram(conn, m.name, since=since, bins=2 if m.binary else bins)
        points = timeline(conn, m.name, since=since, bucket_s=bucket[0]) if bucket else []
        cards.append(_metric_card(m, hist, points, bucket, span, report.worst.get(m.name, [])))
    worst = _worst_records(conn, report, context_chars)

    window = "all time" if since is None else f"since {_when(since)}"
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
        f'<p class="sub"><span class="mono">{escape(report.db)}</span> · {escape(window)} · '
        f"generated {escape(_when(report.generated_at))}</p></div>",
        "</header>",
        f'<section class="tiles">{"".join(tiles)}</section>',
        _skip_banner(report.metrics),
    ]
    if not report.metrics:
        empty = "No scores yet." if report.records else "No records yet."
        hint = ("Scoring jobs are waiting for a running pipeline." if report.pending_jobs
                else "Run an app with tracescore, or try <code>tracescore demo</code>.")
        body.append(f'<p class="empty">{empty} {hint}</p>')
    else:
        charts = (f" · each card charts how the values are spread, then the mean per "
                  f"{escape(bucket[1])} over time (UTC)" if bucket else "")
        body += [
            '<div class="h2row"><h2>Scores</h2>',
            '<p class="legend"><span class="sw pass"></span>pass <span class="sw fail"></span>'
            f'fail <span class="sw none"></span>no threshold{charts}</p></div>',
            f'<div class="grid">{"".join(cards)}</div>',
        ]
    if worst:
        body += [
            '<div class="h2row"><h2>Worst records</h2>',
            '<p class="legend">the lowest-scoring records; a record low on several scores '
            'is shown once, its chips name those scores · '
            '<button type="button" id="toggle">expand all</button></p></div>',
            "".join(worst),
        ]
    body += ['<div class="h2row"><h2>Cost</h2></div>', _cost(usage)]
    body.append(
        f'<footer>tracescore {escape(__version__)} · details of a record: '
        "<code>tracescore show TRACE_ID</code> · all numbers from "
        f'<span class="mono">{escape(report.db)}</span></footer>'
    )
    title = f"tracescore report · {report.db}" if report.db else "tracescore report"
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<main>\n{chr(10).join(body)}\n</main>\n<script>{_JS}</script>\n</body>\n</html>\n'
    )


# -- pieces ----------------------------------------------------------------------------------
def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""


def _tile(label: str, value: str, note: str, key: str, tone: str = "") -> str:
    return (f'<div class="tile {tone}"><div class="tl">{escape(label)}</div>'
            f'<div class="tv" data-total="{key}">{escape(value)}</div>'
            f'<div class="tn">{escape(note)}</div></div>')


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
        charts = (
            f'<figure><figcaption>{what}</figcaption>{_histogram_svg(m, hist)}</figure>'
            f"<figure><figcaption>{over} per {escape(bucket[1])}</figcaption>"
            f"{_timeline_svg(m, hist, points, bucket, span)}</figure>"
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
        f'<div class="headline">{headline}</div>'
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


def _timeline_svg(m: MetricSummary, h: Histogram, points: Sequence[TimeBucket],
                  bucket: tuple[float, str], span: tuple[float, float]) -> str:
    bucket_s = bucket[0]
    first = span[0] // bucket_s * bucket_s
    last = span[1] // bucket_s * bucket_s
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    lo, hi = h.lo, h.hi

    def x(t: float) -> float:
        return PAD_L + pw / 2 if last == first else PAD_L + pw * (t - first) / (last - first)

    def y(v: float) -> float:
        return PAD_T + ph * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="chart timeline" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="mean of {escape(m.name)} per {escape(bucket[1])}" '
           f'data-points="{len(points)}">']
    for v in (lo, (lo + hi) / 2, hi):
        tick = f"{100 * v:.0f}%" if m.binary else _fmt_axis(v)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}"/><text class="ax" x="{PAD_L - 4}" y="{y(v) + 3:.1f}" '
                   f'text-anchor="end">{tick}</text>')
    # A yes/no metric's threshold (1) would sit on the top edge: its line says nothing.
    if not m.binary and m.threshold is not None and lo <= m.threshold <= hi:
        out.append(f'<line class="thr" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(m.threshold):.1f}"'
                   f' y2="{y(m.threshold):.1f}"><title>threshold {m.threshold:g}</title></line>')
    # One path per run of consecutive buckets: a gap (no scores) breaks the line.
    runs: list[list[TimeBucket]] = []
    for p in points:
        # (1.5 buckets: sub-second bucket starts carry float rounding)
        if runs and p.start - runs[-1][-1].start <= 1.5 * bucket_s:
            runs[-1].append(p)
        else:
            runs.append([p])
    for run in runs:
        if len(run) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{x(p.start):.1f},{y(p.mean):.1f}"
                         for i, p in enumerate(run))
            out.append(f'<path class="line" d="{d}"/>')
    dot = 2.2 if len(points) > 24 else 3
    for p in points:
        tip = f"{_time_label(p.start, bucket_s)} UTC: mean {p.mean:.3f}, {p.count} scores"
        if m.binary:
            tip = (f"{_time_label(p.start, bucket_s)} UTC: {100 * p.mean:.0f}% yes, "
                   f"{p.count} scores")
        if p.labelled:
            tip += f", {p.failed} fail"
        out.append(f'<circle class="pt" cx="{x(p.start):.1f}" '
                   f'cy="{y(p.mean):.1f}" r="{dot}" data-start="{p.start!r}" '
                   f'data-mean="{p.mean!r}" data-count="{p.count}"><title>{escape(tip)}</title>'
                   "</circle>")
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


# -- worst records ---------------------------------------------------------------------------
def _worst_records(conn: sqlite3.Connection, report: Report, context_chars: int) -> list[str]:
    """One card per record that is among the worst of some score, most-often-worst first."""
    by_record: dict[str, list[Any]] = {}
    for items in report.worst.values():
        for w in items:
            by_record.setdefault(w.record_id, []).append(w)
    summaries = {m.name: m for m in report.metrics}
    order = sorted(by_record, key=lambda r: -len(by_record[r]))  # stable: first seen first
    cards = []
    for record_id in order:
        rows, _ = find_records(conn, record_id)
        if not rows:
            continue
        cards.append(_record_card(record_details(conn, rows[0]), by_record[record_id],
                                  summaries, context_chars))
    return cards


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
--good:#2e7d5b;--good-bg:#e3f1ea;--bad:#b8432f;--bad-bg:#f8e5e0;--warn:#a8741a;--none:#8a94a6;
--accent:#3f5a8a;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme:dark){:root{--bg:#15171a;--card:#1d2024;--ink:#e6e6e3;
--muted:#9aa0a8;--line:#2e3237;--soft:#24272c;--good:#5fb98f;--good-bg:#1f3a2e;--bad:#e07a64;
--bad-bg:#402520;--warn:#d6a24a;--none:#7d8799;--accent:#8fa9d8}}
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
@media (max-width:900px){.cost{grid-template-columns:1fr}}
@media (max-width:560px){main{padding:18px 14px}dl.stats{grid-template-columns:repeat(3,1fr)}}
@media print{details{display:block}.tile,.card{break-inside:avoid}}
"""

# Expand/collapse every <details> of the worst records; the page works without it.
_JS = """
(function(){var b=document.getElementById('toggle');if(!b)return;b.onclick=function(){
var open=b.textContent==='expand all';document.querySelectorAll('.record details')
.forEach(function(d){d.open=open});b.textContent=open?'collapse all':'expand all'}})();
"""
