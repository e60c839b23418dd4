"""``tracescore export`` (records joined with their scores as JSON Lines or CSV) and
``tracescore ui`` (the database in Datasette): the database's rows, out.

Registered on the ``tracescore`` group when looked up (:data:`.commands.LAZY_COMMANDS`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ._options import (
    DEFAULT_DB,
    DatabaseProblem,
    _db_option,
    _name,
    _open,
    _output,
    _quiet_stdout,
    _since,
)
from .commands import main


@main.command(short_help="Export records joined with their scores as JSON Lines or CSV.")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), required=True,
              help="jsonl: one JSON object per line; csv: RFC 4180 with a header row.")
@click.option("--since", metavar="DURATION", default="all", show_default=True, callback=_since,
              help="Only records created in this recent window: 30m, 1h, 2d, 1w, or all.")
@click.option("--metric", "metrics", metavar="NAME", multiple=True,
              help="Only scores with this name (repeatable), e.g. --metric token_f1 "
                   "--metric rouge_l.")
@click.option("--scored-only", is_flag=True,
              help="Leave out records that have no (matching) score, instead of one row "
                   "with empty score fields.")
@click.option("--no-contexts", "no_contexts", is_flag=True,
              help="Leave out the contexts column (every retrieved text, repeated on each "
                   "score row of a record): a much smaller file.")
@click.option("--output", "-o", "output", metavar="FILE", default="-", show_default=True,
              type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
              help="File to write (replaced when complete; a new file is private, 0600); - "
                   "for stdout.")
@click.option("--raw-csv", "raw_csv", is_flag=True,
              help="CSV: write text cells exactly as stored. By default a cell starting with "
                   "=, +, -, @, a tab or a carriage return gets a leading ' so that a "
                   "spreadsheet shows it as text instead of running it as a formula, and "
                   "control characters (but newlines and tabs) are shown as visible escapes "
                   "(\\x1b), as label --export does.")
def export(db: Path, fmt: str, since: float | None, metrics: tuple[str, ...],
           scored_only: bool, no_contexts: bool, output: Path, raw_csv: bool) -> None:
    """Export records joined with their scores: one row per record and score name.

    Record fields (record_id, trace_id, span_id, created_at as ISO 8601 UTC, query,
    answer, ground_truths, n_contexts, contexts (unless --no-contexts), latency_ms,
    input_tokens, output_tokens, model, error, sampled, release, environment, segments:
    the declared metadata keys), then score fields (score_name, score_value, score_label,
    score_explanation, score_status, score_error, score_judge_model, ...). A record without a score gets one row with empty
    score fields unless --scored-only. Rows are streamed, oldest record first, so the
    database can be larger than memory. CSV text cells that a spreadsheet would run as a
    formula are prefixed with ', and control characters are escaped (see --raw-csv).
    """
    from ..read.rows import columns, iter_rows, write_csv, write_jsonl

    conn = _open(db)
    try:
        rows = iter_rows(conn, since=since, metrics=metrics, scored_only=scored_only,
                         contexts=not no_contexts)
        with _output(output) as out:
            if fmt == "jsonl":  # JSON escapes control characters itself
                n = write_jsonl(rows, out)
            else:
                if not raw_csv:  # as label --export: controls as visible escapes
                    rows = (_escaped(r) for r in rows)
                n = write_csv(rows, out, columns(contexts=not no_contexts),
                              neutralise_formulas=not raw_csv)
    except BrokenPipeError:  # `tracescore export ... | head`: the reader has all it wants
        _quiet_stdout()
        return
    finally:
        conn.close()
    if str(output) != "-":
        click.echo(f"Wrote {n} rows to {output.resolve()}", err=True)


def _escaped(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row with control characters (line ends and tabs kept) as visible escapes; lists
    as the JSON text write_csv would make of them, escaped too (JSON leaves U+202E as is)."""
    from ..reports.textfmt import printable

    out = {}
    for k, v in row.items():
        if isinstance(v, (list, dict)):
            v = json.dumps(v, ensure_ascii=False)
        if isinstance(v, str):  # (a Windows line end stays one; a lone CR is escaped)
            v = "\r\n".join(printable(part, keep="\n\t") for part in v.split("\r\n"))
        out[k] = v
    return out


@main.command(short_help="Browse the database in Datasette, with canned queries.")
@_db_option(DEFAULT_DB, "SQLite database to serve (read-only).", demo_fallback=True)
@click.option("--port", metavar="PORT", type=click.IntRange(0, 65535), default=8001,
              show_default=True,
              help="Port on 127.0.0.1 to serve on; 0 picks a free one.")
@click.option("--no-open", is_flag=True, help="Do not open a web browser.")
def ui(db: Path, port: int, no_open: bool) -> None:
    """Open the database in Datasette on 127.0.0.1, read-only, with canned queries.

    Queries: worst scores today (for a :metric, default faithfulness, or the database's
    most scored name when it has no faithfulness scores), failure rate by metric per hour,
    records without scores, errors and skips by reason, daily summary.
    Needs the ui extra: pip install 'tracescore[ui]'. Stop with Ctrl-C.
    """
    from ..reports.ui import INSTALL_HINT, datasette_available, default_metric, serve

    if not isinstance(db, Path):
        raise DatabaseProblem(
            f"tracescore ui serves a SQLite file only (Datasette reads SQLite), not "
            f"{_name(db)}. For a PostgreSQL database use `tracescore report --html` or "
            f"`tracescore export`, or any PostgreSQL client.")
    if not datasette_available():
        raise DatabaseProblem(f"Datasette is not installed; {INSTALL_HINT}")
    from ..read.db import has_table
    from ..read.pipeline import has_judge_decisions

    conn = _open(db)  # a clear message for a missing or foreign file, before Datasette starts
    try:
        has_metrics = has_table(conn, "metrics")
        # a database with judge budgets: the canned means say which are of judged records
        has_decisions = has_judge_decisions(conn)
        metric = default_metric(conn)
    finally:
        conn.close()

    def ready(url: str) -> None:
        click.echo(f"Serving {db} read-only at {url} (Ctrl-C to stop)", err=True)
        if not no_open:
            click.launch(url)

    code = serve(db, port=port, has_metrics_table=has_metrics, on_ready=ready, metric=metric,
                 has_judge_decisions=has_decisions)
    if code:
        raise SystemExit(code)
