"""``tracescore compare``, ``check`` and ``monitor``: is quality changing, and who is told.

- ``compare`` — two releases / environments / models / judge models / metadata values, or two
  time windows, per score, with intervals, adjusted p-values and verdicts (exit 0).
- ``check`` — evaluates every monitor once, prints the states and delivers the notifications
  due; exit 0 (no alert), 1 (an alert, or ``--compare`` found a regression), 2 (bad
  configuration or database). For cron jobs and deployment gates.
- ``monitor`` — evaluates the monitors on a schedule until stopped (SIGTERM/SIGINT).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
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
    _since,
    _where_option,
)
from .commands import main

EXIT_OK, EXIT_ALERT, EXIT_CONFIG = 0, 1, 2


class ConfigProblem(click.ClickException):
    """A monitors file or a comparison that cannot be used: exit 2."""

    exit_code = EXIT_CONFIG


def _duration(text: str | None) -> float | None:
    from ..read.db import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _comparison(conn: Any, db: Any, **kw: Any) -> Any:
    from ..reports.compare import CompareError, build_comparison

    try:
        return build_comparison(conn, db=_name(db), **kw)
    except CompareError as exc:
        raise ConfigProblem(str(exc)) from None


_STATS_HELP = ("Per score: n and mean (or rate) on each side with 95 % intervals, the "
               "difference with its 95 % interval (Welch for means, Newcombe for rates, the "
               "MOVER interval from a range bound where a side has no spread), p-values "
               "adjusted across all rows (Holm by default), and a verdict: regressed, improved, "
               "no change, no evidence, or not enough data.")


@main.command(short_help="Compare two releases, environments, models or time windows.")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--by", "by", metavar="DIM", default=None,
              help="What to compare: release (default), environment, model, judge_model, "
                   "metric_version or metadata.KEY (a key of init(segments=[...])).")
@click.option("--current", "current", metavar="VALUE|DURATION", default=None,
              help="The current side: a value of --by (default: the newest), or with "
                   "durations (--current 1d --baseline 7d) the last day against the 7 days "
                   "before it.")
@click.option("--baseline", "baseline", metavar="VALUE|DURATION", default=None,
              help="The baseline side (default: the second newest value of --by).")
@click.option("--since", metavar="DURATION", default="all", show_default=True, callback=_since,
              help="Only records and scores from this recent window (segment comparisons).")
@_where_option()
@click.option("--min-n", type=click.IntRange(min=1), default=30, show_default=True,
              help="Fewer scored records than this on a side: 'not enough data'.")
@click.option("--min-effect", type=click.FloatRange(min=0.0), default=0.02, show_default=True,
              help="'no change' when the difference's interval lies inside ±this.")
@click.option("--alpha", type=click.FloatRange(0.0, 0.5, min_open=True), default=0.05,
              show_default=True, help="Significance level of the adjusted p-values.")
@click.option("--adjust", type=click.Choice(["holm", "fdr_bh"]), default="holm",
              show_default=True,
              help="Multiple-comparison adjustment: holm (family-wise error, for gates) or "
                   "fdr_bh (Benjamini-Hochberg false discovery rate).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--html", "html_path", metavar="PATH",
              type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
              help="Write a self-contained HTML page with an interval bar per score.")
def compare(db: Path, by: str | None, current: str | None, baseline: str | None,
            since: float | None, where: dict[str, str], min_n: int, min_effect: float,
            alpha: float, adjust: str, as_json: bool, html_path: Path | None) -> None:
    """Compare two segments or two time windows, score by score.

    Examples: `tracescore compare` (the two newest releases), `tracescore compare --by
    environment --current canary --baseline production`, `tracescore compare --current 1d
    --baseline 7d` (the last day against the 7 days before it).
    """
    if as_json and html_path is not None:
        raise click.UsageError("--json and --html cannot be combined")
    kw: dict[str, Any] = dict(where=where, min_n=min_n, min_effect=min_effect,
                              alpha=alpha, adjust=adjust)
    cw, bw = _duration(current), _duration(baseline)
    if by in (None, "time") and (cw is not None or bw is not None):
        if cw is None or bw is None:
            raise click.UsageError("a comparison over time needs two durations: "
                                   "--current 1d --baseline 7d")
        kw.update(by="time", current_window=cw, baseline_window=bw)
    else:
        kw.update(by=by or "release", current=current, baseline=baseline, since=since)
    conn = _open(db)
    try:
        c = _comparison(conn, db, **kw)
    finally:
        conn.close()
    if html_path is not None:
        from ..reports.html import render_comparison_html

        with _output(html_path) as out:
            out.write(render_comparison_html(c))
        if str(html_path) != "-":
            click.echo(f"Wrote {html_path.resolve()} ({len(c.rows)} rows)", err=True)
        return
    if as_json:
        click.echo(json.dumps(c.to_json(), ensure_ascii=False))
        return
    from ..reports.report_text import format_comparison

    click.echo(format_comparison(c))


compare.help = (compare.help or "") + "\n\n" + _STATS_HELP


def _load_monitors(path: Path | None, required: bool) -> Any:
    from ..monitor.config import DEFAULT_FILE, MonitorConfigError, load_monitors

    if path is None:
        if not Path(DEFAULT_FILE).is_file():
            if required:
                raise ConfigProblem(f"no monitors: pass --monitors FILE or create "
                                    f"{DEFAULT_FILE} (see examples/tracescore-monitors.toml"
                                    " and docs/monitoring.md)")
            return None
        path = Path(DEFAULT_FILE)
    try:
        return load_monitors(path)
    except FileNotFoundError:
        raise ConfigProblem(f"monitors file not found: {path}") from None
    except MonitorConfigError as exc:
        raise ConfigProblem(str(exc)) from None


def check_monitors_against(conn: Any, monitors: Any) -> None:
    """Unknown scores or undeclared segments in ``monitors`` → ConfigProblem (exit 2)."""
    from ..monitor.config import MonitorConfigError
    from ..read.metric_info import declared_segment_keys, known_scores
    from ..read.query import SegmentIndex

    known = known_scores(conn)
    dims = [d for d in SegmentIndex(conn).dims() if d.startswith("metadata.")]
    dims += [f"metadata.{k}" for k in declared_segment_keys(conn)]
    try:
        monitors.check_against(known, dims)
    except MonitorConfigError as exc:
        raise ConfigProblem(str(exc)) from None


def monitor_sight(conn: Any, db: Any, monitors: Any, only: tuple[str, ...] = ()) -> list[Any]:
    """Each monitor's minimum detectable effect for the last window's traffic
    (:mod:`tracescore.monitor.preview`); [] when the database cannot say."""
    import time

    from ..monitor.preview import preview

    states: dict[str, Any] = {}
    try:
        from ..store import monitor_state as S
        from ..store import open_store

        store = open_store(str(db))
        try:
            states = S.load_states(store)
        finally:
            store.close()
    except Exception:  # no monitor tables yet: every monitor is new
        states = {}
    try:
        items = preview(conn, monitors, time.time(), states)
    except Exception:  # a database before the rollups: nothing to say
        return []
    return [(m, s) for m, s in items if not only or m.name in only]


def _say_sight(sights: list[Any]) -> None:
    from ..monitor.preview import lines
    from ..reports.textfmt import printable

    for (_m, s), line in zip(sights, lines(sights)):
        click.echo(printable(("WARNING: " if s.blind else "") + line), err=True)


def _parse_gate(spec: str) -> tuple[str, str, str]:
    dim, sep, rest = spec.partition("=")
    cur, sep2, base = rest.partition(":")
    if not sep or not sep2 or not dim or not cur or not base:
        raise click.BadParameter(f"--compare takes DIM=CURRENT:BASELINE, e.g. "
                                 f"release=canary:stable; got {spec!r}",
                                 param_hint="--compare")
    return dim.strip(), cur.strip(), base.strip()


@main.command(short_help="Evaluate the monitors once (cron jobs, deployment gates).")
@_db_option(DEFAULT_DB, "Database to read: a SQLite file or a postgresql:// URL.",
            demo_fallback=True)
@click.option("--monitors", "monitors_path", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The monitors file (default: tracescore-monitors.toml here, if it exists).")
@click.option("--monitor", "only", metavar="NAME", multiple=True,
              help="Only this monitor (repeatable).")
@click.option("--compare", "gates", metavar="DIM=CURRENT:BASELINE", multiple=True,
              help="A deployment gate: compare two segments (e.g. release=canary:stable) and "
                   "exit 1 if any score regressed (repeatable).")
@_where_option("With --compare: only records with this segment value.")
@click.option("--min-n", type=click.IntRange(min=1), default=30, show_default=True,
              help="With --compare: fewer scored records on a side is 'not enough data'.")
@click.option("--min-effect", type=click.FloatRange(min=0.0), default=0.02, show_default=True,
              help="With --compare: 'no change' when the interval lies inside ±this.")
@click.option("--no-notify", is_flag=True,
              help="Evaluate and print, but store nothing and send nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(db: Path, monitors_path: Path | None, only: tuple[str, ...],
          gates: tuple[str, ...], where: dict[str, str], min_n: int, min_effect: float,
          no_notify: bool, as_json: bool) -> None:
    """Evaluate every monitor once, print the states, deliver due notifications.

    Exit 0: no alert; 1: a monitor is in ALERT or a --compare gate found a regression;
    2: bad configuration or database. States are stored (with their history) unless another
    evaluator (a running `tracescore monitor` or worker) holds the database's monitor lease;
    then this check evaluates read-only and says so.
    """
    from ..reports.report_text import format_comparison

    monitors = _load_monitors(monitors_path, required=not gates)
    if monitors is not None and only:
        missing = [n for n in only if n not in {m.name for m in monitors} | {"judge_drift", "judge_drift_labels"}]
        if missing:
            raise ConfigProblem(f"{monitors.source}: no monitor named "
                                f"{', '.join(map(repr, missing))}")
    out: dict[str, Any] = {"db": _name(db), "monitors": [], "gates": []}
    alert = False
    conn = _open(db)
    try:
        comparisons = []
        for spec in gates:
            dim, cur, base = _parse_gate(spec)
            c = _comparison(conn, db, by=dim, current=cur, baseline=base, where=where,
                            min_n=min_n, min_effect=min_effect)
            comparisons.append(c)
            alert = alert or bool(c.regressed)
            out["gates"].append(c.to_json())
        if monitors is not None:
            check_monitors_against(conn, monitors)
            sights = monitor_sight(conn, db, monitors, only)
            out["sight"] = {m.name: s.to_json() for m, s in sights}
            if not as_json:
                _say_sight(sights)
    finally:
        conn.close()
    evals: list[Any] = []
    held = True
    if monitors is not None:
        evals, held = _evaluate_once(db, monitors, only, save=not no_notify)
        alert = alert or any(e.state == "ALERT" for e in evals)
        out["monitors"] = [e.to_json() for e in evals]
    out["exit"] = EXIT_ALERT if alert else EXIT_OK
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False))
    else:
        for c in comparisons:
            click.echo(format_comparison(c))
            click.echo("")
        if evals:
            click.echo(format_states(evals))
        if not held and not no_notify:
            click.echo("(another evaluator holds this database's monitors: evaluated "
                       "read-only, nothing stored or sent)", err=True)
    sys.exit(EXIT_ALERT if alert else EXIT_OK)


def _evaluate_once(db: Any, monitors: Any, only: tuple[str, ...], *, save: bool
                   ) -> tuple[list[Any], bool]:
    from ..monitor.evaluate import Evaluator
    from ..monitor.notify import deliver_due

    ev = Evaluator(str(db), monitors, db_label=_name(db))
    try:
        evals = ev.run_once(save=save, only=list(only) or None)
        from ..monitor import judge_drift as drift
        from ..monitor import judge_drift_labels as drift_labels

        for mod in (drift, drift_labels):  # the built-in judge-drift monitors beside them
            if not only or mod.MONITOR in only:
                evals += mod.evaluate_with(ev, save=save)
        held = all(e.saved for e in evals) if save else False
        if save and held and monitors.channels:
            deliver_due(ev._open()[0], monitors.channels)
        ev.release()
        return evals, held
    except Exception as exc:  # the database went away mid-check
        raise DatabaseProblem(f"cannot evaluate the monitors: {exc}") from None
    finally:
        ev.close()


_BADGE = {"ALERT": "ALERT  ", "WARNING": "WARNING", "NO_DATA": "NO_DATA", "OK": "OK     "}


def format_states(evals: list[Any]) -> str:
    """The monitors' states, alerts first; names and summaries escaped for the terminal."""
    from ..reports.textfmt import printable

    lines = []
    for e in sorted(evals, key=lambda e: ({"ALERT": 0, "WARNING": 1, "NO_DATA": 2}.get(
            e.state, 3), e.monitor)):
        change = f" (was {e.previous})" if e.changed and e.previous else ""
        pending = "" if e.raw == e.state else f" [now {e.raw}; held by hysteresis]"
        lines.append(f"{_BADGE.get(e.state, e.state)}  {e.monitor}{change}: {e.summary}"
                     f"{pending}")
        if e.worst:
            lines.append(f"           worst: {', '.join(t[:12] for t in e.worst)} "
                         "(tracescore show TRACE)")
    return printable("\n".join(lines), keep="\n")


