"""``tracescore ui``: the database in Datasette, read-only, with canned queries.

Datasette is an optional extra (``pip install 'tracescore[ui]'``) and runs as a child process
(``python -m datasette``) on 127.0.0.1. The canned queries are plain SQL in
:func:`canned_queries`, so tests and other tools can run them without Datasette.

The database is served *mutable* rather than ``--immutable``: Datasette then reads it with
SQLite's ``mode=ro`` and sees rows still in the write-ahead log of a running app, whereas
immutable mode would skip the log and could show a stale or torn view. No canned query
writes. Everything here blocks (subprocess, HTTP polling).

Datasette answers only requests whose ``Host`` header names the address it was started for
(``127.0.0.1``, ``localhost``, ``[::1]``, any port): a page on another site that points its
own name at 127.0.0.1 (DNS rebinding) gets 403 instead of the captured data. The check is
:class:`HostGuard`, an ASGI wrapper loaded into Datasette as a one-file plugin.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

__all__ = [
    "HOST",
    "DatasetteMissing",
    "HostGuard",
    "canned_queries",
    "database_name",
    "datasette_available",
    "free_port",
    "metadata",
    "query_params",
    "serve",
]

HOST = "127.0.0.1"
INSTALL_HINT = "pip install 'tracescore[ui]'"


class DatasetteMissing(RuntimeError):
    """Datasette is not installed in this environment."""


def datasette_available() -> bool:
    return importlib.util.find_spec("datasette") is not None


# -- canned queries ---------------------------------------------------------------------------
# Datasette passes a parameter the form left empty as "", hence nullif(:p, '') for defaults.
_HOURS = "coalesce(nullif(:hours, ''), 24)"


#: ``worst_scores_today``'s metric when the database has its scores (else see
#: :func:`default_metric`).
PREFERRED_METRIC = "faithfulness"


def default_metric(conn: sqlite3.Connection) -> str:
    """The score name ``worst_scores_today`` shows by default: faithfulness when the
    database has ok scores of it, else the score name with the most ok scores (the demo
    computes no faithfulness), else faithfulness."""
    rows = conn.execute(
        "SELECT name, count(*) AS n FROM scores WHERE status = 'ok' AND value IS NOT NULL"
        " GROUP BY name ORDER BY n DESC, name"
    ).fetchall()
    names = [r[0] for r in rows]
    if PREFERRED_METRIC in names or not names:
        return PREFERRED_METRIC
    return str(names[0])


def canned_queries(*, has_metrics_table: bool = True, metric: str = PREFERRED_METRIC,
                   has_judge_decisions: bool = False) -> dict[str, dict[str, Any]]:
    """The canned queries: name → Datasette query metadata (``title``, ``sql``, ...).

    ``has_metrics_table``: databases written before the ``metrics`` table existed cannot
    look up a metric's direction; "worst" then means lowest. ``metric``: the score name
    ``worst_scores_today`` shows when its ``:metric`` is left empty. ``has_judge_decisions``
    (a database with judge budgets): the per-hour and per-day means get a ``population``
    column that says, for a judge metric judged within a budget, that the mean is of the
    judged records only (biased under adaptive selection; ``tracescore report`` has the
    active estimate).
    """
    # a budgeted judge metric's plain mean is not the population's: say so in every row
    population = (
        ", CASE WHEN EXISTS (SELECT 1 FROM judge_decisions d WHERE d.metric ="
        " (SELECT h.metric FROM hourly_scores h WHERE h.name = scores.name LIMIT 1)) THEN 'judged records only (judge budget: biased, see"
        " tracescore report for the active estimate)' ELSE 'scored records' END AS population"
        if has_judge_decisions else "")
    literal = "'" + metric.replace("'", "''") + "'"  # a SQL string literal
    # "Worst" follows the metric's declared direction: highest first when lower is better.
    order = ("CASE WHEN m.higher_is_better = 0 THEN -s.value ELSE s.value END"
             if has_metrics_table else "s.value")
    direction_join = (" LEFT JOIN metrics m ON m.metric = s.metric" if has_metrics_table
                      else "")
    return {
        "worst_scores_today": {
            "title": "Worst scores today",
            "description": (
                "The lowest-scored records of the last :hours hours (default 24) for one "
                f"score name (:metric, default {metric}; e.g. token_f1, rouge_l, bleu). "
                "Highest first for metrics where lower is better."
            ),
            "sql": (
                "SELECT datetime(s.created_at, 'unixepoch') AS scored_at_utc, s.name,"
                " round(s.value, 4) AS value, s.label, r.query, r.answer, s.explanation,"
                " r.trace_id, s.record_id"
                f" FROM scores s JOIN records r ON r.record_id = s.record_id{direction_join}"
                f" WHERE s.name = coalesce(nullif(:metric, ''), {literal})"
                " AND s.status = 'ok' AND s.value IS NOT NULL"
                f" AND s.created_at >= strftime('%s', 'now') - 3600 * {_HOURS}"
                f" ORDER BY {order}, s.created_at DESC LIMIT 100"
            ),
        },
        "failure_rate_by_hour": {
            "title": "Failure rate by metric per hour",
            "description": (
                "Per hour (UTC) and score name, newest first: scores, fails (labelled fail "
                "against the metric's threshold), fail_rate = fails / labelled ok scores, "
                "errors and the mean value. Optional :metric filters to one score name."
            ),
            "sql": (
                "SELECT strftime('%Y-%m-%d %H:00', created_at, 'unixepoch') AS hour_utc, name,"
                " count(*) AS scores,"
                " sum(status = 'ok' AND label = 'fail') AS fails,"
                " round(1.0 * sum(status = 'ok' AND label = 'fail')"
                " / nullif(sum(status = 'ok' AND label IS NOT NULL), 0), 4) AS fail_rate,"
                " sum(status = 'error') AS errors,"
                " round(avg(CASE WHEN status = 'ok' THEN value END), 4) AS mean_value"
                + population +
                " FROM scores WHERE (nullif(:metric, '') IS NULL OR name = :metric)"
                " GROUP BY hour_utc, name ORDER BY hour_utc DESC, name"
            ),
        },
        "records_without_scores": {
            "title": "Records without scores",
            "description": (
                "Records with no ok score, newest first, and why: not sampled, scoring jobs "
                "still pending, skipped (with the reason) or failed (with the error)."
            ),
            "sql": (
                "SELECT datetime(r.created_at, 'unixepoch') AS created_utc, r.query,"
                " CASE WHEN r.sampled = 0 THEN 'not sampled' ELSE 'sampled' END AS sampling,"
                " (SELECT group_concat(j.metric || ': ' || j.status"
                " || coalesce(' (' || j.reason || ')', ''), '; ')"
                " FROM jobs j WHERE j.rec = r.seq) AS jobs,"
                " (SELECT group_concat(s.name || ': ' || s.status"
                " || coalesce(' (' || s.error || ')', ''), '; ')"
                " FROM scores s WHERE s.rec = r.seq) AS scores,"
                " r.trace_id, r.record_id"
                " FROM records r WHERE NOT EXISTS (SELECT 1 FROM scores s"
                " WHERE s.rec = r.seq AND s.status = 'ok')"
                " ORDER BY r.created_at DESC LIMIT 1000"
            ),
        },
        "errors_by_reason": {
            "title": "Errors and skips by reason",
            "description": (
                "Why scoring failed or was skipped, most frequent first: score errors (first "
                "line of the error) and skipped jobs (the skip reason), with the last time "
                "seen and an example trace."
            ),
            "sql": (
                "SELECT kind, metric, reason, count(*) AS n,"
                " datetime(max(at), 'unixepoch') AS last_seen_utc,"
                " max(trace_id) AS example_trace"
                " FROM ("
                " SELECT 'error' AS kind, name AS metric,"
                " substr(error, 1, instr(error || char(10), char(10)) - 1) AS reason,"
                " created_at AS at, trace_id FROM scores WHERE status = 'error'"
                " UNION ALL"
                " SELECT 'skipped', j.metric, coalesce(j.reason, ''), j.updated_at,"
                " r.trace_id FROM jobs j JOIN records r ON r.record_id = j.record_id"
                " WHERE j.status = 'skipped'"
                ") GROUP BY kind, metric, reason ORDER BY n DESC, last_seen_utc DESC"
            ),
        },
        "daily_summary": {
            "title": "Daily summary per metric",
            "description": (
                "Per day (UTC) and score name: ok scores, mean, min, max, fail rate and "
                "errors. The trend the HTML report draws, as a table."
            ),
            "sql": (
                "SELECT date(created_at, 'unixepoch') AS day_utc, name,"
                " sum(status = 'ok') AS ok_scores,"
                " round(avg(CASE WHEN status = 'ok' THEN value END), 4) AS mean_value,"
                " round(min(CASE WHEN status = 'ok' THEN value END), 4) AS min_value,"
                " round(max(CASE WHEN status = 'ok' THEN value END), 4) AS max_value,"
                " round(1.0 * sum(status = 'ok' AND label = 'fail')"
                " / nullif(sum(status = 'ok' AND label IS NOT NULL), 0), 4) AS fail_rate,"
                " sum(status = 'error') AS errors" + population +
                " FROM scores GROUP BY day_utc, name ORDER BY day_utc DESC, name"
            ),
        },
    }


def query_params(sql: str) -> list[str]:
    """The ``:named`` parameters of a canned query, in order of first use."""
    return list(dict.fromkeys(re.findall(r"(?<!:):([a-z_][a-z0-9_]*)", sql)))


def database_name(db: Path) -> str:
    """The name Datasette gives a database file (its stem)."""
    return db.stem


def metadata(db: Path, *, has_metrics_table: bool = True, metric: str = PREFERRED_METRIC,
             has_judge_decisions: bool = False) -> dict[str, Any]:
    """Datasette metadata: title, table descriptions and the canned queries of ``db``."""
    queries = canned_queries(has_metrics_table=has_metrics_table, metric=metric,
                             has_judge_decisions=has_judge_decisions)
    for q in queries.values():
        q["params"] = query_params(q["sql"])
    return {
        "title": f"tracescore · {db.name}",
        "description": ("Records captured by tracescore and their scores. Times are unix "
                        "seconds (UTC); the canned queries below format them."),
        "databases": {
            database_name(db): {
                "queries": queries,
                "tables": {
                    "records": {
                        "description": "One captured RAG run per row (contexts as JSON).",
                        "sort_desc": "created_at",
                    },
                    "scores": {
                        "description": ("One score per (record, score name); status ok, "
                                        "error or skipped."),
                        "sort_desc": "created_at",
                    },
                    "jobs": {"description": "Scoring jobs: pending, leased, done, skipped."},
                    "metrics": {"description": "What each configured metric declares."},
                    "counters": {"description": "Pipeline counters (e.g. records_dropped)."},
                },
            }
        },
    }


# -- serving ----------------------------------------------------------------------------------
#: The names a request to the bound address may carry in its ``Host`` header.
LOCAL_HOSTS = (HOST, "localhost", "::1")

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def host_name(header: str) -> str:
    """The host of a ``Host`` header without its port, lower case, without a trailing dot
    (``[::1]:8001`` → ``::1``, ``LocalHost.:80`` → ``localhost``)."""
    h = header.strip().lower()
    if h.startswith("["):
        h = h[1:h.find("]")] if "]" in h else h[1:]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


class HostGuard:
    """ASGI wrapper: requests whose ``Host`` header (without its port) is not one of
    ``allowed`` get 403, as do requests without one; the rest go to ``app``. Defends a
    server bound to a loopback address against DNS rebinding."""

    def __init__(self, app: _App, allowed: Iterable[str] = LOCAL_HOSTS) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed)

    def allows(self, header: str | None) -> bool:
        return header is not None and host_name(header) in self.allowed

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] in ("http", "websocket"):
            raw = dict(scope.get("headers") or ()).get(b"host")
            if not self.allows(None if raw is None else raw.decode("latin-1")):
                await self._refuse(scope, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: _Scope, send: _Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b"403 Forbidden: this server answers only requests to its local address\n"
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


# Loaded by Datasette from --plugins-dir: wraps its ASGI app in HostGuard. This module is
# loaded by its path (it imports only the standard library at the top), so the plugin gets
# this HostGuard even when the current directory holds another "tracescore".
_PLUGIN = """\
import importlib.util

