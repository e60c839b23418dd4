"""A session as a conversation, as one HTML page (``tracescore show --session KEY --html``):
the session's state and scores, then each turn — question, answer, its scores — with the
marks the session scores put on it. Takes :func:`~tracescore.reports.conversation.session_view`
data; every piece of user text is escaped; no I/O."""

from __future__ import annotations

from html import escape
from typing import Any

from ..textfmt import num as _num
from ..textfmt import when as _when
from ._page import _document

__all__ = ["render_session_html"]


def _score_row(s: dict[str, Any]) -> str:
    value = _num(s["value"]) if s["status"] == "ok" else escape(str(s["status"]))
    note = s.get("explanation") if s["status"] == "ok" else s.get("error")
    return (f'<tr data-score="{escape(s["name"])}"><td>{escape(s["name"])}</td>'
            f'<td class="num">{value}</td><td>{escape(s.get("label") or "")}</td>'
            f'<td>{escape(str(note or ""))}</td></tr>')


def _turn(i: int, t: dict[str, Any], marks: list[str]) -> str:
    answer = t.get("answer")
    if t.get("error"):
        answer = f"(error: {t['error']})"
    elif t.get("complete", 1) == 0:
        answer = (answer or "") + " (cut off: the client stopped reading)"
    scores = ", ".join(
        f"{escape(s['name'])} {_num(s['value']) if s['status'] == 'ok' else escape(s['status'])}"
        for s in t["scores"])
    flagged = "".join(f'<p class="warn" data-mark="{i}">{escape(m)}</p>' for m in marks)
    return (f'<section class="card" id="turn-{i}" data-turn="{i}"><h3>turn {i} '
            f'<span class="meta">{escape(_when(t.get("created_at")))} · trace '
            f'<span class="mono">{escape(t["trace_id"])}</span></span></h3>'
            f'<p><b>user</b> {escape(t.get("query") or "-")}</p>'
            f'<p><b>assistant</b> {escape(answer or "-")}</p>'
            + (f'<p class="meta">scores: {scores}</p>' if scores else "") + flagged
            + "</section>")


def render_session_html(view: dict[str, Any]) -> str:
    """The page of one session (``view``: :func:`..conversation.session_view`)."""
    st = view.get("state") or {}
    turns = view["turns"]
    head = (f'<header><h1>session <span class="mono">{escape(view["session_id"])}</span></h1>'
            f'<p class="meta">{escape(str(st.get("status") or "unknown"))} · {len(turns)} turns'
            + (f" · scored {st['closes']} time(s), last at {escape(_when(st.get('closed_at')))}"
               if st.get("closes") else "") + "</p>"
            + ('<p class="warn">re-opened by a later turn: the session scores below are from '
               "the last close and will be replaced</p>"
               if st.get("status") == "open" and st.get("closes") else "") + "</header>")
    scores = view["scores"]
    table = ('<section class="card" id="session-scores"><h2>session scores</h2>'
             + ("<table><thead><tr><th>score</th><th class=\"num\">value</th><th>label</th>"
                "<th>explanation</th></tr></thead><tbody>"
                + "".join(_score_row(s) for s in scores) + "</tbody></table>" if scores
                else '<p class="meta">none yet (the session has not closed)</p>')
             + "</section>")
    body = [head, table, *(_turn(i, t, view["marks"].get(i, []))
                           for i, t in enumerate(turns, 1))]
    return _document(f"tracescore session {view['session_id']}", body)
