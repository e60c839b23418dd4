"""The compare page's "Judge vs humans" section: per score with human labels on either side,
each side's judge mean (uncorrected) beside the estimate corrected with that side's labels
(PPI++), the difference of the corrected estimates, and each side's agreement of the judge
with the humans — the same figures ``compare --json`` gives under ``corrected`` and the report
page shows for one window.

Renders :class:`~tracescore.reports.compare.TrustComparison` rows; no connection. Every name
goes through :func:`html.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ._page import _val
from ._trust import _agreement, _est

__all__ = ["_compare_trust_section"]


def _side(s: Any) -> tuple[str, str, str]:
    """(judge mean, corrected [95 % CI], labelled records) of one side, as HTML."""
    if s is None:
        return "—", "no labels on this side", "0"
    judge = "—" if s.judge_mean is None else _val(s.judge_mean)
    c = s.correction
    if c is None or c.result is None:
        why = "not available" if c is None else f"not available: {c.reason}"
        return judge, escape(why), f"{s.pairs:,}"
    e = c.result.corrected
    shown = (_est(e.value, e.lo, e.hi) if e.value is not None
             else escape(f"not enough labels: {e.reason}"))
    return judge, shown, f"{e.n:,}"


def _diff(d: Any) -> str:
    if d is None or d.estimate is None:
        return "—"
    text = f"{d.estimate:+.3f}"
    return text + (f" [{d.lo:+.3f}, {d.hi:+.3f}]" if d.lo is not None and d.hi is not None
                   else "")


def _compare_trust_section(rows: Sequence[Any], current: str, baseline: str) -> str:
    """The section, or "" when no score has labels on either side."""
    if not rows:
        return ""
    body = []
    cards = []
    for r in rows:
        for i, (who, s) in enumerate((("current", r.current), ("baseline", r.baseline))):
            judge, corrected, n = _side(s)
            name = escape(r.name) if i == 0 else ""
            body.append(f'<tr data-trust="{escape(r.name)}" data-side="{who}"><td>{name}</td>'
                        f"<td>{who}</td><td class=\"num\">{judge}</td>"
                        f'<td class="num">{corrected}</td><td class="num">{n}</td></tr>')
            if s is not None and getattr(s, "agreement", None) is not None:
                cards.append(f'<section class="card trust" data-trust="{escape(r.name)}" '
                             f'data-side="{who}"><h3>{escape(r.name)} · {who}</h3>'
                             f"{_agreement(s.agreement)}</section>")
        body.append(f'<tr data-trust="{escape(r.name)}" data-side="difference"><td></td>'
                    f'<td>difference</td><td></td><td class="num">{escape(_diff(r.diff))}'
                    "</td><td></td></tr>")
    table = ('<section class="card"><table><thead><tr><th>score</th><th>side</th>'
             "<th class=num>judge mean</th><th class=num>corrected [95% CI]</th>"
             f"<th class=num>labelled records</th></tr></thead><tbody>{''.join(body)}"
             "</tbody></table></section>")
    legend = (f"current = {escape(current)}, baseline = {escape(baseline)} · judge mean = the "
              "judge's own scores, uncorrected · corrected = the judge scores corrected by the "
              "human labels of that side (prediction-powered inference, PPI++) · difference "
              "= current − baseline of the corrected estimates (sides independent, normal) · "
              "intervals 95 %")
    return ('<div class="h2row" id="judge-vs-humans"><h2>Judge vs humans</h2>'
            f'<p class="legend">{legend}</p></div>{table}'
            + (f'<div class="grid">{"".join(cards)}</div>' if cards else ""))
