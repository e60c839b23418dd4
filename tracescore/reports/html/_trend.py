"""The trend: its own page (:func:`render_trend_html`) and the sections the report page
embeds — each score per bucket with its 95 % band and the releases marked, each monitor's
state over the same span, and the monitors' history.

Renders a :class:`~tracescore.reports.trend.TrendPage`
(:func:`~tracescore.reports.trend.build_trend`): no connection, no queries. Score, release and
monitor names go through :func:`html.escape`.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from ... import __version__
from ..textfmt import monitor_estimate
from ..textfmt import when as _when
from ._monitors import STATES, _badge, _monitor_table
from ._page import _attr, _clip, _document, _estimate, _scope
from ._svg import _band_paths, _runs, _tick, _time_label, _zoom_range

if TYPE_CHECKING:
    from ..trend import ReleaseMark, TrendPage, TrendSeries

#: The trend charts' size and padding, and the monitor strips' size, in SVG units.
TW, TH = 560, 210
TPAD_L, TPAD_R, TPAD_T, TPAD_B = 42, 14, 30, 26
_STRIP_W, _STRIP_H = 240, 14


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
    note = ""
    if s.ci_method == "active":
        now = now.replace(f", n = {last.n:,}", f" (active estimate, {last.n:,} judged)") \
            if last is not None else now
        note = ('<p class="meta" data-estimator="active">judged within a judge budget: each '
                "point is the active estimate over the bucket's decided records (n = judged "
                "records), not the judged records' mean (docs/judge_budget.md)</p>")
    return (f'<section class="card trendcard" data-series="{escape(s.name)}" '
            f'data-kind="{escape(s.kind)}"><header><h3>{escape(s.name)}{origin}</h3>{now}'
            f"</header>{note}{_trend_svg(s, trend, axis)}</section>")


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
        if s.ci_method == "active":
            tip = (f"{_time_label(p.start, b)} UTC: active estimate "
                   f"{_estimate(p.value, p.lo, p.hi, rate=rate)}, {p.n:,} judged")
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
        est = "" if h.value is None else f" · {monitor_estimate(h.value, h.lo, h.hi)}"
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
