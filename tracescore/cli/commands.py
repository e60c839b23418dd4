"""The ``tracescore`` command line: ``demo``, ``report``, ``calibrate``, ``show``,
``judge-check``, ``worker`` (and, in :mod:`.monitoring`, ``compare``, ``check``, ``monitor``;
in :mod:`.maintenance`, ``prune`` and ``copy-to-postgres``; in :mod:`.label`, ``label``; in
:mod:`.browse`, ``export`` and ``ui``).

Exit codes: 0 ok; 1 nothing found (``show``); 2 bad usage, a database that is missing or
not a tracescore database, an output file that cannot be written, or a missing optional
extra (``ui`` without Datasette).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ._messages import cli_message
from ._options import (
    DEFAULT_DB,
    DEFAULT_WORST,
    DatabaseProblem,
    MissingExtra,
    _db_option,
    _n,
    _name,
    _open,
    _output,
    _since,
    _where_option,
)
from .demo import DEFAULT_DB as DEMO_DB

#: Commands whose module is imported only when one of them runs or the command list is asked
#: for: a read command does not pay for the others' imports (issue 33: start-up CPU).
LAZY_COMMANDS = {"label": "label", "prune": "maintenance", "copy-to-postgres": "maintenance",
                 "compare": "monitoring", "check": "monitoring", "monitor": "monitoring",
                 "serve": "serve", "export": "browse", "ui": "browse"}


class _Group(click.Group):
    """Turns a database that breaks mid-command (corrupt pages) into a clear message, and
    escapes control characters in every error message. Imports a command's module when the
    command is looked up (:data:`LAZY_COMMANDS`)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = LAZY_COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            import importlib

            importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def invoke(self, ctx: click.Context) -> Any:
        import sqlite3

        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # an error may quote what the database holds (a judge's model name, a segment
            # value): no control character reaches the terminal from it
            from ..reports.textfmt import printable

            exc.message = printable(exc.message, keep="\n")
            raise
        except sqlite3.DatabaseError as exc:
            raise DatabaseProblem(
                f"cannot read the database: not a tracescore database or it is corrupt "
                f"({exc}). Restore it from a backup, or point --db at another "
                "file.") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracescore")
def main() -> None:
    """tracescore: score the quality of a RAG app's runs, from a SQLite database.

    Start with `tracescore demo`, then `tracescore report` and `tracescore show TRACE_ID`;
    `tracescore report --html`, `tracescore export` and `tracescore ui` for more.
    """


@main.command(short_help="Run the offline example RAG app through tracescore.")
@_db_option(DEMO_DB, "Database to write (appended to if it exists): a SQLite file or a "
           "postgresql:// URL.", envvar=None)
@click.option("--n", "n", type=click.IntRange(min=1), default=None,
              help="Number of questions to ask (default: all bundled questions; cycles when "
                   "larger).")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True,
              help="Share of runs to score (deterministic per trace id).")
@click.option("--worst", type=click.IntRange(min=0), default=DEFAULT_WORST, show_default=True,
              help="Worst records to list per score in the report printed at the end (as "
                   "`tracescore report`).")
@click.option("--judge", "judge", metavar="SPEC", default=None,
              help="Also score with the LLM-judge RAG metrics, using this judge: 'local' (the "
                   "tiny bundled model: proves the offline path, not the scores), "
                   "'llama-cpp:/path/model.gguf' or 'openai:MODEL'. Asks fewer questions "
                   "unless --n is given (1 with 'local', 3 otherwise).")
@click.option("--framework", type=click.Choice(["langchain", "llama-index"]),
              default="langchain", show_default=True,
              help="Which example app to run: the LangChain LCEL chain or the LlamaIndex query "
                   "engine (same corpus and questions).")
