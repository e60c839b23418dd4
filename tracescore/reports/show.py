"""``tracescore show``: one record (or a trace's records) in full — query, contexts, answer,
every score with its explanation, its unscored jobs (with why they wait) and the users'
feedback on its trace (``ts.add_feedback``). Reads raw rows by primary key (a trace's
records and a trace-id prefix are ranges of it on SQLite: :func:`..store.compat.trace_records`)
or, on PostgreSQL, by the trace id index. Blocking I/O. The human output shows control
characters in captured text as visible escapes (:func:`.textfmt.printable`); the JSON output
is left to JSON."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import Any

from .agent_view import agent_steps
from .textfmt import WIDTH, printable
from .textfmt import num as _num
from .textfmt import table as _table
from .textfmt import when as _when

__all__ = ["format_records"]


# -- show ------------------------------------------------------------------------------------
def _wrap(text: str, indent: str, width: int) -> list[str]:
    # Escaped before wrapping: a lone \r, \v or \f is shown, not folded into a line break.
    text = printable((text or "").replace("\r\n", "\n"), keep="\n\t")
    lines: list[str] = []
    for para in text.splitlines() or [""]:
        lines += textwrap.wrap(para, width=width, initial_indent=indent,
                               subsequent_indent=indent) or [indent.rstrip()]
    return lines


def _field(label: str, value: Any, width: int) -> list[str]:
    text = "-" if value is None or value == "" else str(value)
    body = _wrap(text, " " * 15, width)
    body[0] = f"{label:<15}" + body[0][15:]
    return body


def format_records(recs: Sequence[dict[str, Any]], width: int = WIDTH,
                   context_chars: int = 300) -> str:
    """The human ``show`` output for records from :func:`record_details`."""
    out: list[str] = []
    for rec in recs:
        if out:
            out += ["", "=" * min(width, 60), ""]
        usage = "-"
        if rec.get("input_tokens") is not None or rec.get("output_tokens") is not None:
            usage = f"{rec.get('input_tokens') or 0} in / {rec.get('output_tokens') or 0} out"
        latency = rec.get("latency_ms")
        if rec["sampled"]:
            sampling = f"sampled (u={rec.get('sample_u') or 0:.4f})"
            if rec.get("forced"):
                sampling += f", forced: {rec['forced']}"
            metrics = rec["sampled_metrics"]
            if isinstance(metrics, list) and metrics:
                sampling += "; metrics: " + ", ".join(map(str, metrics))
        else:
            sampling = f"not sampled (u={rec.get('sample_u') or 0:.4f})"
        out += [f"record {rec['record_id']}", ""]
        out += _field("trace", rec["trace_id"], width)
        out += _field("created", _when(rec.get("created_at")), width)
        out += _field("source", rec.get("source"), width)
        out += _field("latency", None if latency is None else f"{latency:.1f} ms", width)
        out += _field("tokens", usage, width)
        out += _field("model", rec.get("model"), width)
        out += _field("error", rec.get("error"), width)
        if rec.get("complete", 1) == 0:  # schema v5: a stream the client cut off
            out += _field("answer", "incomplete: the client stopped reading the stream "
                          "(answer-based metrics skipped)", width)
        out += _field("sampling", sampling, width)
        for key in ("session_id", "user_id"):
            if rec.get(key):
                out += _field(key.replace("_id", ""), rec[key], width)
        if rec.get("tags"):
            out += _field("tags", ", ".join(map(str, rec["tags"])), width)
        if rec.get("metadata"):
            out += _field("metadata", json.dumps(rec["metadata"], ensure_ascii=False), width)
        if not rec["content_captured"]:
            out += _field("content", "not captured (content capture was off)", width)
        compact = rec.get("text_kept") == 0
        if compact:
            note = ("stored compact: text not kept (the record was not sampled; "
                    "keep_full_text=False or its window passed)")
            if rec["jobs"] or rec["scores"]:
                note += "; scoring was asked for later (feedback or a reference) and skipped"
            out += _field("content", note, width)
        out += [""]
        if compact:
            for key in ("query", "answer"):
                chars, digest = rec.get(f"{key}_chars"), rec.get(f"{key}_hash")
                out += _field(key, "-" if chars is None else
                              f"(not kept: {chars} chars, hash {digest})", width)
        else:
            out += _field("query", rec.get("query"), width)
            out += _field("answer", rec.get("answer"), width)
        gts = rec["ground_truths"] if isinstance(rec["ground_truths"], list) else []
        if not gts:
            out += _field("ground truth", None, width)
        for i, g in enumerate(gts):
            out += _field("ground truth" if i == 0 else "", g, width)

        ctxs = rec["contexts"] if isinstance(rec["contexts"], list) else []
        out += ["", f"contexts ({len(ctxs)})"]
        for i, c in enumerate(ctxs):
            head = [f"[{i}]"]
            if c.get("source"):
                head.append(f"from {c['source']}")
            if c.get("id") is not None:
                head.append(f"id={c['id']}")
            if c.get("score") is not None:
                head.append(f"score={c['score']:.4g}" if isinstance(c["score"], (int, float))
                            else f"score={c['score']}")
            if compact:
                head.append(f"(text not kept: {c.get('chars')} chars, hash {c.get('hash')})")
            out.append("  " + "  ".join(head))
            text = c.get("text") or ""
            if len(text) > context_chars:
                text = text[:context_chars].rstrip() + f"… ({len(c['text'])} chars)"
            out += _wrap(text, "      ", width)
        out += _candidates(rec.get("candidates"), width)
        out += agent_steps(rec.get("agent"), rec["scores"], width)

        scores = rec["scores"]
        out += ["", f"scores ({len(scores)})"]
        if scores:
            rows = []
            for s in scores:
                value = _num(s["value"]) if s["status"] == "ok" else s["status"]
                dur = "-" if s["duration_ms"] is None else f"{s['duration_ms']:.1f} ms"
                rows.append([s["name"], value, s["label"] or "-", dur])
            table = _table(["score", "value", "label", "duration"], rows, "<><>")
            out += ["  " + line for line in table[:2]]
            for line, s in zip(table[2:], scores):
                out.append("  " + line)
                note = s["error"] if s["status"] != "ok" else s["explanation"]
                if note:
                    out += _wrap(note if len(note) <= 600 else note[:600] + "…",
                                 "      ", width)
        for j in rec["jobs"]:
            reason = f": {j['reason']}" if j.get("reason") else ""
            out += _wrap(f"{j['metric']}: {j['status']}{reason}", "  ", width)
        out += _feedback(rec.get("feedback") or [], width)
    return printable("\n".join(out), keep="\n")


def _candidates(cands: Any, width: int) -> list[str]:
    """Schema v5: the retrieved candidates that did not reach the model, with the step that
    dropped them (the kept ones are the contexts above)."""
    if not isinstance(cands, list) or not cands:
        return []
    dropped = [c for c in cands if isinstance(c, dict) and not c.get("kept", True)]
    out = ["", f"candidates ({len(cands)} retrieved, {len(dropped)} did not reach the model)"]
    for c in dropped:
        text = str(c.get("text") or "")
        text = text if len(text) <= 120 else text[:120].rstrip() + "…"
        out += _wrap(f"- from {c.get('source')}, dropped by {c.get('dropped_by')}: {text}",
                     "  ", width)
    return out


def _feedback(entries: Sequence[dict[str, Any]], width: int) -> list[str]:
    """The trace's feedback: name, value, label, when, then the comment."""
    if not entries:
        return []
    out = ["", f"feedback on the trace ({len(entries)})"]
    rows = [[str(f["name"]), _num(f["value"], 2), f["label"] or "-", _when(f["created_at"])]
            for f in entries]
    table = _table(["feedback", "value", "label", "at"], rows, "<><<")
    out += ["  " + line for line in table[:2]]
    for line, f in zip(table[2:], entries):
        out.append("  " + line)
        if f.get("comment"):
            note = f["comment"]
            out += _wrap(note if len(note) <= 600 else note[:600] + "…", "      ", width)
    return out
