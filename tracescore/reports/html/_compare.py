"""The comparison page (``tracescore compare --html``): per score n and the mean (or rate)
on each side, the difference current − baseline as an interval bar against the ±min-effect
band, the adjusted p-value and the verdict; when either side has human labels, the judge vs
humans section (corrected estimates per side and their difference); the methods in a footnote.

Renders a :class:`~tracescore.reports.compare.Comparison`
(:func:`~tracescore.reports.compare.build_comparison`): no connection, no queries. Labels,
score names and scopes go through :func:`html.escape`.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from ... import __version__
from ..population_text import population_html
from ..textfmt import when as _when
from ._compare_trust import _compare_trust_section
from ._page import _attr, _document, _estimate
from ._svg import _nice_up

if TYPE_CHECKING:
    from ..compare import Comparison, ScoreComparison

#: The interval methods' names as a reader knows them (:mod:`tracescore.stats`).
METHODS = {
    "t": "Student t interval of the mean",
    "wilson": "Wilson score interval of the rate",
    "welch": "Welch's unequal-variance t interval and test (means)",
    "range bound": "exact interval for a mean of scores in [0, 1] whose values are all "
                   "equal (no spread): Clopper–Pearson at 0 or 1, its bounded-range form "
                   "between",
    "mover+range": "MOVER interval (Zou & Donner 2008) built from each side's own interval "
                   "— the exact range bound for a side without spread — with the p-value "
                   "found by inverting it (means in [0, 1] where a side has no spread)",
    # the method of comparisons saved (compare --json) by earlier versions
    "bootstrap": "percentile bootstrap over the rollups' 100-bin histograms (earlier "
                 "versions of tracescore)",
    "newcombe+score": "Newcombe's hybrid score interval (from the two Wilson intervals) with "
                      "the pooled two-proportion score test (rates)",
    "newcombe+fisher": "Newcombe's hybrid score interval with Fisher's exact test (rates with "
                       "an expected cell count below 5)",
}
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
        *(population_html(getattr(c, "population", {}).get(side, []),
                          f"{side}: {label}")
          for side, label in (("current", c.current_label), ("baseline", c.baseline_label))),
        _compare_trust_section(getattr(c, "trust", []), c.current_label, c.baseline_label),
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
        f"{escape(_estimate(r.current.value, r.current.lo, r.current.hi, rate))}"
        f"{_no_spread(r.current)}</td>"
        f'<td class="num" data-n="baseline">{r.baseline.n:,}</td>'
        f'<td class="num" data-est="baseline" data-value="{_attr(r.baseline.value)}">'
        f"{escape(_estimate(r.baseline.value, r.baseline.lo, r.baseline.hi, rate))}"
        f"{_no_spread(r.baseline)}</td>"
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


def _no_spread(e: Any) -> str:
    """A side whose values are all equal: its interval is the range bound, and says so."""
    note = getattr(e, "note", "")
    return (f' <abbr class="from" data-note="no-spread" title="{escape(note)}; the interval '
            'is the exact range bound over scores in [0, 1]">no spread</abbr>' if note else "")


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
        f"and the interval lies on one side of 0, not inside ±{c.min_effect:g} "
        "(<b>changed</b>: a score with no "
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