from datasette import hookimpl

_spec = importlib.util.spec_from_file_location("_tracescore_ui_guard", {path!r})
_ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ui)
ALLOWED = {allowed!r}


@hookimpl
def asgi_wrapper(datasette):
    return lambda app: _ui.HostGuard(app, ALLOWED)
"""


def _write_host_plugin(directory: Path, allowed: Iterable[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tracescore_host_guard.py").write_text(
        _PLUGIN.format(path=str(Path(__file__).resolve()), allowed=tuple(allowed)),
        encoding="utf-8")
    return directory


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _url(db: Path, port: int) -> str:
    from datasette.utils import tilde_encode  # type: ignore[import-untyped,unused-ignore]

    return f"http://{HOST}:{port}/{tilde_encode(database_name(db))}"


def _wait_ready(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/-/versions.json", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def serve(db: Path, *, port: int, has_metrics_table: bool = True,
          on_ready: Callable[[str], None] | None = None, ready_timeout_s: float = 60.0,
          metric: str = PREFERRED_METRIC, has_judge_decisions: bool = False) -> int:
    """Run Datasette on ``db`` at 127.0.0.1:``port`` until it exits or Ctrl-C; its exit code.

    Only requests whose ``Host`` names a local address are answered (:class:`HostGuard`).
    ``port`` 0 picks a free port. ``on_ready(url)`` is called once Datasette answers HTTP.
    Raises :class:`DatasetteMissing` when Datasette is not installed.
    """
    if not datasette_available():
        raise DatasetteMissing(f"Datasette is not installed; {INSTALL_HINT}")
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="tracescore-ui-") as tmp:
        meta = Path(tmp) / "metadata.json"
        meta.write_text(json.dumps(metadata(db, has_metrics_table=has_metrics_table,
                                            metric=metric,
                                            has_judge_decisions=has_judge_decisions),
                                   indent=2), encoding="utf-8")
        plugins = _write_host_plugin(Path(tmp) / "plugins", LOCAL_HOSTS)
        cmd = [sys.executable, "-m", "datasette", "serve", str(db), "--host", HOST,
               "--port", str(port), "--metadata", str(meta), "--plugins-dir", str(plugins)]
        proc = subprocess.Popen(cmd)
        restore = _stop_on_sigterm()
        try:
            if _wait_ready(proc, port, ready_timeout_s) and on_ready is not None:
                on_ready(_url(db, port))
            return proc.wait()
        except KeyboardInterrupt:
            return 0  # Ctrl-C reached Datasette too; the finally below makes sure it stops
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            restore()


def _stop_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM unwind like Ctrl-C, so a killed ``tracescore ui`` stops its Datasette
    instead of leaving it orphaned; returns the function that restores the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)

    return restore
