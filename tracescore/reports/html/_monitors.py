"""The monitors' current states: a badge per state and the monitors' table, shared by the
report page and the trend page.

Monitor names and summaries are user text and go through :func:`html.escape`. Pure
functions over :class:`~tracescore.read.model.MonitorStatus` data: no connection, no
queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ...read.model import MonitorStatus
from ..textfmt import monitor_estimate
from ..textfmt import when as _when
from ._page import _attr

#: Monitor states, worst first (the badge colours are in the CSS: .st-STATE).
STATES = ("ALERT", "WARNING", "NO_DATA", "OK")


def _badge(state: str) -> str:
    known = state if state in STATES else "NO_DATA"
    return (f'<span class="badge st-{known}" data-state="{escape(state)}">'
            f"{escape(state.replace('_', ' '))}</span>")


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
        est = monitor_estimate(m.value, m.lo, m.hi) or "—"
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
