"""The report's cost section: judge calls per model and step (tokens, errors, USD) and the
app's own token usage.

Renders :class:`~tracescore.read.model.Usage` data: no connection, no queries; model and
step names go through :func:`html.escape`.
"""

from __future__ import annotations

from html import escape

from ...read.model import Usage
from ._page import _stat


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
