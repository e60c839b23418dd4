"""Export records joined with their scores as JSON Lines or CSV, streaming.

One row per (record, score name). A record with no score (not sampled, still pending, every
metric skipped, or none of the ``metrics`` asked for) gets one row with empty score fields,
so every record of the window appears at least once; ``scored_only`` drops those rows.

Each row carries the record's ground truths and retrieved contexts (as stored: a list of
``{text, id, score, metadata, source}``), repeated on every score row of the record;
``contexts=False`` leaves the contexts column out, which keeps a large export small.

Rows come from one SQLite cursor and are written as they are read: memory stays flat however
large the database. The read is one SELECT (so one consistent snapshot) on a read-only
connection from :func:`tracescore.read.db.open_db`; writers carry on meanwhile (WAL mode).
Everything here blocks on SQLite and on the output stream.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

__all__ = ["COLUMNS", "FORMATS", "FORMULA_STARTS", "columns", "iter_rows", "write_csv",
           "write_jsonl"]

#: Output columns, in order: the record's, then the score's (prefixed ``score_``). The
#: record's segment (``release``, ``environment``, and ``segments``: the declared metadata keys
#: as an object, ``{"route": "search"}``) and the score's ``score_judge_model`` are the values
#: ``report --by`` / ``compare --by`` split on, so every split's numbers can be recomputed.
COLUMNS: tuple[str, ...] = (
    "record_id", "trace_id", "span_id", "created_at", "query", "answer", "ground_truths",
    "n_contexts", "contexts", "latency_ms", "input_tokens", "output_tokens", "model", "error",
    "sampled", "release", "environment", "segments",
    "score_name", "score_metric", "score_value", "score_label", "score_explanation",
    "score_status", "score_error", "score_metric_version", "score_judge_model",
    "score_duration_ms", "score_created_at",
)

FORMATS = ("jsonl", "csv")


def columns(*, contexts: bool = True) -> tuple[str, ...]:
    """The columns of an export, without ``contexts`` when ``contexts`` is False."""
    return COLUMNS if contexts else tuple(c for c in COLUMNS if c != "contexts")


_SELECT = (
    "SELECT r.record_id, r.trace_id, r.span_id, r.created_at, r.query, r.answer,"
    " r.ground_truths, r.n_contexts, {contexts}, r.latency_ms, r.input_tokens,"
    " r.output_tokens, r.model, r.error, r.sampled, {segment},"
    " s.name, s.metric, s.value, s.label, s.explanation, s.status, s.error,"
    " s.metric_version, s.judge_model, s.duration_ms, s.created_at"
    " FROM records r {join} JOIN scores s ON s.rec = r.seq{metric_filter}"
    "{segments} WHERE r.created_at >= ?"
    # created_at first so the records(created_at) index drives the scan: SQLite then only
    # sorts each record's few scores, never the whole result.
    " ORDER BY r.created_at, r.record_id, s.name"
)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _decoded(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # keep what is there rather than fail the export


def iter_rows(conn: sqlite3.Connection, *, since: float | None = None,
              metrics: Sequence[str] = (), scored_only: bool = False,
              contexts: bool = True) -> Iterator[dict[str, Any]]:
    """Yield one dict per (record, score) with the keys of :func:`columns`, oldest first.

    ``since`` filters on ``records.created_at`` (unix seconds); ``metrics`` keeps only these
    score names; ``contexts=False`` leaves the contexts out (not even read). Times are ISO
    8601 UTC strings; ``sampled`` is a bool; ``ground_truths`` and ``contexts`` are lists;
    missing values None.
    """
    args: list[Any] = []
    metric_filter = ""
    if metrics:
        names = list(dict.fromkeys(metrics))
        metric_filter = " AND s.name IN (" + ",".join("?" * len(names)) + ")"
        args += names
    args.append(since if since is not None else -math.inf)
    from ..store.compat import has_table

    # a database from before segments (schema < 3) has no segments table: those columns null
    seg = has_table(conn, "segments")
    # CROSS JOIN is SQLite's way to keep records the outer loop (see _SELECT's ORDER BY).
    sql = _SELECT.format(join="CROSS" if scored_only else "LEFT", metric_filter=metric_filter,
                         contexts="r.contexts" if contexts else "NULL",
                         segment="g.release, g.environment, g.meta" if seg
                         else "NULL, NULL, NULL",
                         segments=" LEFT JOIN segments g ON g.seg_id = r.seg_id" if seg else "")
    for row in conn.execute(sql, args):
        out = dict(zip(COLUMNS, row))
        meta = _decoded(out["segments"])
        out["segments"] = (None if meta is None and out["release"] is None
                           and out["environment"] is None
                           else dict(meta) if isinstance(meta, dict) else {})
        out["ground_truths"] = _decoded(out["ground_truths"])
        if contexts:
            out["contexts"] = _decoded(out["contexts"])
        else:
            del out["contexts"]
        out["created_at"] = _iso(out["created_at"])
        out["score_created_at"] = _iso(out["score_created_at"])
        out["sampled"] = None if out["sampled"] is None else bool(out["sampled"])
        yield out


def _json_value(v: Any) -> Any:
    # SQLite can hold inf; JSON cannot.
    return None if isinstance(v, float) and not math.isfinite(v) else v


def write_jsonl(rows: Iterator[dict[str, Any]], out: TextIO) -> int:
    """One JSON object per line (UTF-8, not ASCII-escaped); returns the number of rows."""
    n = 0
    for row in rows:
        out.write(json.dumps({k: _json_value(v) for k, v in row.items()}, ensure_ascii=False))
        out.write("\n")
        n += 1
    return n


#: A text cell starting with one of these is run as a formula by spreadsheets (CSV
#: injection: ``=HYPERLINK(...)``, ``@SUM(...)``, a DDE call); OWASP's list.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_value(v: Any, neutralise: bool = True) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):  # ground truths, contexts: JSON text in one field
        return json.dumps(v, ensure_ascii=False)
    if neutralise and isinstance(v, str) and v.startswith(FORMULA_STARTS):
        return "'" + v  # numbers are written as numbers: only captured text is touched
    return v


def write_csv(rows: Iterator[dict[str, Any]], out: TextIO,
              header: Sequence[str] = COLUMNS, *, neutralise_formulas: bool = True) -> int:
    """RFC 4180 CSV with a header row (fields with commas, quotes or newlines are quoted).

    ``header``: the columns, as :func:`columns` gives them. Missing values are empty
    fields; ``sampled`` is ``true``/``false``; lists (ground truths, contexts) are JSON
    text. A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
    gets a leading ``'`` (OWASP's rule against CSV injection: a spreadsheet shows it as text
    rather than running it) unless ``neutralise_formulas`` is False; numeric cells are never
    changed. Open ``out`` with ``newline=""`` so the CRLF row endings stay as written.
    Returns the number of rows.
    """
    writer = csv.writer(out)
    writer.writerow(header)
    n = 0
    for row in rows:
        writer.writerow([_csv_value(row[c], neutralise_formulas) for c in header])
        n += 1
    return n