def demo(db: Path, n: int | None, sample_rate: float, worst: int, judge: str | None,
         framework: str) -> None:
    """Run the bundled offline RAG app through tracescore and print the report.

    A LangChain chain (BM25 retriever over a small bike-shop handbook, an extractive
    stand-in for the LLM) answers the bundled questions; tracescore captures each run,
    attaches the reference answer as ground truth, scores it with the default local metrics
    and stores everything in the database. Fully offline; takes a few seconds.
    """
    from .._internal.extras import require
    from ..reports.report import build_report
    from ..reports.report_text import format_report
    from .demo import DemoSetupError, JudgeUnreachable, judge_intro, judge_plan, run_demo

    try:  # the example app imports its framework: say which extra it needs, not a traceback
        require("langchain_core" if framework == "langchain" else "llama_index.core", framework)
    except ImportError as exc:
        raise MissingExtra(str(exc)) from None

    def progress(items: Iterator[Any], count: int) -> Any:
        if judge is not None and n is None:  # said once tracescore (and the judge) started
            _, canary = judge_plan(judge, n)
            for line in judge_intro(judge, count, canary):  # wording that fits the judge
                click.echo(line)
        return click.progressbar(items, length=count, label=f"Asking {_n(count, 'question')}",
                                 file=sys.stderr, show_pos=True)

    bars: list[Any] = []

    def judged(calls: int, expected: int) -> None:
        if not bars:
            bars.append(click.progressbar(length=expected, label="Judge calls",
                                          file=sys.stderr, show_pos=True))
            bars[0].__enter__()
        bar = bars[0]
        bar.length = max(bar.length, expected)
        bar.update(calls - bar.pos)

    db_existed = db.exists() if isinstance(db, Path) else True
    try:
        result = run_demo(db, n, sample_rate, progress=progress, judge=judge,
                          framework=framework, judge_progress=judged)
    except JudgeUnreachable as exc:  # one line, exit code 3 (as judge-check), no wait
        from .judge_check import EXIT_UNREACHABLE, JudgeProblem

        raise JudgeProblem(str(exc), EXIT_UNREACHABLE) from None
    except DemoSetupError as exc:
        raise DatabaseProblem(cli_message(exc)) from None
    finally:
        if bars:
            bars[0].__exit__(None, None, None)
    where = Path(result.db).resolve() if isinstance(db, Path) else _name(db)
    click.echo(
        f"Ran {_n(result.questions, 'question')} in {result.run_seconds:.2f} s, scored them in "
        f"{result.score_seconds:.2f} s; {'appended to' if db_existed else 'wrote'} {where}"
    )
    if not result.complete:
        click.echo("Warning: scoring did not finish in time; the report shows what is done.",
                   err=True)
    conn = _open(Path(result.db) if isinstance(db, Path) else db)
    try:
        report = build_report(conn, worst=worst, db=_name(result.db))
    finally:
        conn.close()
    click.echo("")
    click.echo(format_report(report))
    opt = f"--db {shlex.quote(str(db))}"
    click.echo(f"\nNext: tracescore report {opt}\n      tracescore show {result.trace_ids[0][:12]} {opt}")


@main.command("judge-check", short_help="Check a judge against known-answer verdict cases.")
@click.option("--judge", "judge", metavar="SPEC", required=True,
              help="The judge to check: 'openai:MODEL' (OPENAI_API_KEY / OPENAI_BASE_URL), "
                   "'llama-cpp:/path/model.gguf' or 'local'.")
@_db_option("tracescore.db", "Database (SQLite file or postgresql:// URL) where the verdicts "
            "are cached and the result is stored (shown by `tracescore report`).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0.1), default=60.0,
              show_default=True, metavar="SECONDS",
              help="Seconds one judge call may take before it is retried (the up-front "
                   "reachability check waits at most 10).")
