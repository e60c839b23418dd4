"""``tracescore show --session KEY``: a session as a conversation — each turn's question and
answer with its scores, the marks the session metrics put on turns (a repeated question, an
unanswered turn, a turn failing a score, the worst turn), then the session's own scores.
Query, then render: :func:`session_view` reads through :mod:`tracescore.read.records` (any
reader connection that takes ``?`` SQL), :func:`format_session` renders plain data. Blocking I/O in the first only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..read import records as R
from .show import _wrap
from .textfmt import WIDTH, printable
from .textfmt import num as _num
from .textfmt import when as _when

__all__ = ["format_session", "session_view"]

SESSION_SOURCE = "session"  # (records.source of a session's own record: store.sessions)


def session_view(conn: Any, key: str) -> dict[str, Any] | None:
    """The session ``key`` as plain data: its state, its turns (record details, oldest
    first), its own record with the session scores, and the marks per turn. None when no
    record has this session key."""
    rows = R.session_records(conn, key)
    if not rows:
        return None
    turns = [R.record_details(conn, r) for r in rows if r.get("source") != SESSION_SOURCE]
    own = [R.record_details(conn, r) for r in rows if r.get("source") == SESSION_SOURCE]
    state = R.session_state(conn, key)
    session_scores = own[0]["scores"] if own else []
    if own:
        details = R.score_details(conn, own[0]["record_id"])
        for sc in session_scores:
            sc["details"] = details.get(sc["name"], {})
    return {"session_id": key, "state": state, "turns": turns,
            "session_record": own[0]["record_id"] if own else None,
            "scores": session_scores, "marks": _marks(session_scores, len(turns))}


def _marks(scores: Sequence[dict[str, Any]], n: int) -> dict[int, list[str]]:
    """Turn number (1-based) → what the session metrics say of it."""
    marks: dict[int, list[str]] = {}

    def add(turn: Any, text: str) -> None:
        if isinstance(turn, int) and 1 <= turn <= n:
            marks.setdefault(turn, []).append(text)

    for s in scores:
        details = s.get("details") or {}
        name = s["name"]
        if name == "session.repeated_questions":
            for r in details.get("repeats", []):
                add(r.get("turn"), f"repeats the question of turn {r.get('repeats_turn')}"
                                   f" ({r.get('how')})")
        elif name == "session.unanswered_turns":
            for r in details.get("turns", []):
                add(r.get("turn"), f"unanswered: {r.get('why')}")
        elif name.endswith(".passing"):
            for t in details.get("failing_turns", []):
                add(t, f"fails {name[len('session.'):-len('.passing')]}")
        elif name.endswith(".worst") and s["status"] == "ok":
            add(details.get("turn"), f"worst {name[len('session.'):-len('.worst')]} of the "
                                     f"session ({_num(s['value'])})")
    return marks


def format_session(view: dict[str, Any], width: int = WIDTH) -> str:
    """The human output of :func:`session_view`."""
    turns = view["turns"]
    st = view["state"] or {}
    status = st.get("status") or "unknown"
    head = f"session {view['session_id']}  ({status}; {len(turns)} turns"
    if st.get("closes"):
        head += f"; scored {st['closes']} time(s), last at {_when(st.get('closed_at'))}"
    out = [head + ")"]
    if status == "open" and st.get("closes"):
        out.append("  re-opened by a later turn: the session scores below are from the "
                   "last close and will be replaced")
    if turns:
        first, last = turns[0], turns[-1]
        out.append(f"  {_when(first.get('created_at'))} → {_when(last.get('created_at'))}"
                   + (f"; release {last['release']}" if last.get("release") else "")
                   + (f"; user {last['user_id']}" if last.get("user_id") else ""))
    for i, t in enumerate(turns, 1):
        out += ["", f"turn {i}  {_when(t.get('created_at'))}  trace {t['trace_id']}"]
        out += _said("user", t.get("query"), width)
        answer = t.get("answer")
        if t.get("error"):
            answer = f"(error: {t['error']})"
        elif t.get("complete", 1) == 0:
            answer = (answer or "") + " (cut off: the client stopped reading)"
        out += _said("assistant", answer, width)
        ok = [f"{s['name']} {_num(s['value'])}" + (f" {s['label']}" if s.get("label") else "")
              for s in t["scores"] if s["status"] == "ok"]
        bad = [f"{s['name']} {s['status']}" for s in t["scores"] if s["status"] != "ok"]
        if ok or bad:
            out += _wrap("scores: " + ", ".join(ok + bad), "  ", width)
        for mark in view["marks"].get(i, []):
            out += _wrap("! " + mark, "  ", width)
    scores = view["scores"]
    out += ["", f"session scores ({len(scores)})" + ("" if scores else
                                                     ": none yet (the session has not closed)")]
    for s in scores:
        value = _num(s["value"]) if s["status"] == "ok" else f"{s['status']}: {s.get('error')}"
        out += _wrap(f"{s['name']}  {value}" + (f"  — {s['explanation']}"
                                                if s.get("explanation") else ""), "  ", width)
    return printable("\n".join(out), keep="\n")


def _said(who: str, text: Any, width: int) -> list[str]:
    body = _wrap("-" if text is None or text == "" else str(text), " " * 13, width)
    body[0] = f"  {who:<11}" + body[0][13:]
    return body
