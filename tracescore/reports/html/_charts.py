"""The report's score charts: each score card's histogram of values (pass / fail / no
threshold) and its timeline of the mean per bucket with the 95 % band.

Drawn from :class:`~tracescore.read.model.Histogram` and
:class:`~tracescore.read.model.TimeBucket` data only (no connection, no queries); score
names in labels and tooltips go through :func:`html.escape`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ...read.model import Histogram, MetricSummary, TimeBucket
from ._page import _attr
from ._svg import _band_paths, _fmt_axis, _nice_step, _runs, _time_label, _y_range

#: The score charts' size and padding in SVG units (tests measure drawn points from them).
W, H = 320, 132
PAD_L, PAD_R, PAD_T, PAD_B = 30, 8, 10, 24


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
        active = getattr(m, "estimator", None) == "active"
        shown = f"{100 * p.mean:.0f}% yes" if m.binary else f"mean {p.mean:.3f}"
        if active:
            shown = "active estimate " + shown.removeprefix("mean ")
        if p.lo is not None and p.hi is not None:
            shown += (f" [{100 * p.lo:.0f}, {100 * p.hi:.0f}]" if m.binary
                      else f" [{p.lo:.3f}, {p.hi:.3f}]")
        tip = f"{when}: {shown}, {p.count} {'judged' if active else 'scores'}"
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
