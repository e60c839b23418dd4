"""The report's worst records: one card per record that is among the worst of some score,
with every score, the explanations, the answer, the ground truth and the contexts.

Everything in a card is user text captured from the app and goes through
:func:`html.escape`. Renders the records the query side put in the
:class:`~tracescore.read.model.ReportPage`: no connection, no queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ...read.model import MetricSummary, ReportPage
from ..textfmt import when as _when
from ._agent import agent_html
from ._page import _tone, _val


def _rec_anchor(record_id: str) -> str:
    return "rec-" + escape(record_id)


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
        f"{ctx_html}{agent_html(rec.get('agent'), rec['scores'])}{scores_html}</article>"
    )