def judge_check(judge: str, db: Path, as_json: bool, timeout: float) -> None:
    """Run the judge canary: claims supported by, contradicted by or unrelated to a context,
    and relevant or irrelevant contexts, all with known answers. Verdicts are cached in the
    database like any judge step.

    \b
    Exit codes:
      0  the judge agrees with the known answers
      1  the judge is degenerate (always the same verdict, or agreement near
         chance): its scores cannot be trusted
      2  usage error (unknown --judge spec, missing key, unusable database)
      3  the judge cannot be reached or does not answer (connection refused,
         no answer within --timeout, server errors through every retry)
      4  the judge answered but refused every request (bad key, unknown model),
         or the check failed otherwise
    """
    from ..judge import resolve_judge
    from .judge_check import JudgeProblem, run_judge_check

    try:
        backend = resolve_judge(judge)
    except (ValueError, ImportError, TypeError) as exc:
        raise click.UsageError(cli_message(exc)) from None
    try:
        result = run_judge_check(backend, str(db), timeout)
    except JudgeProblem as exc:
        if as_json:
            click.echo(json.dumps({"model": backend.model, "error": exc.message,
                                   "exit_code": exc.exit_code}))
        raise
    if as_json:
        click.echo(json.dumps({"model": backend.model, **result.as_dict()}))
    else:
        click.echo(f"judge {backend.model}: agreed with {result.agreement:.0%} of "
                   f"{result.cases} known answers; said yes to {result.yes_share:.0%}")
        click.echo(f"DEGENERATE: {result.reason}" if result.degenerate else "OK")
    if result.degenerate:
        sys.exit(1)


@main.command(short_help="Summarise the scores: per metric, worst records, totals.")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--since", metavar="DURATION", default="all", show_default=True, callback=_since,
              help="Only records and scores from this recent window: 30m, 1h, 2d, 1w, or all.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of the table.")
@click.option("--worst", type=click.IntRange(min=0), default=DEFAULT_WORST, show_default=True,
              help="How many worst records to list per score (0: none).")
@click.option("--html", "html_path", metavar="PATH",
              type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
              help="Write a self-contained HTML page (charts per score, worst records with "
                   "contexts, cost) to PATH instead of printing the table; - for stdout.")
@click.option("--rgb", "rgb", is_flag=True,
              help="Print RGB's four abilities instead: accuracy by context noise (0-80%), "
                   "rejection rate with no relevant context, integration accuracy, "
                   "counterfactual error detection/correction (needs the rgb_noise metric).")
@click.option("--by", "by", metavar="DIM", default=None,
              help="Also split the report by a segment: release, environment, model, "
                   "judge_model, metric_version or metadata.KEY; each number with its "
                   "interval.")
@_where_option()
def report(db: Path, since: float | None, as_json: bool, worst: int,
           html_path: Path | None, rgb: bool, by: str | None, where: dict[str, str]) -> None:
    """Summarise the scores: per score count, mean with its 95 % interval, p10/p50/p90,
    fail rate, errors, skips; the monitors' states first.

    Also lists the worst records of each score (lowest values; highest for metrics where
    lower is better) and totals: records, sampled, dropped, pending scoring jobs.
    With --html, writes the same as one HTML page with charts instead. With --rgb, prints
    RGB's four abilities on the live records (docs/rgb.md) instead.
    """
    from ..reports.report import build_report
    from ..reports.report_text import format_report

    if as_json and html_path is not None:
        raise click.UsageError("--json and --html cannot be combined")
    if rgb and html_path is not None:
        raise click.UsageError("--rgb and --html cannot be combined")
    if rgb:
        from ..reports.rgb import format_rgb, rgb_live

        conn = _open(db)
        try:
            live = rgb_live(conn, since=since, db=_name(db))
        finally:
            conn.close()
        click.echo(json.dumps(live.to_json(), ensure_ascii=False) if as_json
                   else format_rgb(live))
        return
    conn = _open(db)
    try:
        from ..read.query import dims_of

        dims = dims_of(conn)
        for dim in ([by] if by else []) + list(where):
            if dim not in dims:
                raise click.BadParameter(
                    f"unknown dimension {dim!r}; this database has: {', '.join(dims)}",
                    param_hint="--by" if dim == by else "--where")
        rep = build_report(conn, since=since, worst=worst, db=_name(db), by=by,
                           where=where)
        if html_path is not None:
            from ..reports.html import render_html
            from ..reports.report import build_page
            from ..reports.trend import build_trend

            page = render_html(build_page(conn, rep),
                               build_trend(conn, since=since, where=where or None))
    finally:
        conn.close()
    if html_path is not None:
        with _output(html_path) as out:
            out.write(page)
        if str(html_path) != "-":
            worst_n = page.count('<article class="card record"')
            click.echo(f"Wrote {html_path.resolve()} ({len(rep.metrics)} scores, "
                       f"{worst_n} worst records)", err=True)
        return
    if as_json:
        click.echo(json.dumps(rep.to_json(), ensure_ascii=False))
    else:
        click.echo(format_report(rep))


