"""The report page's "Judge vs humans" section: per score with human labels in the window,
the plain judge mean beside the estimate corrected with the labels (PPI++), and the judge's
agreement with the humans (accuracy, Cohen's κ and the confusion matrix for a yes/no score;
Spearman and MAE for a numeric one; the bias for both).

Renders :class:`~tracescore.reports.trust.TrustSummary` rows (``Report.trust``); no
connection. Every name goes through :func:`html.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ._page import _val

__all__ = ["_trust_section"]


def _est(value: float | None, lo: float | None, hi: float | None) -> str:
    if value is None:
        return "—"
    return _val(value) + (f" [{_val(lo)}, {_val(hi)}]" if lo is not None and hi is not None
                          else "")


def _pct(e: Any) -> str:
    if e is None or e.value is None:
        return "—"
    return f"{100 * e.value:.1f}%" + (f" [{100 * e.lo:.1f}, {100 * e.hi:.1f}]"
                                      if e.lo is not None and e.hi is not None else "")


def _bias(d: Any) -> str:
    if d is None or d.estimate is None:
        return "—"
    text = f"{d.estimate:+.3f}"
    return text + (f" [{d.lo:+.3f}, {d.hi:+.3f}]" if d.lo is not None and d.hi is not None
                   else "")


def _agreement(ag: Any) -> str:
    from ...trust.agreement import BinaryAgreement

    if ag.status != "ok":
        return f'<p class="meta">Not enough labels for agreement: {escape(str(ag.reason))}</p>'
    if isinstance(ag, BinaryAgreement):
        k = ag.kappa
        kappa = (escape(f"undefined ({k and k.reason})") if k is None or k.value is None
                 else _est(k.value, k.shown_lo, k.shown_hi))
        c = ag.confusion
        return (
            f'<dl class="stats"><div><dt>n</dt><dd>{ag.n}</dd></div>'
            f"<div><dt>accuracy</dt><dd>{_pct(ag.accuracy)}</dd></div>"
            f"<div><dt>Cohen's κ</dt><dd data-stat=\"kappa\">{kappa}</dd></div>"
            f"<div><dt>bias (judge − human)</dt><dd>{_bias(ag.bias)}</dd></div></dl>"
            '<table class="confusion"><thead><tr><th></th><th>judge no</th><th>judge yes</th>'
            f"</tr></thead><tbody><tr><th>human no</th><td>{c.both_no}</td>"
            f"<td>{c.judge_yes_human_no}</td></tr><tr><th>human yes</th>"
            f"<td>{c.judge_no_human_yes}</td><td>{c.both_yes}</td></tr></tbody></table>")
    s = ag.spearman
    rho = (escape(f"undefined ({s and s.reason})") if s is None or s.value is None
           else _est(s.value, s.lo, s.hi))
    mae = "—" if ag.mae is None else _est(ag.mae.value, ag.mae.lo, ag.mae.hi)
    return (f'<dl class="stats"><div><dt>n</dt><dd>{ag.n}</dd></div>'
            f'<div><dt>Spearman ρ</dt><dd data-stat="spearman">{rho}</dd></div>'
            f"<div><dt>MAE</dt><dd>{mae}</dd></div>"
            f"<div><dt>bias (judge − human)</dt><dd>{_bias(ag.bias)}</dd></div></dl>")


def _estimates(t: Any) -> str:
    rows = [("judge mean (uncorrected)", t.judge_n, _val(t.judge_mean))]
    c = t.correction
    note = ""
    if c is not None and c.result is not None:
        r = c.result
        rows[0] = (rows[0][0], r.judge.n, _est(r.judge.value, r.judge.lo, r.judge.hi))
        e = r.corrected
        shown = (_est(e.value, e.lo, e.hi) if e.value is not None
                 else escape(f"not enough labels: {e.reason}"))
        rows.append((f"corrected with {e.n} human label{'s' if e.n != 1 else ''}", e.n, shown))
        rows.append(("human labels only", r.labels.n,
                     _est(r.labels.value, r.labels.lo, r.labels.hi)))
        note = escape((f"{c.assumption}; {e.method}" if e.value is not None else c.assumption)
                      + f"; population: {c.population}")
        if c.warning:
            note += f'</p><p class="warn" data-warning="label-draw">{escape(c.warning)}'

    elif c is not None:
        rows.append((f"corrected with {t.pairs} human labels", t.pairs,
                     escape(f"not available: {c.reason}")))
    body = "".join(f"<tr><td>{escape(label)}</td><td class=\"num\">{n:,}</td>"
                   f"<td class=\"num\">{shown}</td></tr>" for label, n, shown in rows)
    return ('<table><thead><tr><th>estimate of the mean</th><th>n</th><th>value [95 % CI]'
            f"</th></tr></thead><tbody>{body}</tbody></table>"
            + (f'<p class="meta">{note}</p>' if note else ""))


def _trust_section(rows: Sequence[Any]) -> str:
    """The section, or "" when no score has labels in the window."""
    if not rows:
        return ""
    cards = []
    for t in rows:
        who = f"{t.pairs:,} labelled records, {t.labels:,} labels"
        if len(t.annotators) > 1:
            who += (f" by {len(t.annotators)} annotators (human value: their "
                    f"{'majority' if t.binary else 'mean'})")
        if t.stale:
            who += f"; {t.stale} labels of another metric version left out"
        cards.append(
            f'<section class="card trust" data-trust="{escape(t.name)}">'
            f"<h3>{escape(t.name)}{' (yes/no)' if t.binary else ''}</h3>"
            f'<p class="meta">{escape(who)}</p>{_estimates(t)}{_agreement(t.agreement)}'
            "</section>")
    return ('<div class="h2row" id="judge-vs-humans"><h2>Judge vs humans</h2>'
            '<p class="legend">human labels in the window · judge mean = the judge\'s own '
            "scores, uncorrected · corrected = judge scores corrected by the human labels "
            "(prediction-powered inference, PPI++) · intervals 95 %</p></div>"
            f'<div class="grid">{"".join(cards)}</div>')
