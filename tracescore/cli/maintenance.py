"""The store-keeping commands: ``prune`` (retention now) and ``copy-to-postgres`` (moving
a single host's history into a fleet's database)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._options import DEFAULT_DB, DatabaseProblem, _db_option, _name, _open
from .commands import main


@main.command(short_help="Delete old records (keeping hourly rollups) and give space back.")
@_db_option(DEFAULT_DB, "Database to prune (written to): a SQLite file or a postgresql:// "
                        "URL.", demo_fallback=True)
@click.option("--older-than", "older_than", metavar="AGE", default="30d", show_default=True,
              help="Delete records older than this (at least 1d): 30d, 2w, 36h; 'none' for no "
                   "age limit (with --max-size).")
@click.option("--max-size", "max_size", metavar="SIZE", default=None,
              help="Also delete the oldest records while the database uses more than this: "
                   "500MB, 10GB, 2GiB (SQLite only).")
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Records per transaction (the write lock is held for one batch).")
@click.option("--vacuum", is_flag=True,
              help="Then rewrite the whole file once (VACUUM) and switch it to incremental "
                   "auto-vacuum: for databases created before tracescore stored compact rows. "
                   "Blocks writers while it runs and needs free disk of the database's size; "
                   "stop the app first. Not needed on PostgreSQL (autovacuum).")
@click.option("--dry-run", is_flag=True,
              help="Only count what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def prune(db: Path | str, older_than: str, max_size: str | None, batch_size: int, vacuum: bool,
          dry_run: bool, as_json: bool) -> None:
    """Apply a retention policy now: delete records older than AGE (and, with --max-size,
    the oldest records beyond the size), with their scores, finished jobs and judge-call log
    rows, plus judge-cache entries and feedback older than AGE that nothing references.

    Safe while an app writes and a worker scores: small batches, one transaction each. The
    hourly rollups the store keeps as it writes already count every record and score, so
    `tracescore report --since 90d`, `compare` and the monitors give the same answers after
    pruning. A record with an open scoring job or a score not yet exported
    is kept. A running app with init(retention=...) does the same in the background.

    On PostgreSQL several pruners (this command, every `tracescore worker`) may run at once:
    each batch locks its records and the others skip them. --max-size is SQLite only (a
    PostgreSQL database does not shrink when rows are deleted).
    """
    from ..store import is_postgres, open_store
    from ..store.retention import PG_NO_MAX_BYTES, Retention, count_eligible, parse_age, parse_size
    from ..store.retention import prune as run_prune

    _open(db).close()  # a clear message for a missing or foreign file
    pg = is_postgres(db)
    try:
        age = None if older_than.strip().lower() == "none" else parse_age(older_than)
        size = None if max_size is None else parse_size(max_size)
        if pg and size is not None:
            raise ValueError(f"--max-size: {PG_NO_MAX_BYTES}")
        # (a prune asked for by hand gives back all the space it frees; the app's background
        # pruner spends at most vacuum_budget_s a run on it)
        policy = Retention(max_age_s=age, max_bytes=size, batch_size=batch_size,
                           vacuum_budget_s=None)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    store = open_store(db)
    try:
        if dry_run:
            import time

            cutoff = time.time() - (age if age is not None else 0.0)
            eligible, older = count_eligible(store, cutoff) if age is not None else (0, 0)
            out = {"would_delete_records": eligible, "held": older - eligible,
                   "used_bytes": store.used_bytes()[0]}
            click.echo(json.dumps(out) if as_json else
                       f"would delete {eligible} records older than {older_than}; "
                       f"{older - eligible} older ones are kept (open jobs or undelivered "
                       "scores)")
            return
        result = run_prune(store, policy)
        if vacuum and pg:
            click.echo("note: --vacuum is not needed on PostgreSQL: autovacuum makes the space "
                       "of deleted rows reusable (nothing done)", err=True)
        elif vacuum:
            store.vacuum_full()
            result.used_bytes_after, result.file_bytes_after = store.used_bytes()
        mode = store.auto_vacuum_mode()
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({**result.as_dict(), "auto_vacuum": mode}))
        return
    click.echo(f"deleted {result.records} records ({result.by_size} for the size limit), "
               f"{result.scores} scores, {result.jobs} jobs, {result.judge_calls} judge calls, "
               f"{result.judge_cache} judge-cache entries, {result.feedback} feedback rows "
               f"in {result.batches} batches ({result.seconds:.1f} s)")
    if result.held:
        click.echo(f"kept {result.held} older records with open jobs or undelivered scores")
    click.echo(f"database: {result.used_bytes_before / 1e6:,.1f} MB used before, "
               f"{result.used_bytes_after / 1e6:,.1f} MB after; file "
               f"{result.file_bytes_after / 1e6:,.1f} MB (auto_vacuum {mode})")
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if mode not in ("incremental", "autovacuum") and not vacuum:
        click.echo("note: this database predates incremental vacuum: freed pages are reused "
                   "for new rows but the file does not shrink; run once with --vacuum while "
                   "the app is stopped", err=True)


@main.command("copy-to-postgres",
              short_help="Copy a SQLite database's history into PostgreSQL (moving up).")
@_db_option(DEFAULT_DB, "The SQLite file to copy (read only).", envvar=None)
@click.option("--to", "to", metavar="URL", required=True, envvar="TRACESCORE_DB",
              help="The PostgreSQL database (postgresql://...; created tables if needed).")
@click.option("--force", is_flag=True,
              help="Copy a file that was already copied into this database again.")
def copy_to_postgres(db: Path | str, to: str, force: bool) -> None:
    """Copy records, jobs, scores, feedback, counters, declared metrics and the judge and
    embedding caches from a SQLite file into PostgreSQL, in one transaction, so a team that
    starts on one host keeps its history when it moves to a fleet. Open jobs arrive pending
    (the fleet's workers score them). Rows already in the target are kept.
    """
    from ..store.copy import AlreadyCopied, copy_sqlite_to_postgres

    if not isinstance(db, Path):
        raise click.BadParameter("--db is the SQLite file to copy from", param_hint="--db")
    if not db.exists():
        raise DatabaseProblem(f"database not found: {db}")
    if not to.startswith(("postgresql://", "postgres://")):
        raise click.BadParameter("a postgresql:// URL", param_hint="--to")
    try:
        counts = copy_sqlite_to_postgres(db, to, force=force)
    except AlreadyCopied as exc:
        raise DatabaseProblem(str(exc)) from None
    except (ImportError, RuntimeError) as exc:
        raise DatabaseProblem(str(exc)) from None
    except Exception as exc:  # psycopg.Error, sqlite3.Error: name the cause, no traceback
        raise DatabaseProblem(f"copy failed, nothing was written: {exc}") from None
    summary = ", ".join(f"{n:,} {t}" for t, n in counts.items() if n)
    click.echo(f"Copied {db} into {_name(to)}: {summary or 'nothing to copy'}")
