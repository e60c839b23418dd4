"""The ``tracescore`` command line: ``demo``, ``report``, ``show``.

Exit codes: 0 ok; 1 nothing found (``show``); 2 bad usage, or a database that is missing or
not a tracescore database.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from .demo import DEFAULT_DB as DEMO_DB

DEFAULT_DB = "tracescore.db"

F = TypeVar("F", bound=Callable[..., Any])


class DatabaseProblem(click.ClickException):
    """A missing or unreadable database: exit code 2, like other usage errors."""

    exit_code = 2


def _open(db: Path) -> Any:
    from .report import DatabaseError, open_db

    try:
        return open_db(db)
    except DatabaseError as exc:
        hint = ""
        if not db.exists():
            hint = (f"\nPass --db PATH (or set TRACESCORE_DB); `tracescore demo` writes "
                    f"{DEMO_DB}.")
        raise DatabaseProblem(f"{exc}{hint}") from None


def _db_option(default: str, help_text: str,
               envvar: str | None = "TRACESCORE_DB") -> Callable[[F], F]:
    return click.option(
        "--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=default,
        envvar=envvar, show_default=True, show_envvar=envvar is not None, help=help_text,
    )


def _since(ctx: click.Context, param: click.Parameter, value: str) -> float | None:
    from .report import parse_since

    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracescore")
def main() -> None:
    """tracescore: score the quality of a RAG app's runs, from a SQLite database.

    Start with `tracescore demo`, then `tracescore report` and `tracescore show TRACE_ID`.
    """


@main.command(short_help="Run the offline example RAG app through tracescore.")
@_db_option(DEMO_DB, "SQLite database to write (appended to if it exists).", envvar=None)
@click.option("--n", "n", type=click.IntRange(min=1), default=None,
              help="Number of questions to ask (default: all bundled questions; cycles when "
                   "larger).")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True,
              help="Share of runs to score (deterministic per trace id).")
@click.option("--worst", type=click.IntRange(min=0), default=1, show_default=True,
              help="Worst records to list per score in the report printed at the end.")
def demo(db: Path, n: int | None, sample_rate: float, worst: int) -> None:
    """Run the bundled offline RAG app through tracescore and print the report.

    A LangChain chain (BM25 retriever over a small bike-shop handbook, an extractive
    stand-in for the LLM) answers the bundled questions; tracescore captures each run,
    attaches the reference answer as ground truth, scores it with the default local metrics
    and stores everything in the database. Fully offline; takes a few seconds.
    """
    from .demo import DemoSetupError, run_demo
    from .report import build_report, format_report

    def progress(items: Iterator[Any], count: int) -> Any:
        return click.progressbar(items, length=count, label=f"Asking {count} questions",
                                 file=sys.stderr, show_pos=True)

    db_existed = db.exists()
    try:
        result = run_demo(db, n, sample_rate, progress=progress)
    except DemoSetupError as exc:
        raise DatabaseProblem(str(exc)) from None
    where = Path(result.db).resolve()
    click.echo(
        f"Ran {result.questions} questions in {result.run_seconds:.2f} s, scored them in "
        f"{result.score_seconds:.2f} s; {'appended to' if db_existed else 'wrote'} {where}"
    )
    if not result.complete:
        click.echo("Warning: scoring did not finish in time; the report shows what is done.",
                   err=True)
    conn = _open(Path(result.db))
    try:
        report = build_report(conn, worst=worst, db=str(result.db))
    finally:
        conn.close()
    click.echo("")
    click.echo(format_report(report))
    opt = f"--db {shlex.quote(str(db))}"
    click.echo(f"\nNext: tracescore report {opt}\n      tracescore show {result.trace_ids[0][:12]} {opt}")


@main.command(short_help="Summarise the scores: per metric, worst records, totals.")
@_db_option(DEFAULT_DB, "SQLite database to read.")
@click.option("--since", metavar="DURATION", default="all", show_default=True, callback=_since,
              help="Only records and scores from this recent window: 30m, 1h, 2d, 1w, or all.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of the table.")
@click.option("--worst", type=click.IntRange(min=0), default=3, show_default=True,
              help="How many worst records to list per score (0: none).")
def report(db: Path, since: float | None, as_json: bool, worst: int) -> None:
    """Summarise the scores: per score count, mean, p10/p50/p90, fail rate, errors, skips.

    Also lists the worst records of each score (lowest values; highest for metrics where
    lower is better) and totals: records, sampled, dropped, pending scoring jobs.
    """
    from .report import build_report, format_report

    conn = _open(db)
    try:
        rep = build_report(conn, since=since, worst=worst, db=str(db))
    finally:
        conn.close()
    if as_json:
        click.echo(json.dumps(rep.to_json(), ensure_ascii=False))
    else:
        click.echo(format_report(rep))


@main.command(short_help="Show one trace: query, contexts, answer and every score.")
@click.argument("trace_id")
@_db_option(DEFAULT_DB, "SQLite database to read.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the record(s) as one JSON object.")
@click.option("--chars", type=click.IntRange(min=0), default=300, show_default=True,
              help="Characters of each context to print.")
def show(trace_id: str, db: Path, as_json: bool, chars: int) -> None:
    """Show the record(s) of one trace with contexts, answer and every score.

    TRACE_ID is a trace id, a unique prefix of one, or a record id (TRACE-SPAN).
    Exits with code 1 when nothing matches.
    """
    from .report import find_records, format_records, record_details

    conn = _open(db)
    try:
        rows, candidates = find_records(conn, trace_id)
        recs = [record_details(conn, r) for r in rows]
    finally:
        conn.close()
    if not recs:
        if candidates:
            more = "" if len(candidates) <= 10 else ", …"
            raise click.ClickException(
                f"{trace_id!r} matches several traces in {db}: "
                f"{', '.join(candidates[:10])}{more}; give more characters"
            )
        raise click.ClickException(f"no record with trace or record id {trace_id!r} in {db}")
    if as_json:
        click.echo(json.dumps({"records": recs}, ensure_ascii=False))
    else:
        click.echo(format_records(recs, context_chars=chars))


if __name__ == "__main__":
    main()