@main.command(short_help="Check judge metrics against human labels and user feedback.")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--metric", "metrics", metavar="NAME", multiple=True,
              help="Only this score name (repeatable); default: every score name with human "
                   "labels, and every judge metric with a pass/fail threshold for feedback.")
@click.option("--feedback", "feedback", metavar="NAME", default="user", show_default=True,
              help="Which feedback to compare with: the name given to ts.add_feedback.")
@click.option("--by", "by", metavar="DIM", default=None,
              help="Also give the agreement with human labels per segment: judge_model, "
                   "metric_version, release, environment, model or metadata.KEY.")
@click.option("--since", metavar="DURATION", default="all", show_default=True, callback=_since,
              help="Only labelled scores from this recent window: 30m, 1h, 2d, 1w, or all.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of the tables.")
def calibrate(db: Path, metrics: tuple[str, ...], feedback: str, by: str | None,
              since: float | None, as_json: bool) -> None:
    """Compare judge metrics with human labels and with users' feedback.

    Human labels (ts.add_label, tracescore label), per score name: n, accuracy, Cohen's
    kappa with its 95 % interval and the confusion matrix (yes/no scores), Spearman with its
    interval and MAE (numeric scores), and the judge's bias (judge mean - human mean) with
    its paired t interval; several annotators on a trace count as their mean (yes/no: the
    majority). Fewer than 10 labelled pairs: "not enough labels". --by splits it per segment.

    Feedback (ts.add_feedback): pairs are the scored records of traces with feedback
    (positive: value >= 0.5 or a label such as good/up). Per binary or thresholded judge
    metric: n, precision, recall, F1 and accuracy at the metric's own threshold, ROC AUC, a
    precision-recall curve over thresholds 0.05-0.95 and the threshold with the best F1.
    Fewer than 5 pairs: "not enough feedback".
    """
    from ..reports import calibration
    from ..reports.trust_calibrate import calibrate_labels
    from ..reports.trust_text import label_calibration_lines

    conn = _open(db)
    try:
        try:
            labels = calibrate_labels(conn, metrics=metrics, by=by, since=since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--by") from None
        cal = calibration.calibrate(conn, metrics=metrics, feedback=feedback, db=_name(db))
    finally:
        conn.close()
    if as_json:
        click.echo(json.dumps({**cal.to_json(), "labels": labels.to_json()},
                              ensure_ascii=False))
        return
    from ..reports.textfmt import printable

    if cal.traces:
        click.echo(calibration.format_calibration(cal))
    else:  # no feedback: one line, not a section of empty tables
        others = ", ".join(f"{k} ({v} traces)" for k, v in cal.other_feedback.items())
        click.echo(printable(f"Feedback: none named {cal.feedback!r} in {cal.db}"
                             + (f" (other names: {others}; use --feedback NAME)" if others
                                else " (ts.add_feedback(trace_id, value) records some)")))
    click.echo(printable("\n".join(["", *label_calibration_lines(labels)]), keep="\n"))


@main.command(short_help="Show one trace: query, contexts, answer and every score.")
@click.argument("trace_id")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the record(s) as one JSON object.")
@click.option("--chars", type=click.IntRange(min=0), default=300, show_default=True,
              help="Characters of each context to print.")
@click.option("--session", "as_session", is_flag=True,
              help="TRACE_ID is a session key: show the session as a conversation (its "
                   "turns, the marks its scores put on them, the session's scores).")
@click.option("--html", "html_path", metavar="PATH", type=click.Path(path_type=Path),
              default=None, help="With a session: write it as one HTML page (- for stdout).")
def show(trace_id: str, db: Path, as_json: bool, chars: int, as_session: bool,
         html_path: Path | None) -> None:
    """Show the record(s) of one trace with contexts, answer and every score.

    TRACE_ID is a trace id, a unique prefix of one, or a record id (TRACE-SPAN); with
    --session, a session key (a session's own record also shows as its conversation).
    Exits with code 1 when nothing matches.
    """
    from ..read.records import find_records, record_details
    from ..reports.conversation import format_session, session_view
    from ..reports.show import format_records
    from ..store.base import redact_text

    try:
        conn = _open(db)
    except DatabaseProblem as exc:  # a driver's message may quote a piece of the password
        raise DatabaseProblem(redact_text(exc.message, db)) from None
    view = None
    try:
        rows, candidates = ([], []) if as_session else find_records(conn, trace_id)
        if as_session or (len(rows) == 1 and rows[0].get("source") == "session"):
            view = session_view(conn, trace_id if as_session else rows[0]["session_id"])
        recs = [record_details(conn, r) for r in rows]
    finally:
        conn.close()
    if as_session and view is None:
        raise click.ClickException(f"no session {trace_id!r} in {_name(db)}")
    if html_path is not None and view is None:
        raise click.UsageError("--html writes a session's page: give --session KEY")
    if view is not None and html_path is not None:
        from ..reports.html import render_session_html

        with _output(html_path) as out:
            out.write(render_session_html(view))
        if str(html_path) != "-":
            click.echo(f"Wrote {html_path.resolve()} (session {view['session_id']}, "
                       f"{len(view['turns'])} turns)")
        return
    if view is not None:
        click.echo(json.dumps({"session": view}, ensure_ascii=False, default=str) if as_json
                   else format_session(view))
        return
    if not recs:
        if candidates:
            more = "" if len(candidates) <= 10 else ", …"
            raise click.ClickException(
                f"{trace_id!r} matches several traces in {_name(db)}: "
                f"{', '.join(candidates[:10])}{more}; give more characters"
            )
        raise click.ClickException(
            f"no record with trace or record id {trace_id!r} in {_name(db)}")
    if as_json:
        click.echo(json.dumps({"records": recs}, ensure_ascii=False))
    else:
        click.echo(format_records(recs, context_chars=chars))


@main.command(short_help="Score the jobs of a shared database: a fleet's scoring process.")
@_db_option(DEFAULT_DB, "Database whose jobs to score: a postgresql:// URL shared by the fleet "
            "(or a SQLite file on this host).")
@click.option("--metric", "metrics", metavar="NAME", multiple=True,
              help="A metric to score (repeatable); default: the --metrics-module's METRICS, "
                   "else the default metrics. Must match the app's metrics.")
@click.option("--metrics-module", metavar="MODULE",
              help="Dotted path of a module to import first (from the current folder or the "
                   "environment): it registers custom metrics or lists them in METRICS.")
@click.option("--judge", metavar="SPEC", default=None,
              help="LLM judge for judge metrics: 'openai:MODEL', 'llama-cpp:/path.gguf', "
                   "'local'.")
@click.option("--embedder", metavar="SPEC", default=None,
              help="Embedding model for embedding metrics: 'local' or 'openai:MODEL'.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Jobs scored at once by this process.")
@click.option("--lease-seconds", type=click.FloatRange(min=1.0), default=120.0,
              show_default=True,
              help="Lease of a job; a dead worker's jobs return after this long.")
@click.option("--exporter", type=click.Choice(["otlp", "none"]), default=None,
              help="Send scores (carrier spans, evaluation log records) and pipeline metrics "
                   "over OTLP (OTEL_* variables). Default: otlp when "
                   "OTEL_EXPORTER_OTLP_ENDPOINT is set, else none.")
@click.option("--stop-timeout", type=click.FloatRange(min=0.0), default=30.0,
              show_default=True,
              help="On SIGTERM: seconds for jobs in flight to finish before the rest are given "
                   "back.")
@click.option("--health-port", type=click.IntRange(0, 65535), default=None,
              help="Serve GET /livez and /readyz on this port (on --health-host).")
@click.option("--health-host", metavar="ADDRESS", default="127.0.0.1", show_default=True,
              help="Address the --health-port server listens on (this host only by default; "
                   "0.0.0.0 for an orchestrator's probes, e.g. a Kubernetes httpGet probe).")
@click.option("--health-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Touch this file every 2 s while live and ready (for exec probes).")
@click.option("--judge-calls-per-minute", type=click.FloatRange(min=0.0, min_open=True),
              default=None,
              help="Judge calls per minute for the whole fleet (held in the database).")
@click.option("--judge-price", metavar="IN,OUT", default=None,
              help="USD per million input,output tokens (counts spend).")
@click.option("--judge-daily-budget-usd", type=click.FloatRange(min=0.0, min_open=True),
              default=None, help="Judge spend per UTC day for the whole fleet.")
@click.option("--no-judge-canary", is_flag=True, help="Skip the judge's start-up canary.")
@click.option("--judge-budget", metavar="N/day", default=None,
              help="Judged records a day per judge metric for the whole fleet (held in the "
                   "database), chosen adaptively; e.g. 2000/day (docs/judge_budget.md).")
@click.option("--monitors", "monitors", metavar="FILE", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also evaluate these monitors every minute and send their notifications "
                   "(one evaluator per database at a time: the fleet's workers share it).")
@click.option("--session-idle", "session_idle", metavar="DURATION", default=None,
              help="Also close sessions after this long without a turn (5m, 30m) and score "
                   "them as a unit (docs/sessions.md); the fleet's workers share the "
                   "sessions (each is claimed by one).")
@click.option("--session-metric", "session_metrics", metavar="NAME", multiple=True,
              help="With --session-idle: an LLM-judge session metric to score on each closed "
                   "session (conversation_relevancy, knowledge_retention; repeatable).")
def worker(db: Path | str, metrics: tuple[str, ...], metrics_module: str | None,
           judge: str | None, embedder: str | None, concurrency: int, lease_seconds: float,
           exporter: str | None, stop_timeout: float, health_port: int | None,
           health_host: str, health_file: Path | None, judge_calls_per_minute: float | None,
           judge_price: str | None, judge_daily_budget_usd: float | None,
           no_judge_canary: bool, judge_budget: str | None, monitors: Path | None,
           session_idle: str | None, session_metrics: tuple[str, ...]) -> None:
    """Run a scoring worker until SIGTERM: lease jobs from the database, score them, store
    the scores and export them on carrier spans and evaluation log records. Run as many
    copies as the queue needs (docs/fleet.md); app processes then use init(score=False).
    """
    from .worker import install_stop_handlers, load_metrics, run_worker

    # first: a SIGTERM while the metrics module imports (or during init) is a clean stop
    stop = install_stop_handlers()
    price = None
    if judge_price:
        try:
            a, b = (float(x) for x in judge_price.split(","))
            price = (a, b)
        except ValueError:
            raise click.BadParameter("use IN,OUT in USD per million tokens, e.g. 0.15,0.6",
                                     param_hint="--judge-price") from None
    if exporter is None:
        exporter = "otlp" if (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                              or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) \
            else "none"
    try:
        chosen = load_metrics(metrics, metrics_module)
    except ImportError as exc:
        raise click.UsageError(f"--metrics-module: {exc}") from None
    try:
        code = run_worker(
            db=str(db), metrics=chosen, judge=judge, embedder=embedder,
            concurrency=concurrency, lease_seconds=lease_seconds,
            exporter=None if exporter == "none" else exporter, stop_timeout=stop_timeout,
            health_port=health_port, health_host=health_host, health_file=health_file,
            judge_calls_per_minute=judge_calls_per_minute, judge_price=price,
            judge_daily_budget_usd=judge_daily_budget_usd, judge_canary=not no_judge_canary,
            monitors=None if monitors is None else str(monitors), stop=stop,
            judge_budget=judge_budget, session_idle=session_idle,
            session_metrics=session_metrics)
    except (ValueError, TypeError, ImportError) as exc:  # init's checks, a missing extra
        raise click.UsageError(cli_message(exc)) from None
    raise SystemExit(code)