@main.command(short_help="Evaluate the monitors on a schedule until stopped.")
@_db_option(DEFAULT_DB, "Database to watch: a SQLite file or a postgresql:// URL.")
@click.option("--monitors", "monitors_path", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The monitors file (default: tracescore-monitors.toml here).")
@click.option("--interval", "interval", metavar="DURATION", default="1m", show_default=True,
              help="How often to evaluate: 30s, 1m, 5m.")
def monitor(db: Path, monitors_path: Path | None, interval: str) -> None:
    """Evaluate the monitors every --interval, store their states and send notifications,
    until SIGTERM or Ctrl-C. One evaluator per database at a time: a second `monitor` (or a
    worker with --monitors) waits and takes over when the first stops."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    # first: a stop asked for while the monitors load is still a clean stop (exit 0)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from ..monitor.runner import MonitorRunner

    every = _duration(interval)
    if every is None or every <= 0:
        raise click.BadParameter(f"{interval!r} is not a duration (30s, 1m, 5m)",
                                 param_hint="--interval")
    monitors = _load_monitors(monitors_path, required=True)
    conn = _open(db)
    try:
        check_monitors_against(conn, monitors)
        _say_sight(monitor_sight(conn, db, monitors))
    finally:
        conn.close()
    if stop.is_set():
        return
    runner = MonitorRunner(str(db), monitors, interval_s=every)
    click.echo(f"tracescore monitor: {len(monitors)} monitors on {_name(db)}, every "
               f"{interval}", err=True)
    runner.start()
    seen = [0]

    def report_changes() -> None:
        if runner.evaluations != seen[0]:
            seen[0] = runner.evaluations
            changed = [e for e in runner.last if e.changed]
            if changed:
                click.echo(format_states(changed))

    try:
        while not stop.wait(0.5):
            report_changes()
    finally:
        runner.stop()
        report_changes()  # an evaluation that ended while stopping
